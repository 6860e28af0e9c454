// Package stream is slotmover's replica link to a source master: it performs
// a full sync as a replica would, hands out the RDB snapshot as an io.Reader
// holding exactly its bytes, then the replication command stream, parsed,
// with the exact replication offsets of every command.
//
// The socket is always read at network speed into local spools (memory up to
// a bound, then a temp file), whatever the consumer's pace: a replica that
// falls behind would be dropped by the master's client-output-buffer-limit.
package stream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/resp"
)

// Config says how to reach the source master and how to replicate from it.
type Config struct {
	cluster.Conn

	// KeepSourceConfig leaves the source's settings alone. By default
	// repl-diskless-sync-delay is set to 0 (the 5 s default would delay every
	// move by that much) and rdbcompression to no for the sync, and both are
	// restored once the snapshot has arrived. With From (the keys path, whose
	// reads DUMP every key: with compression on, a DUMP of an incompressible
	// value costs the source 5× as much), only rdbcompression is, until the
	// link is closed.
	KeepSourceConfig bool

	// From, if set, continues the source's history right after this point
	// (PSYNC <replid> <offset+1>) instead of a full sync: no fork and no
	// RDB, and RDB() is empty. The source must still hold the point in its
	// backlog (see Position); a source that would answer with a full sync
	// is refused and the link not opened.
	From *Position

	SpoolDir    string        // where spools spill; "" for the system temp dir
	SpoolMemory int           // bytes each spool keeps in memory; 0 for 64 MiB
	MaxSpool    int64         // bytes the spools hold at once, memory and files, RDB and stream; 0 for no bound; past it the link fails with ErrSpoolFull
	Timeout     time.Duration // silence that counts as a dead link; 0 for 60 s (the master's repl-timeout)
	Logger      *slog.Logger  // nil for slog.Default()
}

