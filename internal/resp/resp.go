// Package resp encodes Redis commands in RESP, for the connections that
// slotmover drives without go-redis.
package resp

import "strconv"

// Append appends one command, an array of bulk strings, to dst.
func Append[T ~string | ~[]byte](dst []byte, args ...T) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, '\r', '\n')
		dst = append(dst, a...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}
