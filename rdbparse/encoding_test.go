package rdbparse

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/hdt3213/rdb/lzf"
)

// encodingCases are RDB lengths and strings, well formed and not, each read
// by both readers: the stream reader (reader) and the in-memory one
// (memReader) must agree on what they decode, and each names where it
// failed in its own terms.
func encodingCases(t *testing.T) []struct {
	name string
	in   []byte
} {
	long := bytes.Repeat([]byte("slotmover "), 40)
	packed, err := lzf.Compress(long)
	if err != nil || len(packed) == 0 {
		t.Fatalf("compress: %v", err)
	}
	lzfString := func(clen, ulen uint64, body []byte) []byte {
		return cat([]byte{0xC3}, appendLen(nil, clen), appendLen(nil, ulen), body)
	}
	pl := uint64(len(packed))
	return []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"6-bit 0", []byte{0x00}},
		{"6-bit 63", []byte{0x3F}},
		{"14-bit 64", []byte{0x40, 0x40}},
		{"14-bit max", []byte{0x7F, 0xFF}},
		{"32-bit 5", []byte{0x80, 0, 0, 0, 5}},
		{"32-bit max", []byte{0x80, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"64-bit 1<<32", []byte{0x81, 0, 0, 0, 1, 0, 0, 0, 0}},
		{"64-bit max", []byte{0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
		{"bad 0x82", []byte{0x82, 0, 0, 0, 0}},
		{"bad 0xBF", []byte{0xBF}},
		{"14-bit cut", []byte{0x40}},
		{"32-bit cut", []byte{0x80, 1, 2}},
		{"64-bit cut", []byte{0x81, 1, 2, 3, 4, 5}},
		{"plain string", str("abc")},
		{"plain string cut", []byte{5, 'a'}},
		{"int8", []byte{0xC0, 0x85}},
		{"int16", []byte{0xC1, 0x39, 0x30}},
		{"int32", []byte{0xC2, 1, 0, 0, 0x80}},
		{"int16 cut", []byte{0xC1, 0x39}},
		{"unknown encoding", []byte{0xC4, 1, 2}},
		{"lzf", lzfString(pl, uint64(len(long)), packed)},
		{"lzf body cut", lzfString(pl, uint64(len(long)), packed[:len(packed)-1])},
		{"lzf wrong length", lzfString(pl, uint64(len(long))+1, packed)},
		{"lzf too long", lzfString(pl, math.MaxInt32+1, packed)},
		{"lzf encoded clen", cat([]byte{0xC3, 0xC0}, appendLen(nil, 1), packed)},
		{"lzf encoded ulen", cat([]byte{0xC3}, appendLen(nil, pl), []byte{0xC1}, packed)},
		{"lzf bad clen", []byte{0xC3, 0x90}},
		{"lzf header cut", []byte{0xC3, 0x40}},
	}
}

func streamReader(in []byte) *reader {
	return &reader{r: bufio.NewReaderSize(bytes.NewReader(in), 16)}
}

func showString(b []byte) string {
	if len(b) > 12 {
		return fmt.Sprintf("%d bytes %q...", len(b), b[:12])
	}
	return fmt.Sprintf("%q", b)
}

func showErr(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// readBoth runs every length and string operation of both readers on in
// and describes the outcomes, one line each.
func readBoth(in []byte) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	{
		rd := streamReader(in)
		n, enc, err := rd.readLen()
		add("reader.readLen: %d %v at %d: %s", n, enc, rd.off(), showErr(err))
		rd = streamReader(in)
		n, err = rd.plainLen()
		add("reader.plainLen: %d at %d: %s", n, rd.off(), showErr(err))
		rd = streamReader(in)
		err = rd.skipString()
		add("reader.skipString: at %d: %s", rd.off(), showErr(err))
		rd = streamReader(in)
		s, _, err := rd.readString(nil, nil)
		add("reader.readString: %s at %d: %s", showString(s), rd.off(), showErr(err))
	}
	{
		m := &memReader{b: in}
		n, enc, err := m.readLen()
		add("memReader.readLen: %d %v at %d: %s", n, enc, m.i, showErr(err))
		m = &memReader{b: in}
		n, err = m.plainLen()
		add("memReader.plainLen: %d at %d: %s", n, m.i, showErr(err))
		m = &memReader{b: in}
		s, err := m.strInto(nil)
		add("memReader.strInto: %s at %d: %s", showString(s), m.i, showErr(err))
		m = &memReader{b: in}
		n, err = m.strLen()
		add("memReader.strLen: %d at %d: %s", n, m.i, showErr(err))
		var scratch []byte
		m = &memReader{b: in}
		s, err = m.blob(&scratch, 0)
		add("memReader.blob: %s at %d: %s", showString(s), m.i, showErr(err))
		m = &memReader{b: in}
		s, err = m.blob(&scratch, 4)
		add("memReader.blob head: %d bytes at %d: %s", len(s), m.i, showErr(err))
	}
	return out
}

// TestEncodings pins what each reader makes of each case in
// testdata/encodings.golden (rewrite it with -args -golden).
func TestEncodings(t *testing.T) {
	var got strings.Builder
	for _, c := range encodingCases(t) {
		fmt.Fprintf(&got, "# %s: % x\n", c.name, c.in[:min(len(c.in), 12)])
		for _, line := range readBoth(c.in) {
			got.WriteString(line + "\n")
		}
	}
	checkGolden(t, "testdata/encodings.golden", got.String())
}

var golden = flag.Bool("golden", false, "rewrite the golden files instead of comparing with them")

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *golden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("%s line %d:\n got %s\nwant %s", path, i+1, g, w)
			}
		}
	}
}

