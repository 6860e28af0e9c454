// Package apply writes to the target: one connection, commands pipelined
// with a bounded window, every reply checked in order, and the replication
// offset through which the target has applied everything.
package apply

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/resp"
)

// Applier writes commands to the target over one connection, pipelined with a
// bounded window of unanswered commands, and checks every reply in order.
// It tracks the replication offset through which everything sent has been
// acknowledged: the only thing the cutover waits on.
type Applier struct {
	addr   string
	conn   net.Conn
	id     int64 // the connection's CLIENT ID on the target
	window int

	// wmu guards the write buffer, so that flushing to the network never
	// holds up the reply reader, which takes mu.
	wmu   sync.Mutex
	bw    *bufio.Writer
	dirty bool // bytes in bw not yet flushed

	mu       sync.Mutex
	cond     *sync.Cond // signals replies, errors and window room
	queue    []pending
	head     int
	inflight int
	acked    int64
	gone     [][]byte // keys a guarded command found gone (see GuardScript)
	err      error

	gate    Gate // nil: never held
	gateCtx context.Context

	stop chan struct{}
	wg   sync.WaitGroup
}

// Gate holds the writes to the target (see package throttle).
type Gate interface {
	Wait(context.Context) error
}

// SetGate makes every command wait for g before it is written; ctx ends
// those waits. Call it before the first Send.
func (a *Applier) SetGate(ctx context.Context, g Gate) {
	a.gate, a.gateCtx = g, ctx
}

// pending is one expected reply, or (reply false) an offset mark that is
// acknowledged as soon as every reply before it is in.
type pending struct {
	reply bool
	end   int64  // offset acknowledged with this entry; 0 for none
	label string // what the command was, for errors
	guard []byte // the key, for a command sent through GuardScript
}

// Dial connects to the target and authenticates. start is the offset that
// counts as acknowledged before anything is sent.
func Dial(ctx context.Context, c cluster.Conn, window int, start int64) (*Applier, error) {
	conn, err := c.Dial(ctx)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 256<<10)
	id, err := clientID(conn, br)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("CLIENT ID on %s: %w", c.Addr, err)
	}
	a := &Applier{
		addr:   c.Addr,
		conn:   conn,
		id:     id,
		window: max(window, 1),
		bw:     bufio.NewWriterSize(conn, 256<<10),
		acked:  start,
		stop:   make(chan struct{}),
	}
	a.cond = sync.NewCond(&a.mu)
	a.wg.Add(2)
	go func() { defer a.wg.Done(); a.readReplies(br) }()
	go func() { defer a.wg.Done(); a.flushLoop() }()
	return a, nil
}

// Send queues one command. end, when not 0, is the replication offset that
// counts as acknowledged once its reply (and every earlier one) is in. It
// blocks while the window is full; it returns the first failure seen so far.
// Send and Mark are called from one goroutine: their order is the order on
// the wire.
func (a *Applier) Send(end int64, label string, args ...[]byte) error {
	return a.send(pending{reply: true, end: end, label: label}, args)
}

// SendGuarded sends a command on key through GuardScript (loaded on the
// target): it runs only if the key still exists there; if not, the key is
// reported by TakeGone once the reply is in.
func (a *Applier) SendGuarded(label string, key []byte, args ...[]byte) error {
	full := make([][]byte, 0, 4+len(args))
	full = append(full, argEvalSHA, guardSHA, argOne, key)
	return a.send(pending{reply: true, label: label, guard: key}, append(full, args...))
}

// TakeGone returns the keys guarded commands found gone since the last call.
func (a *Applier) TakeGone() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gone
	a.gone = nil
	return g
}

// Gone reports how many keys wait to be taken by TakeGone.
func (a *Applier) Gone() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.gone)
}

func (a *Applier) send(p pending, args [][]byte) error {
	if err := a.held(); err != nil {
		return err
	}
	a.mu.Lock()
	if a.inflight >= a.window && a.err == nil {
		a.mu.Unlock()
		a.Flush()
		a.mu.Lock()
		for a.inflight >= a.window && a.err == nil {
			a.cond.Wait()
		}
	}
	if a.err != nil {
		defer a.mu.Unlock()
		return a.err
	}
	a.queue = append(a.queue, p)
	a.inflight++
	a.mu.Unlock()
	return a.write(args)
}

// SendQuiet writes a command whose reply is not read: for commands sent
// while the target's replies are off (CLIENT REPLY OFF), and for that
// command itself. The caller checks their outcome another way.
func (a *Applier) SendQuiet(args ...[]byte) error {
	if err := a.held(); err != nil {
		return err
	}
	if err := a.Err(); err != nil {
		return err
	}
	return a.write(args)
}

// held waits for the gate, if any.
func (a *Applier) held() error {
	if a.gate == nil {
		return nil
	}
	return a.gate.Wait(a.gateCtx)
}

func (a *Applier) write(args [][]byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	buf := resp.Append(a.bw.AvailableBuffer(), args...)
	if _, err := a.bw.Write(buf); err != nil {
		return a.fail(fmt.Errorf("write to target %s: %w", a.addr, err))
	}
	a.dirty = true
	return nil
}

// Flush sends whatever is buffered.
func (a *Applier) Flush() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if !a.dirty {
		return nil
	}
	a.dirty = false
	if err := a.bw.Flush(); err != nil {
		return a.fail(fmt.Errorf("write to target %s: %w", a.addr, err))
	}
	return nil
}

