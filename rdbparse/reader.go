package rdbparse

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// reader parses straight out of the bufio.Reader's buffer: it peeks at what
// is buffered, walks it by index, and only at a refill hashes and discards the
// consumed prefix. So bytes are copied once (by the bufio.Reader), checksummed
// in large blocks, and never consumed past what the parser asked for.
type reader struct {
	r    *bufio.Reader
	win  []byte // bytes peeked from r; valid until the next commit
	pos  int    // bytes of win consumed
	base int64  // stream offset of win[0]
	crc  uint64 // CRC of every byte before win

	keeping  bool   // copy consumed bytes into keep (a chosen value)
	keepFrom int    // index in win where the uncopied kept bytes start
	keep     []byte // kept bytes
}

// errf builds a parse error naming a stream offset.
func errf(off int64, format string, args ...any) error {
	return fmt.Errorf("rdbparse: offset %d: "+format, append([]any{off}, args...)...)
}

// ErrTruncated is wrapped by the error for a stream that ends mid-RDB.
var ErrTruncated = errors.New("RDB ends early")

func (rd *reader) off() int64 { return rd.base + int64(rd.pos) }

// commit checksums and discards the consumed bytes of the window.
func (rd *reader) commit() {
	if rd.pos == 0 {
		return
	}
	if rd.keeping {
		rd.keep = append(rd.keep, rd.win[rd.keepFrom:rd.pos]...)
		rd.keepFrom = 0
	}
	rd.crc = crcUpdate(rd.crc, rd.win[:rd.pos])
	// Discard of buffered bytes cannot fail.
	_, _ = rd.r.Discard(rd.pos)
	rd.base += int64(rd.pos)
	rd.win = rd.win[rd.pos:]
	rd.pos = 0
}

// fill makes at least n (at most the buffer size) unconsumed bytes
// available, reading no more from the source than those n need.
func (rd *reader) fill(n int) error {
	rd.commit()
	if size := rd.r.Size(); n > size {
		n = size
	}
	if _, err := rd.r.Peek(n); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
		rd.win, _ = rd.r.Peek(rd.r.Buffered())
		if errors.Is(err, io.EOF) {
			err = ErrTruncated
		}
		return errf(rd.off()+int64(len(rd.win)), "reading: %w", err)
	}
	// Everything buffered is visible without further reads.
	rd.win, _ = rd.r.Peek(rd.r.Buffered())
	return nil
}

// need makes n unconsumed bytes (n <= the buffer size) available.
func (rd *reader) need(n int) error {
	if len(rd.win)-rd.pos >= n {
		return nil
	}
	return rd.fill(n)
}

func (rd *reader) byte() (byte, error) {
	if rd.pos < len(rd.win) {
		b := rd.win[rd.pos]
		rd.pos++
		return b, nil
	}
	if err := rd.fill(1); err != nil {
		return 0, err
	}
	b := rd.win[rd.pos]
	rd.pos++
	return b, nil
}

// bytes returns the next n bytes (n <= 16), valid until the next read.
func (rd *reader) bytes(n int) ([]byte, error) {
	if err := rd.need(n); err != nil {
		return nil, err
	}
	b := rd.win[rd.pos : rd.pos+n]
	rd.pos += n
	return b, nil
}

func (rd *reader) skip(n uint64) error {
	for {
		avail := uint64(len(rd.win) - rd.pos)
		if n <= avail {
			rd.pos += int(n)
			return nil
		}
		n -= avail
		rd.pos = len(rd.win)
		if err := rd.fill(1); err != nil {
			return err
		}
	}
}

// readLen reads an RDB length. enc reports the special string encodings
// (11xxxxxx), whose 6 low bits are returned as the length.
func (rd *reader) readLen() (n uint64, enc bool, err error) {
	if rd.pos < len(rd.win) {
		if b := rd.win[rd.pos]; b < 0x40 {
			rd.pos++
			return uint64(b), false, nil
		}
	}
	return rd.readLenSlow()
}

