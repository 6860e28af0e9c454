package stream

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// spool is a byte pipe whose writer never waits for its reader. It holds up
// to memLimit bytes in memory and appends the rest to a temp file, so the
// replication socket is read at network speed however slow the consumer is:
// a replica that falls behind is dropped by the master's
// client-output-buffer-limit.
type spool struct {
	mu       sync.Mutex
	cond     *sync.Cond
	chunks   [][]byte // in memory, in order; unread bytes are chunks[0][memRead:], chunks[1], …
	memRead  int
	memBytes int // unread bytes in chunks
	memLimit int

	dir      string
	file     *os.File // non-nil while spilling: every new write goes here
	fileW    int64
	fileR    int64
	spilled  int64 // bytes that ever went through the file, for stats
	written  int64
	err      error // set by closeWithError: io.EOF for a clean end
	readDone bool  // the reader gave up; writes are dropped
}

func newSpool(dir string, memLimit int) *spool {
	s := &spool{memLimit: memLimit, dir: dir}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Write appends p. It blocks only on the local disk, never on the reader.
func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, fmt.Errorf("spool: write after close")
	}
	if s.readDone {
		return len(p), nil
	}
	s.written += int64(len(p))
	if s.file == nil && s.memBytes+len(p) <= s.memLimit {
		s.appendChunks(p)
		s.cond.Broadcast()
		return len(p), nil
	}
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, "slotmover-spool-*")
		if err != nil {
			return 0, fmt.Errorf("spool to disk: %w", err)
		}
		// The file is private scratch: unlink it now so nothing is left behind on a crash.
		os.Remove(f.Name())
		s.file, s.fileW, s.fileR = f, 0, 0
	}
	if _, err := s.file.WriteAt(p, s.fileW); err != nil {
		return 0, fmt.Errorf("spool to disk: %w", err)
	}
	s.fileW += int64(len(p))
	s.spilled += int64(len(p))
	s.cond.Broadcast()
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
			if s.memRead == len(head) {
				chunkPool.Put(head[:0])
				s.chunks[0] = nil
				s.chunks = s.chunks[1:]
				s.memRead = 0
			}
			return n, nil
		}
		if s.file != nil && s.fileR < s.fileW {
			want := int64(len(p))
			if left := s.fileW - s.fileR; left < want {
				want = left
			}
			n, err := s.file.ReadAt(p[:want], s.fileR)
			s.fileR += int64(n)
			if err != nil && err != io.EOF {
				return n, fmt.Errorf("spool read back: %w", err)
			}
			if s.fileR == s.fileW {
				// Caught up: back to memory, the file is empty again.
				s.file.Close()
				s.file = nil
			}
			return n, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		s.cond.Wait()
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

// abandon is the reader's side of closing: buffered data is freed and later
// writes are discarded.
func (s *spool) abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readDone = true
	s.chunks, s.memRead, s.memBytes = nil, 0, 0
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
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
	if s.file != nil {
		n += s.fileW - s.fileR
	}
	return n
}

// stats returns the bytes written in all and those that went through disk.
func (s *spool) stats() (written, spilled int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.spilled
}
