package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// Redis 7 streams a client's command with more than 1M arguments as it came
// (HSET of 600k fields): the reader takes it whole, with its exact length.
func TestReadCommandWithMillionsOfArguments(t *testing.T) {
	args := []string{"HSET", "h"}
	for i := 0; len(args) < 1_200_002; i++ {
		args = append(args, "f", "v")
	}
	wire := Append(nil, args...)
	got, n, err := ReadCommand(bufio.NewReader(bytes.NewReader(wire)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(args) || n != int64(len(wire)) || string(got[len(got)-1]) != "v" {
		t.Fatalf("read %d arguments, %d bytes; want %d, %d", len(got), n, len(args), len(wire))
	}
}

// A header that promises more than any server sends is refused, and one
// that promises more than follows ends at the data, not in an allocation
// of its count.
func TestReadCommandBadCounts(t *testing.T) {
	for _, in := range []string{"*2147483648\r\n", "*0\r\n", "*-1\r\n", "*x\r\n"} {
		if _, _, err := ReadCommand(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v", in, err)
		}
	}
	allocs := testing.AllocsPerRun(5, func() {
		_, _, err := ReadCommand(bufio.NewReader(strings.NewReader("*2000000000\r\n$1\r\na\r\n")))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("truncated: %v", err)
		}
	})
	if allocs > 20 {
		t.Fatalf("%v allocations for a truncated command", allocs)
	}
}
