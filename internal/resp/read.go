package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// maxBulk bounds one argument; Redis's own proto-max-bulk-len default is 512 MB.
const maxBulk = 512 << 20

// ErrProtocol marks input that is not RESP as a server sends it.
var ErrProtocol = errors.New("protocol error")

// Error is an error reply ("-ERR …", "-MOVED …"), without its "-".
type Error string

func (e Error) Error() string { return string(e) }

// ReadCommand reads one RESP array of bulk strings, the only form a master
// sends in its command stream. It returns the arguments, freshly allocated
// and owned by the caller, and the exact number of bytes read, which is
// what the command advances the replication offset by. (redcon's Reader
// was measured against it on the stream and cost more: see bench_test.go.)
func ReadCommand(br *bufio.Reader) (args [][]byte, n int64, err error) {
	line, err := ReadLine(br)
	if err != nil {
		return nil, 0, err
	}
	n = int64(len(line)) + 2
	if len(line) == 0 || line[0] != '*' {
		if len(line) > 0 && line[0] == '-' {
			return nil, n, fmt.Errorf("master replied %q", line[1:])
		}
		return nil, n, fmt.Errorf("%w: expected an array, got %q", ErrProtocol, Truncate(line))
	}
	// Redis 7 takes up to INT_MAX arguments from a client and streams the
	// command as it came (6.2 stopped at 1M); the list grows as they
	// arrive, so a corrupt header cannot make us allocate its count.
	count, err := strconv.Atoi(string(line[1:]))
	if err != nil || count < 1 || count > math.MaxInt32 {
		return nil, n, fmt.Errorf("%w: bad array header %q", ErrProtocol, Truncate(line))
	}
	args = make([][]byte, 0, min(count, 1<<12))
	for range count {
		line, err := ReadLine(br)
		if err != nil {
			return nil, n, Unexpected(err)
		}
		n += int64(len(line)) + 2
		if len(line) == 0 || line[0] != '$' {
			return nil, n, fmt.Errorf("%w: expected a bulk string, got %q", ErrProtocol, Truncate(line))
		}
		size, err := strconv.Atoi(string(line[1:]))
		if err != nil || size < 0 || size > maxBulk {
			return nil, n, fmt.Errorf("%w: bad bulk header %q", ErrProtocol, Truncate(line))
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(br, arg); err != nil {
			return nil, n, Unexpected(err)
		}
		if arg[size] != '\r' || arg[size+1] != '\n' {
			return nil, n, fmt.Errorf("%w: bulk string not followed by CRLF", ErrProtocol)
		}
		n += int64(size) + 2
		args = append(args, arg[:size:size])
	}
	return args, n, nil
}

// ReadLine returns a CRLF-terminated line without its CRLF. The slice is
// valid until the next read from br.
func ReadLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, br.Size())
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q not ended by CRLF", ErrProtocol, Truncate(line))
	}
	return line[:len(line)-2], nil
}

// ReadReply reads one RESP2 reply and discards it, returning the first
// error reply found in it (an EXEC reply carries the errors of queued
// commands as elements) as an Error, or a transport or protocol error.
func ReadReply(br *bufio.Reader) error {
	line, err := ReadLine(br)
	if err != nil {
		return err
	}
	return ReadReplyRest(br, line)
}

// ReadReplyRest reads the rest of a reply whose first line (without its
// CRLF) is line, as ReadReply.
func ReadReplyRest(br *bufio.Reader, line []byte) error {
	if len(line) == 0 {
		return fmt.Errorf("%w: empty reply line", ErrProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return Error(body)
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return fmt.Errorf("%w: bad bulk header %q", ErrProtocol, Truncate(line))
		}
		if n < 0 {
			return nil
		}
		_, err = br.Discard(n + 2)
		return Unexpected(err)
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return fmt.Errorf("%w: bad array header %q", ErrProtocol, Truncate(line))
		}
		var first error
		for range n {
			err := ReadReply(br)
			var reply Error
			if err != nil && !errors.As(err, &reply) {
				return Unexpected(err)
			}
			if first == nil {
				first = err
			}
		}
		return first
	default:
		return fmt.Errorf("%w: unexpected reply type %q", ErrProtocol, line[0])
	}
}

// Unexpected turns an EOF in the middle of something into ErrUnexpectedEOF.
func Unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Truncate shortens b for an error message.
func Truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
