package rdbparse

import "encoding/binary"

// usePCLMUL: the CPU has carry-less multiplication (CPUID.1:ECX bit 1),
// which folds the CRC at memory speed instead of a table lookup per byte.
var usePCLMUL = cpuidECX(1)&(1<<1) != 0

// cpuidECX returns ECX of CPUID for leaf (subleaf 0).
func cpuidECX(leaf uint32) uint32

// crcFoldPCLMUL folds p (a positive multiple of 64 bytes, crc xored into
// its first 8) into a 128-bit remainder: 16 bytes whose CRC from 0 is the CRC of p.
//
//go:noescape
func crcFoldPCLMUL(crc uint64, p []byte, k *[4]uint64) (lo, hi uint64)

// crcUpdate returns the CRC-64/Jones of the bytes hashed into crc followed by p.
func crcUpdate(crc uint64, p []byte) uint64 {
	if usePCLMUL && len(p) >= 64 {
		n := len(p) &^ 63
		lo, hi := crcFoldPCLMUL(crc, p[:n], &crcTab.fold)
		var r [16]byte
		binary.LittleEndian.PutUint64(r[:], lo)
		binary.LittleEndian.PutUint64(r[8:], hi)
		crc = crcGeneric(0, r[:])
		p = p[n:]
	}
	return crcGeneric(crc, p)
}
