package rdbparse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

var errShort = errors.New("value ends early")

// memReader parses an RDB value held in memory (a kept payload).
type memReader struct {
	b []byte
	i int
}

// errAt wraps err with the position i in the value it concerns.
func (m *memReader) errAt(i int, err error) error {
	return fmt.Errorf("byte %d of the value: %w", i, err)
}

func (m *memReader) short() error { return m.errAt(m.i, errShort) }

func (m *memReader) take(n uint64) ([]byte, error) {
	if n > uint64(len(m.b)-m.i) {
		return nil, m.short()
	}
	p := m.b[m.i : m.i+int(n)]
	m.i += int(n)
	return p, nil
}

func (m *memReader) readLen() (uint64, bool, error) {
	if m.i >= len(m.b) {
		return 0, false, m.short()
	}
	b := m.b[m.i]
	m.i++
	size := lenSize(b)
	if size == 0 {
		return 0, false, m.errAt(m.i-1, errBadLen(b))
	}
	rest, err := m.take(uint64(size - 1))
	if err != nil {
		return 0, false, err
	}
	n, enc := decodeLen(b, rest)
	return n, enc, nil
}

func (m *memReader) plainLen() (uint64, error) {
	n, enc, err := m.readLen()
	if err == nil && enc {
		err = m.errAt(m.i-1, errEncodedLen(n))
	}
	return n, err
}

// str returns the decoded string: aliasing the value when stored plainly,
// else in a fresh buffer (LZF) or as decimal digits (integer encodings).
func (m *memReader) str() ([]byte, error) { return m.strInto(nil) }

// strInto is str that decodes into dst[:0] when it must decode.
func (m *memReader) strInto(dst []byte) ([]byte, error) {
	n, enc, err := m.readLen()
	if err != nil {
		return nil, err
	}
	if !enc {
		return m.take(n)
	}
	switch n {
	case encInt8, encInt16, encInt32:
		p, err := m.take(1 << n)
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(dst[:0], intLE(p), 10), nil
	case encLZF:
		in, ulen, err := m.lzfString()
		if err != nil {
			return nil, err
		}
		return lzfDecompress(dst[:0], in, ulen)
	}
	return nil, m.errAt(m.i-1, errStringEncoding(n))
}

// lzfHeader reads the two lengths after the encoding byte of an LZF
// string: clen compressed bytes follow, which expand to ulen.
func (m *memReader) lzfHeader() (clen, ulen uint64, err error) {
	if clen, err = m.plainLen(); err != nil {
		return 0, 0, err
	}
	ulen, err = m.plainLen()
	return clen, ulen, err
}

// lzfString reads an LZF string after its encoding byte: the compressed
// bytes (aliasing the value) and the length they expand to.
func (m *memReader) lzfString() ([]byte, int, error) {
	clen, ulen, err := m.lzfHeader()
	if err != nil {
		return nil, 0, err
	}
	in, err := m.take(clen)
	if err != nil {
		return nil, 0, err
	}
	size, err := lzfLen(ulen)
	if err != nil {
		return nil, 0, m.errAt(m.i, err)
	}
	return in, size, nil
}

// strLen returns the decoded length of the next string and skips it.
func (m *memReader) strLen() (uint64, error) {
	n, enc, err := m.readLen()
	if err != nil {
		return 0, err
	}
	if !enc {
		_, err = m.take(n)
		return n, err
	}
	switch n {
	case encInt8, encInt16, encInt32:
		p, err := m.take(1 << n)
		if err != nil {
			return 0, err
		}
		var digits [24]byte
		return uint64(len(strconv.AppendInt(digits[:0], intLE(p), 10))), nil
	case encLZF:
		clen, ulen, err := m.lzfHeader()
		if err == nil {
			_, err = m.take(clen)
		}
		return ulen, err
	}
	return 0, m.errAt(m.i-1, errStringEncoding(n))
}

// blobHead is enough of a compact blob to read its header.
const blobHead = 16