// Mark acknowledges offset end as soon as every reply sent before it is in:
// for stream bytes that need nothing done on the target (other slots, PINGs).
func (a *Applier) Mark(end int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.head == len(a.queue) {
		a.acked = max(a.acked, end)
		a.cond.Broadcast()
		return
	}
	if last := &a.queue[len(a.queue)-1]; !last.reply {
		last.end = end
		return
	}
	a.queue = append(a.queue, pending{end: end})
}

// Kill ends the applier's connection on the target (through c, another
// connection to it), and with it every command the target has received
// but not yet run: after Close, commands sent with replies off may still
// wait in its buffers. By the connection's ID, not its address: the target
// formats a client's address only when first asked, and once this side has
// reset the connection it formats it empty, so CLIENT KILL ADDR would miss
// a client whose buffered commands still run.
func (a *Applier) Kill(ctx context.Context, c *redis.Client) error {
	if err := a.kill(ctx, c).Err(); err != nil {
		return fmt.Errorf("CLIENT KILL ID %d on %s: %w", a.id, a.addr, err)
	}
	return nil
}

// kill sends the CLIENT KILL; its reply counts the connections ended (0
// when the target had already closed this one).
func (a *Applier) kill(ctx context.Context, c redis.Cmdable) *redis.IntCmd {
	return c.ClientKillByFilter(ctx, "ID", strconv.FormatInt(a.id, 10))
}

// clientID asks the target for the connection's ID, before anything else is
// sent on it.
func clientID(conn net.Conn, br *bufio.Reader) (int64, error) {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(resp.Append(nil, "CLIENT", "ID")); err != nil {
		return 0, err
	}
	line, err := resp.ReadLine(br)
	if err != nil {
		return 0, err
	}
	if len(line) < 2 || line[0] != ':' {
		return 0, fmt.Errorf("unexpected reply %q", resp.Truncate(line))
	}
	return strconv.ParseInt(string(line[1:]), 10, 64)
}

// Acked returns the offset through which everything is acknowledged.
func (a *Applier) Acked() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

// Err returns the first failure, if any.
func (a *Applier) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Wait flushes and waits until offset off is acknowledged, or every command
// sent is answered when off is 0.
func (a *Applier) Wait(ctx context.Context, off int64) error {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	if err := a.Flush(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.err == nil && ctx.Err() == nil {
		if off == 0 && a.inflight == 0 || off != 0 && a.acked >= off {
			return nil
		}
		a.cond.Wait()
	}
	if a.err != nil {
		return a.err
	}
	return ctx.Err()
}

// Close stops the applier without waiting for outstanding replies.
func (a *Applier) Close() error {
	a.mu.Lock()
	a.failLocked(errApplierClosed)
	a.mu.Unlock()
	a.conn.Close()
	a.wg.Wait()
	return nil
}

var errApplierClosed = errors.New("applier closed")

func (a *Applier) failLocked(err error) {
	if a.err == nil {
		a.err = err
		select {
		case <-a.stop:
		default:
			close(a.stop)
		}
	}
	a.cond.Broadcast()
}

func (a *Applier) fail(err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failLocked(err)
	return a.err
}

// flushLoop bounds how long a command waits in the buffer when the producer
// has nothing more to send for a while.
func (a *Applier) flushLoop() {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.Flush()
		}
	}
}

func (a *Applier) readReplies(br *bufio.Reader) {
	for {
		line, rerr := resp.ReadLine(br)
		var gone bool
		if rerr == nil {
			// Only this goroutine takes from the queue, and an entry is
			// queued before its command is written: the head is this reply's.
			a.mu.Lock()
			guarded := a.head < len(a.queue) && a.queue[a.head].guard != nil
			a.mu.Unlock()
			if guarded {
				gone, rerr = readGuardedReply(br, line)
			} else {
				rerr = resp.ReadReplyRest(br, line)
			}
		}
		a.mu.Lock()
		var re resp.Error
		if rerr != nil && !errors.As(rerr, &re) {
			a.failLocked(fmt.Errorf("read reply from target %s: %w", a.addr, rerr))
			a.mu.Unlock()
			return
		}
		if a.head == len(a.queue) {
			a.failLocked(fmt.Errorf("target %s sent a reply nobody asked for", a.addr))
			a.mu.Unlock()
			return
		}
		p := a.queue[a.head]
		a.head++
		a.inflight--
		if rerr != nil {
			a.failLocked(fmt.Errorf("%s on %s: %w", p.label, a.addr, rerr))
			a.mu.Unlock()
			return
		}
		if gone {
			a.gone = append(a.gone, p.guard)
		}
		if p.end != 0 {
			a.acked = p.end
		}
		for a.head < len(a.queue) && !a.queue[a.head].reply {
			a.acked = max(a.acked, a.queue[a.head].end)
			a.head++
		}
		if a.head == len(a.queue) {
			a.queue, a.head = a.queue[:0], 0
		} else if a.head > 4096 && a.head > len(a.queue)/2 {
			n := copy(a.queue, a.queue[a.head:])
			a.queue, a.head = a.queue[:n], 0
		}
		a.cond.Broadcast()
		a.mu.Unlock()
	}
}