// TestLengthRoundTrip: what appendLen writes, both readers read back, at
// the bounds of each encoding.
func TestLengthRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 63, 64, 255, 16383, 16384, 1<<32 - 1, 1 << 32, math.MaxUint64} {
		b := appendLen(nil, n)
		rd := streamReader(b)
		if got, err := rd.plainLen(); got != n || err != nil || rd.off() != int64(len(b)) {
			t.Errorf("reader: %d encoded as % x read as %d at %d: %v", n, b, got, rd.off(), err)
		}
		m := &memReader{b: b}
		if got, err := m.plainLen(); got != n || err != nil || m.i != len(b) {
			t.Errorf("memReader: %d encoded as % x read as %d at %d: %v", n, b, got, m.i, err)
		}
	}
}

// TestZiplistIntegers reads each integer encoding of a ziplist (the pre-7.0
// compact encoding), at the ends of its range.
func TestZiplistIntegers(t *testing.T) {
	type item struct {
		enc []byte // encoding byte and data
		s   string // a string entry, else
		v   int64
	}
	le := func(head byte, v int64, w int) []byte {
		b := []byte{head}
		for k := 0; k < w; k++ {
			b = append(b, byte(v>>(8*k)))
		}
		return b
	}
	items := []item{
		{enc: []byte{0x02, 'a', 'b'}, s: "ab"},
		{enc: []byte{0xF1}, v: 0},
		{enc: []byte{0xFD}, v: 12},
		{enc: le(0xFE, -128, 1), v: -128},
		{enc: le(0xFE, 127, 1), v: 127},
		{enc: le(0xC0, -32768, 2), v: -32768},
		{enc: le(0xC0, 32767, 2), v: 32767},
		{enc: le(0xF0, -1<<23, 3), v: -1 << 23},
		{enc: le(0xF0, 1<<23-1, 3), v: 1<<23 - 1},
		{enc: le(0xD0, math.MinInt32, 4), v: math.MinInt32},
		{enc: le(0xD0, math.MaxInt32, 4), v: math.MaxInt32},
		{enc: le(0xE0, math.MinInt64, 8), v: math.MinInt64},
		{enc: le(0xE0, math.MaxInt64, 8), v: math.MaxInt64},
		{enc: le(0xE0, -2, 8), v: -2},
	}
	zl := make([]byte, 10)
	for _, it := range items {
		zl = append(append(zl, 0), it.enc...) // previous entry length: not read
	}
	zl = append(zl, 0xFF)
	i := 0
	err := ziplistWalk(zl, func(s []byte, v int64, isInt bool) error {
		switch w := items[i]; {
		case w.s != "" && (isInt || string(s) != w.s):
			t.Errorf("item %d: %q/%d, want %q", i, s, v, w.s)
		case w.s == "" && (!isInt || v != w.v):
			t.Errorf("item %d (% x): %q/%d, want %d", i, w.enc, s, v, w.v)
		}
		i++
		return nil
	})
	if err != nil || i != len(items) {
		t.Fatalf("walked %d of %d: %v", i, len(items), err)
	}
}

// TestIntsetMembers reads intsets of each width.
func TestIntsetMembers(t *testing.T) {
	for _, c := range []struct {
		width int
		vals  []int64
	}{
		{2, []int64{math.MinInt16, -1, 0, math.MaxInt16}},
		{4, []int64{math.MinInt32, -70000, 70000, math.MaxInt32}},
		{8, []int64{math.MinInt64, -1 << 40, 1 << 40, math.MaxInt64}},
	} {
		b := binary.LittleEndian.AppendUint32(nil, uint32(c.width))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(c.vals)))
		for _, v := range c.vals {
			for k := 0; k < c.width; k++ {
				b = append(b, byte(v>>(8*k)))
			}
		}
		got, err := intsetMembers(b)
		if err != nil || len(got) != len(c.vals) {
			t.Fatalf("width %d: %q, %v", c.width, got, err)
		}
		for k, v := range c.vals {
			if string(got[k]) != strconv.FormatInt(v, 10) {
				t.Errorf("width %d, member %d: %s, want %d", c.width, k, got[k], v)
			}
		}
		if n, err := blobCount(TypeSetIntset, b); n != len(c.vals) || err != nil {
			t.Errorf("width %d: count %d, %v", c.width, n, err)
		}
	}
	if _, err := intsetMembers(make([]byte, 7)); err == nil {
		t.Error("short intset accepted")
	}
	if _, err := intsetMembers([]byte{3, 0, 0, 0, 1, 0, 0, 0, 1, 2, 3}); err == nil {
		t.Error("intset of width 3 accepted")
	}
}