// blob returns the next string, expanding LZF into *scratch instead of a
// fresh buffer (the scanner's per-key path); with head > 0, only about the
// first head bytes of a compressed string.
func (m *memReader) blob(scratch *[]byte, head int) ([]byte, error) {
	start := m.i
	n, enc, err := m.readLen()
	if err != nil {
		return nil, err
	}
	if enc && n == encLZF {
		in, ulen, err := m.lzfString()
		if err != nil {
			return nil, err
		}
		stop := ulen
		if head > 0 {
			stop = min(stop, head)
		}
		*scratch, err = lzfExpand((*scratch)[:0], in, ulen, stop)
		return *scratch, err
	}
	m.i = start
	return m.str()
}

// blobElements counts the elements of the next compact blob of type t,
// expanding a compressed blob only as far as its header when that holds
// the count.
func (m *memReader) blobElements(t byte, scratch *[]byte) (int, error) {
	start := m.i
	b, err := m.blob(scratch, blobHead)
	if err != nil {
		return 0, err
	}
	if n, ok := headerCount(t, b); ok {
		return n, nil
	}
	m.i = start
	if b, err = m.blob(scratch, 0); err != nil {
		return 0, err
	}
	return blobCount(t, b)
}

// elementsOf returns Entry.Elements for a kept value (type byte first).
func elementsOf(v []byte, scratch *[]byte) (uint64, error) {
	m := &memReader{b: v, i: 1}
	switch t := v[0]; t {
	case TypeString:
		return m.strLen()
	case TypeList, TypeSet, TypeZset, TypeZset2, TypeHash, TypeHashMetadataPreGA:
		return m.plainLen()
	case TypeHashMetadata:
		if _, err := m.take(8); err != nil {
			return 0, err
		}
		return m.plainLen()
	case TypeHashZipmap, TypeListZiplist, TypeSetIntset, TypeZsetZiplist, TypeHashZiplist,
		TypeHashListpack, TypeZsetListpack, TypeSetListpack, TypeHashListpackExPreGA, TypeHashListpackEx:
		if t == TypeHashListpackEx {
			if _, err := m.take(8); err != nil {
				return 0, err
			}
		}
		n, err := m.blobElements(t, scratch)
		return uint64(n), err
	case TypeListQuicklist, TypeListQuicklist2:
		nodes, err := m.plainLen()
		var total uint64
		for ; err == nil && nodes > 0; nodes-- {
			container := uint64(2) // packed
			if t == TypeListQuicklist2 {
				if container, err = m.plainLen(); err != nil {
					break
				}
			}
			if container == 1 { // plain node: one item
				_, err = m.strLen()
				total++
				continue
			}
			// Node blobs count like a ziplist list or a listpack set: one element per entry.
			node := byte(TypeSetListpack)
			if t == TypeListQuicklist {
				node = TypeListZiplist
			}
			var n int
			n, err = m.blobElements(node, scratch)
			total += uint64(n)
		}
		return total, err
	case TypeStreamListpacks, TypeStreamListpacks2, TypeStreamListpacks3:
		nodes, err := m.plainLen()
		for ; err == nil && nodes > 0; nodes-- {
			if _, err = m.strLen(); err == nil {
				_, err = m.strLen()
			}
		}
		if err != nil {
			return 0, err
		}
		return m.plainLen()
	}
	return 0, nil // module values: no element count
}

// headerCount returns the element count of a compact blob from its header
// alone; ok is false when the header does not hold it (or b is too short).
func headerCount(t byte, b []byte) (n int, ok bool) {
	switch t {
	case TypeHashZipmap:
		if len(b) >= 1 && b[0] < 254 {
			return int(b[0]), true
		}
	case TypeListZiplist, TypeZsetZiplist, TypeHashZiplist:
		if len(b) >= 10 {
			if n := int(binary.LittleEndian.Uint16(b[8:10])); n != lpUnknownCount {
				return n / entriesPer(t), true
			}
		}
	case TypeSetIntset:
		if len(b) >= 8 {
			return int(binary.LittleEndian.Uint32(b[4:8])), true
		}
	default: // listpacks
		if len(b) >= 6 {
			if n := int(binary.LittleEndian.Uint16(b[4:6])); n != lpUnknownCount {
				return n / entriesPer(t), true
			}
		}
	}
	return 0, false
}

// entriesPer is the number of blob entries per element: 2 for field/value
// and member/score pairs, 3 for hash fields with TTLs.
func entriesPer(t byte) int {
	switch t {
	case TypeZsetZiplist, TypeHashZiplist, TypeHashListpack, TypeZsetListpack:
		return 2
	case TypeHashListpackEx, TypeHashListpackExPreGA:
		return 3
	}
	return 1
}