func (c *Config) defaults() {
	if c.SpoolMemory <= 0 {
		c.SpoolMemory = 64 << 20
	}
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Position is a point in a master's replication history.
type Position struct {
	ReplID string
	Offset int64
}

// ErrNoContinue is returned by Open when the source would not continue
// from Config.From (the point has left its backlog, or it has none).
var ErrNoContinue = errors.New("the source cannot continue from that point of its history")

// ErrClosed is what readers see after Close.
var ErrClosed = errors.New("replica link closed")

// Link is one full sync and the command stream after it.
type Link struct {
	// ReplID and Offset are the master's answer to PSYNC: the command stream
	// starts right after Offset in the history of ReplID.
	ReplID string
	Offset int64

	cfg      Config
	log      *slog.Logger
	conn     net.Conn
	rdb      *spool
	cmds     *spool
	spools   *spoolCap
	rdbBytes atomic.Int64
	diskless atomic.Bool
	rdbDone  chan struct{}

	consumed atomic.Int64 // command-stream bytes handed to the consumer

	writeMu sync.Mutex    // REPLCONF ACKs come from two goroutines
	done    chan struct{} // closed on the first failure or Close
	wg      sync.WaitGroup
	errOnce sync.Once
	err     error
	tuned   *configLease
}

// Open connects to the source, authenticates, announces itself as a replica
// and asks for a full sync. It returns once the master has answered
// +FULLRESYNC; the RDB and the command stream then arrive in the background.
func Open(ctx context.Context, cfg Config) (*Link, error) {
	cfg.defaults()
	spools := newSpoolCap(cfg.MaxSpool)
	l := &Link{
		cfg:     cfg,
		log:     cfg.Logger.With("source", cfg.Addr),
		rdb:     newSpool(cfg.SpoolDir, cfg.SpoolMemory, spools),
		cmds:    newSpool(cfg.SpoolDir, cfg.SpoolMemory, spools),
		spools:  spools,
		rdbDone: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if !cfg.KeepSourceConfig {
		overrides := fullSyncOverrides
		if cfg.From != nil {
			overrides = partialSyncOverrides
		}
		lease, err := tuneSource(ctx, cfg, overrides, l.log)
		if err != nil {
			return nil, err
		}
		l.tuned = lease
	}
	conn, br, err := l.handshake(ctx)
	if err != nil {
		l.tuned.release(l.log)
		return nil, err
	}
	l.conn = conn
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.fail(l.receive(br)) }()
	go func() { defer l.wg.Done(); l.ackLoop() }()
	if cfg.From != nil {
		l.log.Info("partial sync started", "replid", l.ReplID, "offset", l.Offset)
	} else {
		l.log.Info("full sync started", "replid", l.ReplID, "offset", l.Offset)
	}
	return l, nil
}

func (l *Link) handshake(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	conn, err := l.cfg.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	// A cancelled ctx must end a handshake blocked on a silent master.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	br := bufio.NewReaderSize(&silenceReader{conn: conn, timeout: l.cfg.Timeout}, 1<<20)
	step := func(want string, args ...string) (string, error) {
		if _, err := conn.Write(resp.Append(nil, args...)); err != nil {
			return "", err
		}
		line, err := readReply(br)
		if err != nil {
			return "", err
		}
		if want != "" && line != want {
			return line, fmt.Errorf("%s answered %q", args[0], line)
		}
		return line, nil
	}
	fail := func(what string, err error) (net.Conn, *bufio.Reader, error) {
		conn.Close()
		return nil, nil, fmt.Errorf("replica handshake with %s: %s: %w", l.cfg.Addr, what, err)
	}
	// Port 0: the link listens nowhere; the source lists it so in INFO.
	if _, err := step("+OK", "REPLCONF", "listening-port", "0"); err != nil {
		return fail("REPLCONF listening-port", err)
	}
	if _, err := step("+OK", "REPLCONF", "capa", "eof", "capa", "psync2"); err != nil {
		return fail("REPLCONF capa", err)
	}
	replID, offset := "?", "-1"
	if from := l.cfg.From; from != nil {
		replID, offset = from.ReplID, strconv.FormatInt(from.Offset+1, 10)
	}
	line, err := step("", "PSYNC", replID, offset)
	if err != nil {
		return fail("PSYNC", err)
	}
	f := strings.Fields(line)
	switch {
	case l.cfg.From != nil && len(f) >= 1 && f[0] == "+CONTINUE":
		// The answer names the history's current ID if it changed (a
		// failover); the offsets go on.
		l.ReplID, l.Offset = l.cfg.From.ReplID, l.cfg.From.Offset
		if len(f) == 2 {
			l.ReplID = f[1]
		}
	case l.cfg.From != nil:
		return fail("PSYNC", fmt.Errorf("%w: answered %q", ErrNoContinue, line))
	case len(f) != 3 || f[0] != "+FULLRESYNC":
		return fail("PSYNC", fmt.Errorf("unexpected answer %q", line))
	default:
		if l.Offset, err = strconv.ParseInt(f[2], 10, 64); err != nil {
			return fail("PSYNC", fmt.Errorf("bad offset in %q", line))
		}
		l.ReplID = f[1]
	}
	if !stop() {
		return nil, nil, fmt.Errorf("replica handshake with %s: %w", l.cfg.Addr, ctx.Err())
	}
	return conn, br, nil
}

// readReply reads a one-line reply, skipping the bare newlines a master sends
// as keep-alives while it prepares the sync. An error reply is an error.
func readReply(br *bufio.Reader) (string, error) {
	for {
		if b, err := br.Peek(1); err == nil && b[0] == '\n' {
			br.Discard(1)
			continue
		}
		line, err := resp.ReadLine(br)
		if err != nil {
			return "", resp.Unexpected(err)
		}
		if len(line) == 0 {
			continue
		}
		if line[0] == '-' {
			return "", fmt.Errorf("master replied %q", line[1:])
		}
		return string(line), nil
	}
}

// receive copies the RDB, then the command stream, from the socket into the
// spools, at whatever speed the network gives.
func (l *Link) receive(br *bufio.Reader) error {
	var rest []byte
	if l.cfg.From == nil {
		var err error
		if rest, err = l.receiveRDB(br); err != nil {
			l.rdb.closeWithError(err)
			return err
		}
	}
	l.rdb.closeWithError(io.EOF)
	close(l.rdbDone)
	if l.cfg.From == nil {
		form := "disk"
		if l.diskless.Load() {
			form = "diskless"
		}
		l.log.Info("snapshot received", "replid", l.ReplID, "offset", l.Offset, "rdb_bytes", l.rdbBytes.Load(), "form", form)
		l.tuned.release(l.log)
	}

	buf := make([]byte, 256<<10)
	src := io.MultiReader(bytes.NewReader(rest), br)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := l.cmds.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return errors.New("source closed the replication link")
			}
			return fmt.Errorf("replication link: %w", err)
		}
	}
}

