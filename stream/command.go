package stream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/slotmover/slotmover/internal/resp"
)

// Command is one unit of the replication stream as the mover must apply it:
// a single command, or a whole MULTI…EXEC block.
type Command struct {
	Args  [][]byte
	Class KeyClass
	Keys  []int  // indexes in Args of the command's keys
	Slot  uint16 // the keys' slot, for ClassKeyed

	// Start and End are replication offsets: the command's bytes follow
	// Start and end at End, the source's master_repl_offset once it ran.
	Start, End int64

	// Tx holds the commands of a MULTI…EXEC block (MULTI and EXEC left
	// out); Args is then nil. The block's Class is ClassKeyed with the slot
	// of all its keys, ClassCrossSlot if they span slots, ClassKeyless or
	// ClassUnknown if any command inside is, ClassNoop if none has keys.
	Tx []Command
}

// Name returns the command name in upper case ("MULTI" for a block).
func (c *Command) Name() string {
	if c.Tx != nil {
		return "MULTI"
	}
	return strings.ToUpper(string(c.Args[0]))
}

// CommandReader parses the command stream that follows the snapshot.
type CommandReader struct {
	link *Link
	br   *bufio.Reader
	keys *KeyTable
	off  int64 // replication offset of the next byte
}

// Commands returns a reader of the command stream; keys must come from the
// source's own COMMAND table. Read the RDB to its end first: the stream
// starts after it.
func (l *Link) Commands(keys *KeyTable) *CommandReader {
	return &CommandReader{link: l, br: bufio.NewReaderSize(l.cmds, 1<<20), keys: keys, off: l.Offset}
}

// Next returns the next command or block. Offsets never skip a byte: each
// Start is the previous End. A REPLCONF GETACK is returned as ClassNoop:
// the link acknowledges nothing (see Link.sendAck).
func (r *CommandReader) Next() (*Command, error) {
	cmd, err := r.next()
	if err != nil {
		return nil, err
	}
	r.link.consumed.Store(r.off - r.link.Offset)
	return cmd, nil
}

func (r *CommandReader) next() (*Command, error) {
	cmd, err := r.read()
	if err != nil {
		return nil, err
	}
	if !bytes.EqualFold(cmd.Args[0], []byte("MULTI")) {
		return cmd, nil
	}
	block := &Command{Start: cmd.Start, Tx: []Command{}, Class: ClassNoop}
	for {
		inner, err := r.read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("inside MULTI at offset %d: %w", block.Start, err)
		}
		switch {
		case bytes.EqualFold(inner.Args[0], []byte("EXEC")):
			block.End = inner.End
			return block, nil
		case bytes.EqualFold(inner.Args[0], []byte("MULTI")):
			return nil, fmt.Errorf("%w: nested MULTI at offset %d", resp.ErrProtocol, inner.Start)
		}
		block.Tx = append(block.Tx, *inner)
		mergeClass(block, inner)
	}
}

// mergeClass folds one command of a block into the block's class.
func mergeClass(block, inner *Command) {
	switch {
	case inner.Class == ClassUnknown || block.Class == ClassUnknown:
		block.Class = ClassUnknown
	case inner.Class == ClassKeyless || block.Class == ClassKeyless:
		block.Class = ClassKeyless
	case inner.Class == ClassCrossSlot || block.Class == ClassCrossSlot:
		block.Class = ClassCrossSlot
	case inner.Class == ClassKeyed && block.Class == ClassKeyed && inner.Slot != block.Slot:
		block.Class = ClassCrossSlot
	case inner.Class == ClassKeyed:
		block.Class, block.Slot = ClassKeyed, inner.Slot
	}
}

// read parses one command and classifies it.
func (r *CommandReader) read() (*Command, error) {
	args, n, err := resp.ReadCommand(r.br)
	if err != nil {
		if n > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("command stream at offset %d: %w", r.off, err)
	}
	cmd := &Command{Args: args, Start: r.off, End: r.off + n}
	r.off += n
	cmd.Class, cmd.Keys, cmd.Slot = r.keys.Classify(args, nil)
	return cmd, nil
}
