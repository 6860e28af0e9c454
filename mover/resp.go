package mover

import (
	"bufio"
	"io"

	"github.com/slotmover/slotmover/internal/resp"
)

// readGuardedReply reads the rest of the reply of a command sent through
// guardScript, whose first line is line: whether it is the guard's answer
// that the key was gone; otherwise as resp.ReadReplyRest.
func readGuardedReply(br *bufio.Reader, line []byte) (gone bool, err error) {
	if string(line) != goneHeader {
		return false, resp.ReadReplyRest(br, line)
	}
	body := make([]byte, len(goneReply)+2)
	if _, err := io.ReadFull(br, body); err != nil {
		return false, resp.Unexpected(err)
	}
	return string(body[:len(goneReply)]) == goneReply, nil
}
