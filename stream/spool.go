package stream

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// ErrSpoolFull fails a link whose spools would hold more than
// Config.MaxSpool: its consumer trails the source by more than the cap.
var ErrSpoolFull = errors.New("spool cap reached")

// spoolCap bounds the bytes a link's spools hold at once: the unread bytes
// in memory plus the size of their files. One for the whole link, not one
// per spool: it bounds what the link takes of the disk, whether the RDB or
// the command stream holds it.
type spoolCap struct {
	limit int64 // 0: no limit

	mu         sync.Mutex
	held, peak int64
}

func newSpoolCap(limit int64) *spoolCap { return &spoolCap{limit: max(limit, 0)} }

// take counts n more bytes held, or fails with ErrSpoolFull if that would
// pass the limit.
func (c *spoolCap) take(n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit > 0 && c.held+n > c.limit {
		return fmt.Errorf("%w: %d bytes held in memory and files and %d more arrived, past the cap of %d: "+
			"the reader trails the source by that much (a slow or stalled target); raise the cap (--max-spool, move.max_spool) or move while the target keeps up",
			ErrSpoolFull, c.held, n, c.limit)
	}
	c.held += n
	c.peak = max(c.peak, c.held)
	return nil
}

func (c *spoolCap) release(n int64) {
	c.mu.Lock()
	c.held -= n
	c.mu.Unlock()
}

// bytes returns what the spools hold now and the most they have held.
func (c *spoolCap) bytes() (held, peak int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held, c.peak
}

// spool is a byte pipe whose writer never waits for its reader. It holds up
// to memLimit bytes in memory and appends the rest to temp files, so the
// replication socket is read at network speed however slow the consumer is:
// a replica that falls behind is dropped by the master's
// client-output-buffer-limit. What it holds counts against its cap.
//
// The disk part is a queue of segment files of up to segSize bytes each; a
// segment is deleted once read to its end, so a reader that trails the
// writer by little keeps little on disk however much goes through (one
// growing file, reset only when fully read, grew without bound).
type spool struct {
	mu       sync.Mutex
	cond     *sync.Cond
	chunks   [][]byte // in memory, in order; unread bytes are chunks[0][memRead:], chunks[1], …
	memRead  int
	memBytes int // unread bytes in chunks
	memLimit int

	dir      string
	shared   *spoolCap // the link's, shared with its other spool
	segSize  int64
	segs     []*segment // non-empty while spilling: every new write goes to the last
	spilled  int64      // bytes that ever went through the files, for stats
	written  int64
	err      error // set by closeWithError or fail: io.EOF for a clean end
	readDone bool  // the reader gave up; writes are dropped
}

// segment is one spool file, unlinked at creation: nothing is left behind
// on a crash, and closing it frees its space.
type segment struct {
	f    *os.File
	w, r int64 // its size; the bytes read
}

// maxSegment is the segment size without a cap. With one, segments are an
// eighth of it (at least minSegment): a segment's read part stays on disk,
// and counts against the cap, until the segment is read to its end.
const (
	maxSegment = 64 << 20
	minSegment = 64 << 10
)

func newSpool(dir string, memLimit int, c *spoolCap) *spool {
	s := &spool{memLimit: memLimit, dir: dir, shared: c, segSize: maxSegment}
	if c.limit > 0 {
		s.segSize = min(max(c.limit/8, minSegment), maxSegment)
	}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Write appends p. It blocks only on the local disk, never on the reader.
// It fails with ErrSpoolFull, writing nothing, if p would pass the cap.
func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, fmt.Errorf("spool: write after close")
	}
	if s.readDone {
		return len(p), nil
	}
	if err := s.shared.take(int64(len(p))); err != nil {
		return 0, err
	}
	s.written += int64(len(p))
	if len(s.segs) == 0 && s.memBytes+len(p) <= s.memLimit {
		s.appendChunks(p)
		s.cond.Broadcast()
		return len(p), nil
	}
	n, err := s.spill(p)
	if err != nil {
		s.shared.release(int64(len(p) - n))
		return n, err
	}
	s.cond.Broadcast()
	return n, nil
}