// receiveRDB reads the bulk header, then exactly the RDB's bytes into the rdb
// spool. It returns any bytes read past the RDB (possible only in the diskless form).
func (l *Link) receiveRDB(br *bufio.Reader) ([]byte, error) {
	header, err := readReply(br)
	if err != nil {
		return nil, fmt.Errorf("read RDB header: %w", err)
	}
	if len(header) < 2 || header[0] != '$' {
		return nil, fmt.Errorf("read RDB header: unexpected %q", resp.Truncate([]byte(header)))
	}
	buf := make([]byte, 256<<10)
	if mark, ok := strings.CutPrefix(header, "$EOF:"); ok {
		if len(mark) != 40 {
			return nil, fmt.Errorf("read RDB header: bad EOF mark in %q", header)
		}
		l.diskless.Store(true)
		return l.receiveUntilMark(br, []byte(mark), buf)
	}
	size, err := strconv.ParseInt(header[1:], 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("read RDB header: bad length in %q", header)
	}
	for left := size; left > 0; {
		chunk := buf
		if int64(len(chunk)) > left {
			chunk = chunk[:left]
		}
		n, err := br.Read(chunk)
		if n > 0 {
			if _, werr := l.rdb.Write(chunk[:n]); werr != nil {
				return nil, werr
			}
			l.rdbBytes.Add(int64(n))
			left -= int64(n)
		}
		if err != nil && left > 0 {
			return nil, fmt.Errorf("read RDB: %d of %d bytes: %w", size-left, size, resp.Unexpected(err))
		}
	}
	return nil, nil
}

// receiveUntilMark copies bytes until the 40-byte end mark. The last
// len(mark)-1 bytes of each read are held back, as the mark may start there.
func (l *Link) receiveUntilMark(br *bufio.Reader, mark, buf []byte) ([]byte, error) {
	held := 0
	for {
		n, err := br.Read(buf[held:])
		data := buf[:held+n]
		if i := bytes.Index(data, mark); i >= 0 {
			if _, werr := l.rdb.Write(data[:i]); werr != nil {
				return nil, werr
			}
			l.rdbBytes.Add(int64(i))
			return bytes.Clone(data[i+len(mark):]), nil
		}
		keep := min(len(data), len(mark)-1)
		if _, werr := l.rdb.Write(data[:len(data)-keep]); werr != nil {
			return nil, werr
		}
		l.rdbBytes.Add(int64(len(data) - keep))
		held = copy(buf, data[len(data)-keep:])
		if err != nil {
			return nil, fmt.Errorf("read diskless RDB after %d bytes: %w", l.rdbBytes.Load(), resp.Unexpected(err))
		}
	}
}

// ackLoop sends REPLCONF ACK once a second, as a replica must to stay
// connected. A diskless master streams commands only after an ACK sent after
// the transfer, and ignores ACKs that come before it has seen its child
// finish, while the stream piles up in its output buffer: so between the
// RDB's end and the first stream byte, ACK every 10 ms.
func (l *Link) ackLoop() {
	slow := time.NewTicker(time.Second)
	defer slow.Stop()
	fast := time.NewTicker(10 * time.Millisecond)
	defer fast.Stop()
	rdbDone := l.rdbDone
	var fastC <-chan time.Time
	for {
		select {
		case <-l.done:
			return
		case <-rdbDone:
			rdbDone, fastC = nil, fast.C
		case <-fastC:
			if streamed, _ := l.cmds.stats(); streamed > 0 {
				fastC = nil
				continue
			}
		case <-slow.C:
		}
		if err := l.sendAck(); err != nil {
			l.fail(fmt.Errorf("send REPLCONF ACK: %w", err))
			return
		}
	}
}

