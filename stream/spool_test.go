package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"testing"
)

// The spool must return every byte in order whether it sits in memory or on
// disk, across segment files, and switch between the two any number of times.
func TestSpoolOrderAcrossMemoryAndDisk(t *testing.T) {
	s := newSpool(t.TempDir(), 1000, newSpoolCap(0))
	s.segSize = 1500 // segments end in the middle of writes
	rng := rand.New(rand.NewSource(1))
	var want bytes.Buffer
	var got bytes.Buffer
	buf := make([]byte, 700)
	for round := 0; round < 200; round++ {
		// Write a random amount, sometimes far past the memory limit.
		for i := rng.Intn(5); i >= 0; i-- {
			p := make([]byte, rng.Intn(900)+1)
			rng.Read(p)
			want.Write(p)
			if _, err := s.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		// Read back a random amount, sometimes all of it.
		for i := rng.Intn(6); i >= 0 && s.buffered() > 0; i-- {
			n, err := s.Read(buf[:rng.Intn(len(buf))+1])
			if err != nil {
				t.Fatal(err)
			}
			got.Write(buf[:n])
		}
	}
	_, spilled := s.stats()
	if spilled == 0 {
		t.Fatal("test never spilled to disk")
	}
	dropped := errors.New("link dropped")
	s.closeWithError(dropped)
	rest, err := io.ReadAll(s)
	if !errors.Is(err, dropped) {
		t.Fatalf("after the data, Read returned %v, want the close error", err)
	}
	got.Write(rest)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("spool returned %d bytes differing from the %d written", got.Len(), want.Len())
	}
}

func TestSpoolReaderWaitsForWriter(t *testing.T) {
	s := newSpool(t.TempDir(), 16, newSpoolCap(0))
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(s)
		done <- b
	}()
	var want bytes.Buffer
	for i := 0; i < 100; i++ {
		p := []byte(fmt.Sprintf("%09d|", i)) // every write different: order shows
		want.Write(p)
		if _, err := s.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	s.closeWithError(io.EOF)
	if b := <-done; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("reader got %d bytes, want the %d written, in order:\n%q\nwant\n%q", len(b), want.Len(), b, want.Bytes())
	}
}

// fileSizes is the size on disk of the spool's files, from the files.
func fileSizes(t *testing.T, s *spool) int64 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, seg := range s.segs {
		st, err := seg.f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// Ten times the cap written with no reader: the write that would pass the
// cap fails with ErrSpoolFull, and neither the files nor what the link's
// two spools hold together ever pass it.
func TestSpoolCapHolds(t *testing.T) {
	const limit = 1 << 20
	c := newSpoolCap(limit)
	rdb := newSpool(t.TempDir(), 64<<10, c)
	cmds := newSpool(t.TempDir(), 64<<10, c)
	if _, err := rdb.Write(make([]byte, 100<<10)); err != nil { // the RDB's part counts too
		t.Fatal(err)
	}
	accepted := int64(100 << 10)
	p := make([]byte, 30_000)
	var full error
	for written := 0; written < 10*limit; written += len(p) {
		_, err := cmds.Write(p)
		switch {
		case err == nil && full != nil:
			t.Fatalf("a write after the cap was reached was taken")
		case err == nil:
			accepted += int64(len(p))
		case !errors.Is(err, ErrSpoolFull):
			t.Fatalf("write at %d bytes: %v, want ErrSpoolFull", accepted, err)
		case full == nil:
			if accepted+int64(len(p)) <= limit {
				t.Fatalf("spool full at %d bytes, below the cap: %v", accepted, err)
			}
			full = err
		}
		if n := fileSizes(t, rdb) + fileSizes(t, cmds); n > limit {
			t.Fatalf("the spool files hold %d bytes, past the cap of %d", n, limit)
		}
		if held, _ := c.bytes(); held > limit {
			t.Fatalf("the spools hold %d bytes, past the cap of %d", held, limit)
		}
	}
	if full == nil {
		t.Fatal("ten times the cap written and no ErrSpoolFull")
	}
	if _, peak := c.bytes(); peak != accepted {
		t.Fatalf("peak %d bytes, want the %d taken", peak, accepted)
	}
	if cmds.fileBytes() == 0 {
		t.Fatal("the test never spilled to disk")
	}
	if !strings.Contains(full.Error(), "--max-spool") {
		t.Fatalf("the error does not say what to do: %v", full)
	}
	// The link fails both spools: their data and files go at once.
	rdb.fail(full)
	cmds.fail(full)
	if _, err := cmds.Read(p); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("read after the failure: %v, want ErrSpoolFull", err)
	}
	if held, _ := c.bytes(); held != 0 || cmds.fileBytes() != 0 {
		t.Fatalf("after the failure the spools hold %d bytes, %d in files", held, cmds.fileBytes())
	}
}

// A reader that trails the writer by a little while much goes through
// keeps little on disk: segments are deleted once read, and the cap,
// which counts the files, is never reached.
func TestSpoolReclaimsWhatWasRead(t *testing.T) {
	const limit, lag, total = 1 << 20, 8 << 10, 64 << 20
	s := newSpool(t.TempDir(), 4<<10, newSpoolCap(limit)) // less than the lag: it spills for good
	// The bytes cycle through 0…250: order shows.
	var wrote, read byte
	p, buf := make([]byte, 4096), make([]byte, 4096)
	var most int64
	for n := 0; n < total; n += len(p) {
		for i := range p {
			p[i] = wrote
			wrote = (wrote + 1) % 251
		}
		if _, err := s.Write(p); err != nil {
			t.Fatalf("after %d bytes: %v", n, err)
		}
		for s.buffered() > lag {
			k, err := s.Read(buf[:min(len(buf), int(s.buffered()-lag))])
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range buf[:k] {
				if b != read {
					t.Fatalf("read %d, want %d", b, read)
				}
				read = (read + 1) % 251
			}
		}
		most = max(most, fileSizes(t, s))
	}
	if _, spilled := s.stats(); spilled < total/2 {
		t.Fatalf("only %d bytes went through the files", spilled)
	}
	if want := s.segSize + lag; most > want {
		t.Fatalf("the spool files grew to %d bytes with the reader %d bytes behind; want at most %d", most, lag, want)
	}
}
