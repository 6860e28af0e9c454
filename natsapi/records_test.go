package natsapi

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeBucket records the puts made, and holds each until the test lets it go.
type fakeBucket struct {
	mu      sync.Mutex
	puts    []string // "key=body", in order
	release chan struct{}
	entered chan string // each put's key as it starts, if not nil
	failing bool
	failed  []string
}

func (b *fakeBucket) put(ctx context.Context, key string, body []byte) error {
	if b.entered != nil {
		b.entered <- key
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return errors.New("planted failure")
	}
	b.puts = append(b.puts, key+"="+string(body))
	return nil
}

func (b *fakeBucket) fail(key string, _ error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = append(b.failed, key)
}

func (b *fakeBucket) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.puts)
}

// within fails the test unless f returns within 10 s: a call that waits
// for a put held by the bucket never does.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a put the bucket holds", what)
	}
}

// A record queued while a put hangs (NATS away) does not wait for it;
// the records of a task that changed meanwhile are put as the latest
// alone, after the one in flight, never older over newer; flush waits
// for what was queued before it.
func TestRecordWriterDoesNotWaitForNATS(t *testing.T) {
	b := &fakeBucket{release: make(chan struct{}), entered: make(chan string, 10)}
	w := newRecordWriter(b.put, b.fail)
	defer w.close()
	within(t, "queuing records", func() {
		w.keep("a", []byte("1"))
		<-b.entered // "a=1" is in its put, which hangs
		w.keep("a", []byte("2"))
		w.keep("b", []byte("1"))
		w.keep("a", []byte("3"))
	})
	if got := b.seen(); len(got) != 0 {
		t.Fatalf("puts %q made while the bucket held them", got)
	}
	close(b.release)
	within(t, "flush", w.flush) // the bucket answers from here on
	want := []string{"a=1", "a=3", "b=1"}
	if got := b.seen(); !slices.Equal(got, want) {
		t.Fatalf("puts %q, want %q", got, want)
	}
}

// Close puts what waits; a record kept after it is put at once; a
// failed put is reported.
func TestRecordWriterClose(t *testing.T) {
	b := &fakeBucket{release: make(chan struct{})}
	close(b.release)
	w := newRecordWriter(b.put, b.fail)
	w.keep("a", []byte("1"))
	w.close()
	w.keep("a", []byte("2"))
	if got, want := b.seen(), []string{"a=1", "a=2"}; !slices.Equal(got, want) {
		t.Fatalf("puts %q, want %q", got, want)
	}
	b.failing = true
	w.keep("b", []byte("1"))
	if !slices.Equal(b.failed, []string{"b"}) {
		t.Fatalf("failed puts reported: %q, want b", b.failed)
	}
}