// spill appends p to the segment files, starting a new one whenever the
// last is full.
func (s *spool) spill(p []byte) (int, error) {
	for n := 0; n < len(p); {
		last := len(s.segs) - 1
		if last < 0 || s.segs[last].w == s.segSize {
			f, err := os.CreateTemp(s.dir, "slotmover-spool-*")
			if err != nil {
				return n, fmt.Errorf("spool to disk: %w", err)
			}
			os.Remove(f.Name())
			s.segs = append(s.segs, &segment{f: f})
			last++
		}
		seg := s.segs[last]
		k := int(min(int64(len(p)-n), s.segSize-seg.w))
		if _, err := seg.f.WriteAt(p[n:n+k], seg.w); err != nil {
			return n, fmt.Errorf("spool to disk: %w", err)
		}
		seg.w += int64(k)
		s.spilled += int64(k)
		n += k
	}
	return len(p), nil
}

// chunkSize is the unit of the in-memory queue: large enough that the queue
// stays short, small enough that a nearly empty spool holds little.
const chunkSize = 256 << 10

var chunkPool = sync.Pool{New: func() any { return make([]byte, 0, chunkSize) }}

// appendChunks copies p to the tail of the queue. Fixed chunks, not one
// growing slice: growing and compacting a slice copied the data again and
// again (a third of the process's CPU during a large snapshot).
func (s *spool) appendChunks(p []byte) {
	s.memBytes += len(p)
	for len(p) > 0 {
		if n := len(s.chunks); n == 0 || len(s.chunks[n-1]) == cap(s.chunks[n-1]) {
			s.chunks = append(s.chunks, chunkPool.Get().([]byte))
		}
		tail := &s.chunks[len(s.chunks)-1]
		k := min(len(p), cap(*tail)-len(*tail))
		*tail = append(*tail, p[:k]...)
		p = p[k:]
	}
}

// Read returns buffered bytes in order; once everything written was read it
// returns the error the writer closed with (io.EOF for a clean end).
func (s *spool) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.memBytes > 0 {
			head := s.chunks[0]
			n := copy(p, head[s.memRead:])
			s.memRead += n
			s.memBytes -= n
			s.shared.release(int64(n))
			if s.memRead == len(head) {
				chunkPool.Put(head[:0])
				s.chunks[0] = nil
				s.chunks = s.chunks[1:]
				s.memRead = 0
			}
			return n, nil
		}
		if len(s.segs) > 0 && s.segs[0].r < s.segs[0].w {
			seg := s.segs[0]
			want := min(int64(len(p)), seg.w-seg.r)
			n, err := seg.f.ReadAt(p[:want], seg.r)
			seg.r += int64(n)
			if err != nil && err != io.EOF {
				return n, fmt.Errorf("spool read back: %w", err)
			}
			if seg.r == seg.w {
				// Read to its end: a full segment is done with, and one the
				// writer is still filling is too, as the reader caught up
				// (writes go back to memory).
				s.closeSegment()
			}
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		s.cond.Wait()
	}
}

// closeSegment deletes the first segment and gives its bytes back to the cap.
func (s *spool) closeSegment() {
	seg := s.segs[0]
	seg.f.Close()
	s.shared.release(seg.w)
	s.segs[0] = nil
	s.segs = s.segs[1:]
}

// drop frees everything buffered.
func (s *spool) drop() {
	s.shared.release(int64(s.memBytes))
	s.chunks, s.memRead, s.memBytes = nil, 0, 0
	for len(s.segs) > 0 {
		s.closeSegment()
	}
}

// closeWithError ends the stream: the reader gets err after the buffered bytes.
func (s *spool) closeWithError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
}

// fail ends the stream at once: the buffered bytes, which can no longer
// lead anywhere, are dropped and the reader gets err next.
func (s *spool) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop()
	s.err = err
	s.cond.Broadcast()
}

// abandon is the reader's side of closing: buffered data is freed and later
// writes are discarded.
func (s *spool) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readDone = true
	s.drop()
	if s.err == nil {
		s.err = io.ErrClosedPipe
	}
	s.cond.Broadcast()
}

// buffered returns the bytes written but not yet read.
func (s *spool) buffered() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(s.memBytes)
	for _, seg := range s.segs {
		n += seg.w - seg.r
	}
	return n
}

// fileBytes returns the size of the spool's files.
func (s *spool) fileBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, seg := range s.segs {
		n += seg.w
	}
	return n
}

// stats returns the bytes written in all and those that went through disk.
func (s *spool) stats() (written, spilled int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.spilled
}
