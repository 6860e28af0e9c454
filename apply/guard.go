package apply

import (
	"bufio"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/resp"
)

// readGuardedReply reads the rest of the reply of a command sent through
// GuardScript, whose first line is line: whether it is the guard's answer
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

// GuardScript runs ARGV as a command on KEYS[1] if that key exists on the
// target (an expired key is deleted by the EXISTS itself), else returns
// goneReply.
var GuardScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 0 then return '` + goneReply + `' end
return redis.call(unpack(ARGV))`)

const (
	goneReply  = "slotmover:gone"
	goneHeader = "$14" // a bulk string of len(goneReply) bytes
)

var (
	argEvalSHA = []byte("EVALSHA")
	argOne     = []byte("1")
	guardSHA   = []byte(GuardScript.Hash())
)
