//go:build !amd64

package rdbparse

// usePCLMUL: no accelerated CRC on this architecture.
const usePCLMUL = false

// crcUpdate returns the CRC-64/Jones of the bytes hashed into crc followed by p.
func crcUpdate(crc uint64, p []byte) uint64 { return crcGeneric(crc, p) }