// sendAck acknowledges offset 0, whatever the link has received or its
// consumer applied. A master counts a replica in WAIT (and Valkey 8's
// SETSLOT, which waits the same way) by the offset it acknowledged: the
// link holds only the moving slots' writes, the target holds them only
// until the move is rolled back, and neither survives the source's loss as
// a replica's copy would. So WAIT must never count the link. The ACK still
// keeps the link from the master's repl-timeout; that its time, not its
// offset, makes the link count for min-replicas-to-write is said in
// docs/operations.md.
func (l *Link) sendAck() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.conn.SetWriteDeadline(time.Now().Add(l.cfg.Timeout))
	_, err := l.conn.Write(resp.Append(nil, "REPLCONF", "ACK", "0"))
	return err
}

// fail records the first error and ends both spools with it, so a reader
// sees the failure after the data that arrived before it.
func (l *Link) fail(err error) {
	l.errOnce.Do(func() {
		l.err = err
		close(l.done)
		if !errors.Is(err, ErrClosed) {
			l.log.Error("replica link failed", "replid", l.ReplID, "error", err)
		}
		if errors.Is(err, ErrSpoolFull) {
			// The reader learns at once, not after draining up to the cap
			// at the pace that filled it; the disk is freed now.
			l.rdb.fail(err)
			l.cmds.fail(err)
		} else {
			l.rdb.closeWithError(err)
			l.cmds.closeWithError(err)
		}
		if l.conn != nil {
			l.conn.Close()
		}
	})
}

// RDB returns the snapshot: exactly the RDB's bytes, then io.EOF. Read it
// before the command stream.
func (l *Link) RDB() io.Reader { return l.rdb }

// RDBDone is closed once the whole RDB has been received.
func (l *Link) RDBDone() <-chan struct{} { return l.rdbDone }

// Stats describes the link's progress.
type Stats struct {
	RDBBytes      int64 // snapshot bytes received
	Diskless      bool  // the snapshot came in the $EOF form
	StreamBytes   int64 // command-stream bytes received
	ConsumedBytes int64 // command-stream bytes handed to the consumer
	Spilled       int64 // bytes that went through the spool files
	Buffered      int64 // bytes received but not yet read, both spools
	SpoolBytes    int64 // what the spools hold now, in memory and files (what MaxSpool bounds)
	SpoolFiles    int64 // of which in files
	SpoolPeak     int64 // the most SpoolBytes has been
}

func (l *Link) Stats() Stats {
	_, rdbSpilled := l.rdb.stats()
	written, cmdSpilled := l.cmds.stats()
	st := Stats{
		RDBBytes:      l.rdbBytes.Load(),
		Diskless:      l.diskless.Load(),
		StreamBytes:   written,
		ConsumedBytes: l.consumed.Load(),
		Spilled:       rdbSpilled + cmdSpilled,
		Buffered:      l.rdb.buffered() + l.cmds.buffered(),
		SpoolFiles:    l.rdb.fileBytes() + l.cmds.fileBytes(),
	}
	st.SpoolBytes, st.SpoolPeak = l.spools.bytes()
	return st
}

// Close ends the link, waits for its goroutines and frees the spools.
func (l *Link) Close() error {
	l.fail(ErrClosed)
	l.wg.Wait()
	l.rdb.abandon()
	l.cmds.abandon()
	l.tuned.release(l.log)
	if errors.Is(l.err, ErrClosed) {
		return nil
	}
	return l.err
}

// silenceReader fails a read when the master has sent nothing, not even a
// keep-alive, for longer than timeout.
type silenceReader struct {
	conn    net.Conn
	timeout time.Duration
}

func (r *silenceReader) Read(p []byte) (int, error) {
	r.conn.SetReadDeadline(time.Now().Add(r.timeout))
	n, err := r.conn.Read(p)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("source silent for %s: %w", r.timeout, err)
	}
	return n, err
}
