package rdbparse

import (
	"strconv"
	"testing"
)

func benchCRC(b *testing.B, f func(uint64, []byte) uint64, n int) {
	buf := make([]byte, n)
	b.SetBytes(int64(n))
	var c uint64
	for b.Loop() {
		c = f(c, buf)
	}
}

func BenchmarkCRC(b *testing.B) {
	for _, n := range []int{530, 64 << 10} {
		b.Run("fast-"+strconv.Itoa(n), func(b *testing.B) { benchCRC(b, crcUpdate, n) })
		b.Run("portable-"+strconv.Itoa(n), func(b *testing.B) { benchCRC(b, crcGeneric, n) })
	}
}
