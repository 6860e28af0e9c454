package stream

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

var errProtocol = errors.New("protocol error")

// readCommand reads one RESP array of bulk strings, the only form a master
// sends in its command stream. It returns the arguments, freshly allocated
// and owned by the caller, and the exact number of bytes read,
// which is what the command advances the replication offset by.
func readCommand(br *bufio.Reader) (args [][]byte, n int64, err error) {
	line, err := readLine(br)
	if err != nil {
		return nil, 0, err
	}
	n = int64(len(line)) + 2
	if len(line) == 0 || line[0] != '*' {
		if len(line) > 0 && line[0] == '-' {
			return nil, n, fmt.Errorf("master replied %q", line[1:])
		}
		return nil, n, fmt.Errorf("%w: expected an array, got %q", errProtocol, truncate(line))
	}
	// Redis 7 takes up to INT_MAX arguments from a client and streams the
	// command as it came (6.2 stopped at 1M); the list grows as they
	// arrive, so a corrupt header cannot make us allocate its count.
	count, err := strconv.Atoi(string(line[1:]))
	if err != nil || count < 1 || count > math.MaxInt32 {
		return nil, n, fmt.Errorf("%w: bad array header %q", errProtocol, truncate(line))
	}
	args = make([][]byte, 0, min(count, 1<<12))
	for range count {
		line, err := readLine(br)
		if err != nil {
			return nil, n, unexpected(err)
		}
		n += int64(len(line)) + 2
		if len(line) == 0 || line[0] != '$' {
			return nil, n, fmt.Errorf("%w: expected a bulk string, got %q", errProtocol, truncate(line))
		}
		size, err := strconv.Atoi(string(line[1:]))
		if err != nil || size < 0 || size > maxBulk {
			return nil, n, fmt.Errorf("%w: bad bulk header %q", errProtocol, truncate(line))
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(br, arg); err != nil {
			return nil, n, unexpected(err)
		}
		if arg[size] != '\r' || arg[size+1] != '\n' {
			return nil, n, fmt.Errorf("%w: bulk string not followed by CRLF", errProtocol)
		}
		n += int64(size) + 2
		args = append(args, arg[:size:size])
	}
	return args, n, nil
}

// readLine returns a CRLF-terminated line without its CRLF. The slice is
// valid until the next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("%w: line longer than %d bytes", errProtocol, br.Size())
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q not ended by CRLF", errProtocol, truncate(line))
	}
	return line[:len(line)-2], nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
