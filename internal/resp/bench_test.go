package resp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/tidwall/redcon"
)

// The stream reader against redcon's Reader (issue 11 asks for one RESP
// codec, redcon's, unless it costs more than ~10%): a stream of small
// writes as a master sends them, and one of big commands (a 4 MB RESTORE,
// an HSET of 100k fields) read from a socket-like reader that returns at
// most 64 KB per Read.
func benchStreams() map[string][]byte {
	small := []byte{}
	for i := range 10_000 {
		small = Append(small, "SET", fmt.Sprintf("{user:%d}:name", i), "some value of thirty-two bytes..")
		small = Append(small, "INCR", fmt.Sprintf("counter:%d", i))
	}
	big := Append(nil, "RESTORE", "k", "0", string(bytes.Repeat([]byte{'x'}, 4<<20)))
	hset := []string{"HSET", "h"}
	for i := range 100_000 {
		hset = append(hset, fmt.Sprint("field", i), "v")
	}
	big = Append(big, hset...)
	return map[string][]byte{"small": small, "big": big}
}

// chunked returns at most 64 KB per Read, as a socket does.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), 64<<10)]) }

func BenchmarkStreamReader(b *testing.B) {
	for name, wire := range benchStreams() {
		b.Run("ours/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for range b.N {
				br := bufio.NewReaderSize(chunked{bytes.NewReader(wire)}, 1<<20)
				var total int64
				for total < int64(len(wire)) {
					_, n, err := ReadCommand(br)
					if err != nil {
						b.Fatal(err)
					}
					total += n
				}
			}
		})
		b.Run("redcon/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for range b.N {
				rd := redcon.NewReader(bufio.NewReaderSize(chunked{bytes.NewReader(wire)}, 1<<20))
				var total int64
				for total < int64(len(wire)) {
					cmd, err := rd.ReadCommand()
					if err != nil {
						b.Fatal(err)
					}
					total += int64(len(cmd.Raw))
				}
			}
		})
	}
}
