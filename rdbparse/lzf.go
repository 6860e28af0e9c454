package rdbparse

import "errors"

var errLZF = errors.New("corrupt LZF data")

// lzfDecompress appends the expansion of in (LZF, as liblzf writes it) to
// dst and checks that it is exactly ulen bytes long.
//
// The format: a control byte below 32 starts a literal run of ctrl+1 bytes;
// otherwise its top 3 bits are a length (7 means "plus the next byte"), and
// the low 5 bits with the following byte an offset back into the output;
// the back reference copies length+2 bytes, possibly overlapping itself.
func lzfDecompress(dst, in []byte, ulen int) ([]byte, error) {
	return lzfExpand(dst, in, ulen, ulen)
}

// lzfExpand is lzfDecompress that stops once it has produced at least
// stop bytes (for reading just the header of a compressed blob).
func lzfExpand(dst, in []byte, ulen, stop int) ([]byte, error) {
	start := len(dst)
	// A corrupt ulen must not allocate much: reserve what in can plausibly expand to.
	if want := min(ulen, stop+264, 16*len(in)+64); cap(dst)-start < want {
		grown := make([]byte, start, start+want)
		copy(grown, dst)
		dst = grown
	}
	for i := 0; i < len(in); {
		if len(dst)-start >= stop && stop < ulen {
			return dst, nil
		}
		ctrl := int(in[i])
		i++
		if ctrl < 32 {
			n := ctrl + 1
			if i+n > len(in) || len(dst)-start+n > ulen {
				return dst, errLZF
			}
			dst = append(dst, in[i:i+n]...)
			i += n
			continue
		}
		n := ctrl >> 5
		if n == 7 {
			if i >= len(in) {
				return dst, errLZF
			}
			n += int(in[i])
			i++
		}
		if i >= len(in) {
			return dst, errLZF
		}
		ref := len(dst) - (ctrl&0x1f)<<8 - int(in[i]) - 1
		i++
		n += 2
		if ref < start || len(dst)-start+n > ulen {
			return dst, errLZF
		}
		if ref+n <= len(dst) {
			dst = append(dst, dst[ref:ref+n]...)
		} else {
			// Overlapping run: each byte may be one this copy just wrote.
			for k := 0; k < n; k++ {
				dst = append(dst, dst[ref+k])
			}
		}
	}
	if len(dst)-start != ulen {
		return dst, errLZF
	}
	return dst, nil
}
