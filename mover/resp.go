package mover

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// replyError is an error reply from the target, possibly nested in an EXEC reply.
type replyError string

func (e replyError) Error() string { return string(e) }

// readReply reads one RESP2 reply and discards it, returning the first error
// reply found in it (an EXEC reply carries the errors of queued commands as
// elements) as a replyError, or a transport error.
func readReply(br *bufio.Reader) error {
	line, err := readReplyLine(br)
	if err != nil {
		return err
	}
	return readReplyRest(br, line)
}

// readReplyLine reads a reply's first line, with its CRLF. It is valid
// until the next read from br.
func readReplyLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("reply line longer than %d bytes", br.Size())
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	return line, nil
}

// readGuardedReply reads the rest of the reply of a command sent through
// guardScript, whose first line is line: whether it is the guard's answer
// that the key was gone; otherwise as readReply.
func readGuardedReply(br *bufio.Reader, line []byte) (gone bool, err error) {
	if string(line) != goneHeader {
		return false, readReplyRest(br, line)
	}
	body := make([]byte, len(goneReply)+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return false, err
	}
	return string(body[:len(goneReply)]) == goneReply, nil
}

// readReplyRest reads the rest of a reply whose first line is line.
func readReplyRest(br *bufio.Reader, line []byte) error {
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return replyError(body)
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return fmt.Errorf("malformed bulk header %q", line)
		}
		if n < 0 {
			return nil
		}
		_, err = br.Discard(n + 2)
		return err
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return fmt.Errorf("malformed array header %q", line)
		}
		var first error
		for i := 0; i < n; i++ {
			err := readReply(br)
			if _, isReply := err.(replyError); err != nil && !isReply {
				return err
			}
			if first == nil {
				first = err
			}
		}
		return first
	default:
		return fmt.Errorf("unexpected reply type %q", line[0])
	}
}
