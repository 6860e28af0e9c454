package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"testing"
)

// The spool must return every byte in order whether it sits in memory or on
// disk, and switch between the two any number of times.
func TestSpoolOrderAcrossMemoryAndDisk(t *testing.T) {
	s := newSpool(t.TempDir(), 1000)
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
	s := newSpool(t.TempDir(), 16)
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
