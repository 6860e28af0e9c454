package rdbparse

import (
	"encoding/binary"
	"hash/crc64"
	"math/bits"
)

// Redis checksums RDB files and DUMP payloads with CRC-64/Jones: reflected
// polynomial, initial value 0, no final xor (the same function as
// github.com/hdt3213/rdb/crc64jones, which the tests compare against).
// Its reflected polynomial:
const jonesPoly = 0x95ac9329ac4bc9b5

// crcLane is the block each of the four interleaved lanes of crcUpdate
// covers. Four independent dependency chains keep the CPU's load ports
// busy; a single slicing-by-8 chain is latency bound at about half the speed.
const crcLane = 1024

type crcTables struct {
	slice [8][256]uint64 // slicing-by-8
	shift [8][256]uint64 // multiplication by x^(8*crcLane): appends crcLane zero bytes
	// fold holds the carry-less multiplication constants of crc_amd64.s:
	// x^575, x^511 mod P (folding 64 bytes ahead), x^191, x^127 (16 bytes).
	fold [4]uint64
}

var crcTab = makeCRCTables()

func makeCRCTables() *crcTables {
	t := &crcTables{}
	t.slice[0] = *crc64.MakeTable(jonesPoly)
	for i := 0; i < 256; i++ {
		c := t.slice[0][i]
		for j := 1; j < 8; j++ {
			c = t.slice[0][byte(c)] ^ c>>8
			t.slice[j][i] = c
		}
	}
	// The shift is linear over GF(2): build it from the images of the 64
	// single-bit states, then one table per byte of the state.
	var basis [64]uint64
	for bit := range basis {
		c := uint64(1) << bit
		for k := 0; k < crcLane; k++ {
			c = t.slice[0][byte(c)] ^ c>>8
		}
		basis[bit] = c
	}
	for i := 0; i < 8; i++ {
		for v := 0; v < 256; v++ {
			var r uint64
			for b := 0; b < 8; b++ {
				if v>>b&1 == 1 {
					r ^= basis[8*i+b]
				}
			}
			t.shift[i][v] = r
		}
	}
	// In the reflected bit order a 64-bit load holds H with bit i the
	// coefficient of x^(63-i), and a carry-less product of two such values
	// is their product times x. So moving the 128-bit remainder H·x^64 + L
	// ahead by d bytes multiplies H by x^(8d+63) and L by x^(8d-1) mod P.
	for i, n := range []int{8*64 + 63, 8*64 - 1, 8*16 + 63, 8*16 - 1} {
		t.fold[i] = bits.Reverse64(xPowModP(n))
	}
	return t
}

// xPowModP returns x^n mod P, unreflected (bit i is the coefficient of x^i).
func xPowModP(n int) uint64 {
	p := bits.Reverse64(jonesPoly) // P without its x^64 term
	r := uint64(1)
	for ; n > 0; n-- {
		carry := r >> 63
		r <<= 1
		if carry == 1 {
			r ^= p
		}
	}
	return r
}

func (t *crcTables) shiftLane(c uint64) uint64 {
	return t.shift[0][byte(c)] ^ t.shift[1][byte(c>>8)] ^ t.shift[2][byte(c>>16)] ^ t.shift[3][byte(c>>24)] ^
		t.shift[4][byte(c>>32)] ^ t.shift[5][byte(c>>40)] ^ t.shift[6][byte(c>>48)] ^ t.shift[7][c>>56]
}

// crcGeneric returns the CRC-64/Jones of the bytes hashed into crc followed
// by p, in portable Go.
func crcGeneric(crc uint64, p []byte) uint64 {
	t := crcTab
	for len(p) >= 4*crcLane {
		blk := (*[4 * crcLane]byte)(p)
		c0, c1, c2, c3 := crc, uint64(0), uint64(0), uint64(0)
		for i := 0; i < crcLane; i += 8 {
			a0 := c0 ^ binary.LittleEndian.Uint64(blk[i:])
			a1 := c1 ^ binary.LittleEndian.Uint64(blk[crcLane+i:])
			a2 := c2 ^ binary.LittleEndian.Uint64(blk[2*crcLane+i:])
			a3 := c3 ^ binary.LittleEndian.Uint64(blk[3*crcLane+i:])
			c0 = t.slice[7][byte(a0)] ^ t.slice[6][byte(a0>>8)] ^ t.slice[5][byte(a0>>16)] ^ t.slice[4][byte(a0>>24)] ^
				t.slice[3][byte(a0>>32)] ^ t.slice[2][byte(a0>>40)] ^ t.slice[1][byte(a0>>48)] ^ t.slice[0][a0>>56]
			c1 = t.slice[7][byte(a1)] ^ t.slice[6][byte(a1>>8)] ^ t.slice[5][byte(a1>>16)] ^ t.slice[4][byte(a1>>24)] ^
				t.slice[3][byte(a1>>32)] ^ t.slice[2][byte(a1>>40)] ^ t.slice[1][byte(a1>>48)] ^ t.slice[0][a1>>56]
			c2 = t.slice[7][byte(a2)] ^ t.slice[6][byte(a2>>8)] ^ t.slice[5][byte(a2>>16)] ^ t.slice[4][byte(a2>>24)] ^
				t.slice[3][byte(a2>>32)] ^ t.slice[2][byte(a2>>40)] ^ t.slice[1][byte(a2>>48)] ^ t.slice[0][a2>>56]
			c3 = t.slice[7][byte(a3)] ^ t.slice[6][byte(a3>>8)] ^ t.slice[5][byte(a3>>16)] ^ t.slice[4][byte(a3>>24)] ^
				t.slice[3][byte(a3>>32)] ^ t.slice[2][byte(a3>>40)] ^ t.slice[1][byte(a3>>48)] ^ t.slice[0][a3>>56]
		}
		// CRC(A‖B) = shift(CRC(A), |B|) ^ CRC(B) for a zero-initialised, unxored CRC.
		crc = t.shiftLane(t.shiftLane(t.shiftLane(c0)^c1)^c2) ^ c3
		p = p[4*crcLane:]
	}
	for len(p) >= 8 {
		a := crc ^ binary.LittleEndian.Uint64(p)
		crc = t.slice[7][byte(a)] ^ t.slice[6][byte(a>>8)] ^ t.slice[5][byte(a>>16)] ^ t.slice[4][byte(a>>24)] ^
			t.slice[3][byte(a>>32)] ^ t.slice[2][byte(a>>40)] ^ t.slice[1][byte(a>>48)] ^ t.slice[0][a>>56]
		p = p[8:]
	}
	for _, b := range p {
		crc = t.slice[0][byte(crc)^b] ^ crc>>8
	}
	return crc
}
