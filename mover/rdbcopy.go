package mover

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/apply"
	"github.com/slotmover/slotmover/rdbparse"
)

// rdbCopier is the RDB path's snapshot: it copies the chosen slots' keys
// of the source's RDB to the target, before the stream is applied.
type rdbCopier struct {
	opts          *Options
	log           *slog.Logger
	sourceID      string
	stats         *copyStats
	app           *apply.Applier
	target        *redis.Client // for its error counts
	targetVersion int
	expiring      *expiring

	args     [][]byte // reused argument list
	ttlBuf   []byte
	valueBuf []byte // room for a string value stored as an integer
	bigSeq   int
}

// copy copies the chosen keys of rdb, the source's snapshot at offset
// end, and returns once the target has them all.
//
// The commands go with the target's replies turned off (CLIENT REPLY OFF),
// which makes its ingest about a fifth faster; their outcome is proved from
// the target's error counts instead (see verifyQuiet).
func (c *rdbCopier) copy(ctx context.Context, rdb io.Reader, end int64) error {
	quiet := !c.opts.ReplyPerKey
	var before errorCounts
	if quiet {
		var err error
		if before, err = readErrorCounts(ctx, c.target); err != nil {
			return err
		}
		if err := replies(c.app, false); err != nil {
			return err
		}
	}
	// A key that expired before its turn is not copied, but the stream
	// may still hold writes the source made to it in time: guard it.
	sc := rdbparse.NewScanner(bufio.NewReaderSize(rdb, 1<<20), c.opts.Slots, rdbparse.OnExpired(c.expiring.track))
	for {
		e, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := c.copyEntry(e, sc.Version(), quiet); err != nil {
			return err
		}
	}
	if quiet {
		if err := replies(c.app, true); err != nil {
			return err
		}
	}
	c.app.Mark(end)
	if err := c.app.Wait(ctx, end); err != nil {
		return err
	}
	if !quiet {
		return nil
	}
	after, err := readErrorCounts(ctx, c.target)
	if err != nil {
		return err
	}
	others, err := verifyQuiet(before, after, func() (bool, error) {
		return importingFrom(ctx, c.target, c.opts.Slots, c.sourceID)
	})
	if others > 0 {
		c.log.Info("other clients' SETs or RESTOREs were refused on the target during the snapshot; the slots stayed importing and every error was a redirection, so none was the move's", "refused", others)
	}
	return err
}

// replies turns the target's replies on or off. ON is answered, so once
// its reply is in, every command before it has run.
func replies(app *apply.Applier, on bool) error {
	if on {
		return app.Send(0, "CLIENT REPLY ON", argClient, argReply, argOn)
	}
	return app.SendQuiet(argClient, argReply, argOff)
}

// copyEntry copies one key to the target: a string with SET, anything else
// with RESTORE-ASKING and the source's own payload, or, for a big
// collection or a target too old for the payload's RDB version, as chunked
// commands.
func (c *rdbCopier) copyEntry(e *rdbparse.Entry, version int, quiet bool) error {
	c.expiring.track(e.Key, e.ExpireAt)
	c.stats.keys.Add(1)
	c.stats.bytes.Add(int64(len(e.Payload)))
	if e.Type == rdbparse.TypeString {
		return c.setString(e, quiet)
	}
	if e.Elements >= c.opts.BigKeyElements || version > c.targetVersion {
		// Replayed commands are checked by their replies.
		if quiet {
			if err := replies(c.app, true); err != nil {
				return err
			}
			defer replies(c.app, false)
		}
		return c.replay(e, version)
	}
	c.ttlBuf = strconv.AppendInt(c.ttlBuf[:0], e.ExpireAt, 10)
	c.args = append(c.args[:0], argRestoreAsking, e.Key, c.ttlBuf, e.Payload, argReplace, argAbsTTL)
	if quiet {
		return c.app.SendQuiet(c.args...)
	}
	return c.app.Send(0, "RESTORE "+string(e.Key), c.args...)
}

// setString copies a string with ASKING + SET: the target keeps the value
// it is given, where RESTORE costs it a checksum and a copy more (with 512-byte
// values its ingest was 25% faster), and a string needs no RDB version.
func (c *rdbCopier) setString(e *rdbparse.Entry, quiet bool) error {
	v, err := e.StringValue(c.valueBuf[:0])
	if err != nil {
		return err
	}
	c.args = append(c.args[:0], argSet, e.Key, v)
	if e.ExpireAt > 0 {
		c.ttlBuf = strconv.AppendInt(c.ttlBuf[:0], e.ExpireAt, 10)
		c.args = append(c.args, argPXAT, c.ttlBuf)
	}
	if !quiet {
		return sendAsking(c.app, "SET "+string(e.Key), c.args...)
	}
	if err := c.app.SendQuiet(argAsking); err != nil {
		return err
	}
	return c.app.SendQuiet(c.args...)
}

// replay rebuilds a key from its decoded elements under a temporary key of
// the same slot, then renames it into place, so that a failure never leaves
// half a key under the real name. Its TTL is set last.
func (c *rdbCopier) replay(e *rdbparse.Entry, version int) error {
	obj, err := rdbparse.Decode(e, version)
	if err != nil {
		return fmt.Errorf("decode %q for replay: %w", e.Key, err)
	}
	c.stats.bigKeys.Add(1)
	c.bigSeq++
	tmp := []byte(tempKey(e.Slot, c.opts.TaskID, c.bigSeq))
	label := "replay of " + strconv.Quote(string(e.Key))
	send := func(args ...[]byte) error { return sendAsking(c.app, label, args...) }
	if err := send([]byte("DEL"), tmp); err != nil {
		return err
	}
	for args := range obj.Commands(tmp, c.opts.chunkLimit()) {
		if err := send(args...); err != nil {
			return err
		}
	}
	// On an importing slot a two-key command needs both keys to exist.
	if err := send(argSet, e.Key, []byte("placeholder")); err != nil {
		return err
	}
	if err := send([]byte("RENAME"), tmp, e.Key); err != nil {
		return err
	}
	if e.ExpireAt > 0 {
		return send([]byte("PEXPIREAT"), e.Key, []byte(strconv.FormatInt(e.ExpireAt, 10)))
	}
	return nil
}