// blobCount returns the element count of a compact encoding.
func blobCount(t byte, b []byte) (int, error) {
	var n int
	var err error
	switch t {
	case TypeHashZipmap:
		return zipmapCount(b)
	case TypeListZiplist, TypeZsetZiplist, TypeHashZiplist:
		n, err = ziplistCount(b)
	case TypeSetIntset:
		if len(b) < 8 {
			return 0, errors.New("intset header ends early")
		}
		return int(binary.LittleEndian.Uint32(b[4:8])), nil
	case TypeSetListpack, TypeHashListpack, TypeZsetListpack, TypeHashListpackEx, TypeHashListpackExPreGA:
		n, err = listpackCount(b)
	default:
		return 0, fmt.Errorf("type %d is not a compact encoding", t)
	}
	return n / entriesPer(t), err
}

// lpUnknownCount is the header count of a listpack or ziplist too long to
// count in 16 bits: the reader must walk it.
const lpUnknownCount = 65535

func listpackCount(b []byte) (int, error) { return compactCount(b, "listpack", 6, listpackWalk) }

// compactCount reads the 16-bit entry count that ends a compact encoding's
// header of the given size, walking the entries when it says lpUnknownCount.
func compactCount(b []byte, kind string, header int, walk func([]byte, func([]byte, int64, bool) error) error) (int, error) {
	if len(b) < header+1 {
		return 0, fmt.Errorf("%s header ends early", kind)
	}
	if n := int(binary.LittleEndian.Uint16(b[header-2 : header])); n != lpUnknownCount {
		return n, nil
	}
	n := 0
	err := walk(b, func([]byte, int64, bool) error { n++; return nil })
	return n, err
}

// listpackWalk calls f for each entry: a string (aliasing b) or an integer.
func listpackWalk(b []byte, f func(s []byte, v int64, isInt bool) error) error {
	if len(b) < 7 {
		return errors.New("listpack header ends early")
	}
	i := 6
	for {
		if i >= len(b) {
			return errors.New("listpack has no end marker")
		}
		h := b[i]
		if h == 0xFF {
			return nil
		}
		var hdr, n int // encoding bytes, string bytes
		var v int64
		isInt := true
		switch {
		case h < 0x80: // 7-bit unsigned
			hdr, v = 1, int64(h)
		case h < 0xC0: // 6-bit length string
			hdr, n, isInt = 1, int(h&0x3f), false
		case h < 0xE0: // 13-bit signed
			if i+2 > len(b) {
				return errors.New("listpack entry ends early")
			}
			hdr = 2
			v = int64(uint16(h&0x1f)<<8 | uint16(b[i+1]))
			if v >= 1<<12 {
				v -= 1 << 13
			}
		case h < 0xF0: // 12-bit length string
			if i+2 > len(b) {
				return errors.New("listpack entry ends early")
			}
			hdr, n, isInt = 2, int(h&0x0f)<<8|int(b[i+1]), false
		default:
			var w int
			switch h {
			case 0xF0: // 32-bit length string
				if i+5 > len(b) {
					return errors.New("listpack entry ends early")
				}
				hdr, n, isInt = 5, int(binary.LittleEndian.Uint32(b[i+1:])), false
			case 0xF1:
				w = 2
			case 0xF2:
				w = 3
			case 0xF3:
				w = 4
			case 0xF4:
				w = 8
			default:
				return fmt.Errorf("listpack entry encoding 0x%02x unknown", h)
			}
			if isInt {
				if i+1+w > len(b) {
					return errors.New("listpack entry ends early")
				}
				hdr = 1 + w
				v = intLE(b[i+1 : i+1+w])
			}
		}
		l := hdr + n
		if n < 0 || i+l > len(b) {
			return errors.New("listpack entry ends early")
		}
		var err error
		if isInt {
			err = f(nil, v, true)
		} else {
			err = f(b[i+hdr:i+l], 0, false)
		}
		if err != nil {
			return err
		}
		i += l + backlenSize(l)
	}
}

// backlenSize is the size of a listpack entry's trailing back-length field.
func backlenSize(l int) int {
	switch {
	case l <= 127:
		return 1
	case l < 16383:
		return 2
	case l < 2097151:
		return 3
	case l < 268435455:
		return 4
	}
	return 5
}