func (rd *reader) readLenSlow() (uint64, bool, error) {
	start := rd.off()
	b, err := rd.byte()
	if err != nil {
		return 0, false, err
	}
	size := lenSize(b)
	if size == 0 {
		return 0, false, errf(start, "%w", errBadLen(b))
	}
	rest, err := rd.bytes(size - 1)
	if err != nil {
		return 0, false, err
	}
	n, enc := decodeLen(b, rest)
	return n, enc, nil
}

// plainLen reads a length that must not be a special encoding.
func (rd *reader) plainLen() (uint64, error) {
	start := rd.off()
	n, enc, err := rd.readLen()
	if err == nil && enc {
		err = errf(start, "%w", errEncodedLen(n))
	}
	return n, err
}

// skipString skips an RDB string in any of its encodings.
func (rd *reader) skipString() error {
	start := rd.off()
	n, enc, err := rd.readLen()
	if err != nil {
		return err
	}
	if !enc {
		return rd.skip(n)
	}
	switch n {
	case encInt8, encInt16, encInt32:
		return rd.skip(1 << n)
	case encLZF:
		clen, _, err := rd.lzfHeader()
		if err != nil {
			return err
		}
		return rd.skip(clen)
	}
	return errf(start, "%w", errStringEncoding(n))
}

// lzfHeader reads the two lengths after the encoding byte of an LZF
// string: clen compressed bytes follow, which expand to ulen.
func (rd *reader) lzfHeader() (clen, ulen uint64, err error) {
	if clen, err = rd.plainLen(); err != nil {
		return 0, 0, err
	}
	ulen, err = rd.plainLen()
	return clen, ulen, err
}

// readString appends the decoded RDB string to dst[:0]. lzf is scratch
// space for compressed bytes; both grow as needed and are returned.
func (rd *reader) readString(dst, lzf []byte) ([]byte, []byte, error) {
	start := rd.off()
	n, enc, err := rd.readLen()
	if err != nil {
		return dst, lzf, err
	}
	if !enc {
		dst, err = rd.readRaw(dst[:0], n)
		return dst, lzf, err
	}
	switch n {
	case encInt8, encInt16, encInt32:
		p, err := rd.bytes(1 << n)
		if err != nil {
			return dst, lzf, err
		}
		return strconv.AppendInt(dst[:0], intLE(p), 10), lzf, nil
	case encLZF:
		clen, ulen, err := rd.lzfHeader()
		if err != nil {
			return dst, lzf, err
		}
		if lzf, err = rd.readRaw(lzf[:0], clen); err != nil {
			return dst, lzf, err
		}
		size, err := lzfLen(ulen)
		if err != nil {
			return dst, lzf, errf(start, "%w", err)
		}
		out, err := lzfDecompress(dst[:0], lzf, size)
		if err != nil {
			return dst, lzf, errf(start, "%w", err)
		}
		return out, lzf, nil
	}
	return dst, lzf, errf(start, "%w", errStringEncoding(n))
}

// readRaw appends the next n bytes to dst, in pieces as they arrive, so a
// corrupt length cannot make it allocate more than the stream holds.
func (rd *reader) readRaw(dst []byte, n uint64) ([]byte, error) {
	for {
		avail := uint64(len(rd.win) - rd.pos)
		if n <= avail {
			dst = append(dst, rd.win[rd.pos:rd.pos+int(n)]...)
			rd.pos += int(n)
			return dst, nil
		}
		dst = append(dst, rd.win[rd.pos:]...)
		n -= avail
		rd.pos = len(rd.win)
		if err := rd.fill(1); err != nil {
			return dst, err
		}
	}
}

// startKeep begins copying consumed bytes into keep (appending).
func (rd *reader) startKeep() {
	rd.keeping = true
	rd.keepFrom = rd.pos
}

// endKeep stops copying and returns keep.
func (rd *reader) endKeep() []byte {
	rd.keep = append(rd.keep, rd.win[rd.keepFrom:rd.pos]...)
	rd.keeping = false
	return rd.keep
}
