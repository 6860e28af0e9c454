package rdbparse

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The RDB length and string encodings, shared by the stream reader
// (reader.go) and the reader of kept values (blob.go).

// String encodings (the low bits of a length byte 11xxxxxx).
const (
	encInt8  = 0
	encInt16 = 1
	encInt32 = 2
	encLZF   = 3
)

// lenSize returns how many bytes the RDB length encoding that begins with b
// takes: 1 (a 6-bit length, or a string encoding 11xxxxxx), 2 (14 bits),
// 5 (0x80: 32 bits) or 9 (0x81: 64 bits); 0 for a byte that begins none.
func lenSize(b byte) int {
	switch {
	case b < 0x40, b >= 0xc0:
		return 1
	case b < 0x80:
		return 2
	case b == 0x80:
		return 5
	case b == 0x81:
		return 9
	}
	return 0
}

// decodeLen decodes the RDB length encoding that begins with b, rest being
// the lenSize(b)-1 bytes that follow it. enc reports the special string
// encodings (11xxxxxx), whose 6 low bits are returned as the length.
func decodeLen(b byte, rest []byte) (n uint64, enc bool) {
	switch b >> 6 {
	case 0:
		return uint64(b), false
	case 1:
		return uint64(b&0x3f)<<8 | uint64(rest[0]), false
	case 3:
		return uint64(b & 0x3f), true
	}
	if b == 0x80 {
		return uint64(binary.BigEndian.Uint32(rest)), false
	}
	return binary.BigEndian.Uint64(rest), false
}

// errBadLen is the error for a byte that begins no length (lenSize 0); the
// reader wraps it with where it stands.
func errBadLen(b byte) error {
	return fmt.Errorf("bad length encoding 0x%02x", b)
}

// errEncodedLen is the error for a string encoding (11xxxxxx, its low bits
// enc) where a plain length belongs.
func errEncodedLen(enc uint64) error {
	return fmt.Errorf("string encoding 0x%02x where a length belongs", 0xc0|enc)
}

// errStringEncoding is the error for a string encoding 11xxxxxx unknown to
// this code.
func errStringEncoding(enc uint64) error {
	return fmt.Errorf("unknown string encoding %d", enc)
}

// lzfLen returns the expanded length ulen of an LZF string as an int,
// refusing one beyond 2 GiB (a corrupt header, which must not make the
// expansion allocate that much).
func lzfLen(ulen uint64) (int, error) {
	if ulen > math.MaxInt32 {
		return 0, fmt.Errorf("compressed string of %d bytes is too long", ulen)
	}
	return int(ulen), nil
}

// appendLen appends an RDB length encoding of n.
func appendLen(b []byte, n uint64) []byte {
	switch {
	case n < 1<<6:
		return append(b, byte(n))
	case n < 1<<14:
		return append(b, byte(n>>8)|0x40, byte(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0x80), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0x81), n)
}

// intLE decodes a little-endian two's complement integer of len(p) bytes,
// 1 to 8: an int-encoded string's, an intset member, the integer entries of
// listpacks and ziplists.
func intLE(p []byte) int64 {
	switch len(p) {
	case 1:
		return int64(int8(p[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(p)))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(p)))
	case 8:
		return int64(binary.LittleEndian.Uint64(p))
	}
	var u uint64
	for k := len(p) - 1; k >= 0; k-- {
		u = u<<8 | uint64(p[k])
	}
	// Sign-extend from len(p) bytes.
	return int64(u<<(64-8*len(p))) >> (64 - 8*len(p))
}