func ziplistCount(b []byte) (int, error) { return compactCount(b, "ziplist", 10, ziplistWalk) }

// ziplistWalk calls f for each entry of a ziplist (the pre-7.0 compact encoding).
func ziplistWalk(b []byte, f func(s []byte, v int64, isInt bool) error) error {
	if len(b) < 11 {
		return errors.New("ziplist header ends early")
	}
	i := 10
	for {
		if i >= len(b) {
			return errors.New("ziplist has no end marker")
		}
		if b[i] == 0xFF {
			return nil
		}
		// Previous entry length: 1 byte, or 0xFE and 4 bytes.
		if b[i] == 0xFE {
			i += 5
		} else {
			i++
		}
		if i >= len(b) {
			return errors.New("ziplist entry ends early")
		}
		h := b[i]
		var hdr, n, w int
		switch h >> 6 {
		case 0:
			hdr, n = 1, int(h&0x3f)
		case 1:
			if i+2 > len(b) {
				return errors.New("ziplist entry ends early")
			}
			hdr, n = 2, int(h&0x3f)<<8|int(b[i+1])
		case 2:
			if i+5 > len(b) {
				return errors.New("ziplist entry ends early")
			}
			hdr, n = 5, int(binary.BigEndian.Uint32(b[i+1:]))
		default:
			hdr = 1
			switch h {
			case 0xC0:
				w = 2
			case 0xD0:
				w = 4
			case 0xE0:
				w = 8
			case 0xF0:
				w = 3
			case 0xFE:
				w = 1
			default:
				if h < 0xF1 || h > 0xFD {
					return fmt.Errorf("ziplist entry encoding 0x%02x unknown", h)
				}
			}
		}
		if h>>6 != 3 {
			if n < 0 || i+hdr+n > len(b) {
				return errors.New("ziplist entry ends early")
			}
			if err := f(b[i+hdr:i+hdr+n], 0, false); err != nil {
				return err
			}
			i += hdr + n
			continue
		}
		var v int64
		if w == 0 {
			v = int64(h&0x0f) - 1 // immediate 0..12
		} else {
			if i+1+w > len(b) {
				return errors.New("ziplist entry ends early")
			}
			v = intLE(b[i+1 : i+1+w])
		}
		if err := f(nil, v, true); err != nil {
			return err
		}
		i += 1 + w
	}
}

func zipmapCount(b []byte) (int, error) {
	if len(b) < 1 {
		return 0, errors.New("zipmap is empty")
	}
	if b[0] < 254 {
		return int(b[0]), nil
	}
	n := 0
	err := zipmapWalk(b, func(_, _ []byte) error { n++; return nil })
	return n, err
}

// zipmapWalk calls f for each field and value of a zipmap (the pre-2.6 hash encoding).
func zipmapWalk(b []byte, f func(field, value []byte) error) error {
	i := 1
	readLen := func() (int, error) {
		if i >= len(b) {
			return 0, errors.New("zipmap ends early")
		}
		if b[i] < 254 {
			i++
			return int(b[i-1]), nil
		}
		if b[i] == 255 {
			return -1, nil
		}
		if i+5 > len(b) {
			return 0, errors.New("zipmap ends early")
		}
		n := int(binary.LittleEndian.Uint32(b[i+1:]))
		i += 5
		return n, nil
	}
	for {
		kl, err := readLen()
		if err != nil || kl < 0 {
			return err
		}
		if i+kl > len(b) {
			return errors.New("zipmap ends early")
		}
		field := b[i : i+kl]
		i += kl
		vl, err := readLen()
		if err != nil {
			return err
		}
		if vl < 0 || i+1+vl > len(b) {
			return errors.New("zipmap ends early")
		}
		free := int(b[i])
		value := b[i+1 : i+1+vl]
		i += 1 + vl + free
		if err := f(field, value); err != nil {
			return err
		}
	}
}

// DumpVersion reads the RDB version from a DUMP payload's footer (two
// bytes of version, then eight of CRC); 0 if the payload is too short.
func DumpVersion(p []byte) int {
	if len(p) < 10 {
		return 0
	}
	f := p[len(p)-10:]
	return int(f[0]) | int(f[1])<<8
}
