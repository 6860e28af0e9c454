package natsapi

import (
	"context"
	"sync"
	"time"
)

// putTimeout bounds one put of a record: JetStream acknowledges in a
// millisecond when NATS is there, and never while it is away.
const putTimeout = 2 * time.Second

// recordWriter puts task records into the bucket from a goroutine of its
// own. A record changes at each of a move's progress reports, and the
// move must not wait for NATS: a put waits for JetStream's
// acknowledgement, up to putTimeout while NATS is away, and the reports
// come twice a second. Only each task's latest record waits to be put,
// and one goroutine puts them, so an older record never lands over a
// newer one.
type recordWriter struct {
	put  func(ctx context.Context, key string, body []byte) error
	fail func(key string, err error)

	mu      sync.Mutex
	waiting map[string][]byte // by key, the latest record not put yet
	order   []string          // waiting's keys, oldest first
	closed  bool

	wake    chan struct{}      // something waits (buffered: one wake-up at a time)
	flushes chan chan struct{} // closed once what waited before the request is put
	stop    chan struct{}
	done    chan struct{} // the goroutine has ended
}

func newRecordWriter(put func(ctx context.Context, key string, body []byte) error, fail func(key string, err error)) *recordWriter {
	w := &recordWriter{put: put, fail: fail, waiting: map[string][]byte{},
		wake: make(chan struct{}, 1), flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// keep queues body to be put under key, in place of an older record of
// key still waiting. After close it puts it itself.
func (w *recordWriter) keep(key string, body []byte) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done // what waited is put first
		w.putOne(context.Background(), key, body)
		return
	}
	if _, ok := w.waiting[key]; !ok {
		w.order = append(w.order, key)
	}
	w.waiting[key] = body
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// flush returns once every record queued before it has been put (or its
// put has failed).
func (w *recordWriter) flush() {
	done := make(chan struct{})
	select {
	case w.flushes <- done:
		<-done
	case <-w.done:
	}
}

// close puts what waits, within putTimeout in all, and stops the
// goroutine.
func (w *recordWriter) close() {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	w.mu.Unlock()
	if !closed {
		close(w.stop)
	}
	<-w.done
}

func (w *recordWriter) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			ctx, cancel := context.WithTimeout(context.Background(), putTimeout)
			w.drain(ctx)
			cancel()
			return
		case done := <-w.flushes:
			w.drain(context.Background())
			close(done)
		case <-w.wake:
			w.drain(context.Background())
		}
	}
}

// drain puts what waits until nothing does.
func (w *recordWriter) drain(ctx context.Context) {
	for {
		w.mu.Lock()
		order, waiting := w.order, w.waiting
		w.order, w.waiting = nil, map[string][]byte{}
		w.mu.Unlock()
		if len(order) == 0 {
			return
		}
		for _, key := range order {
			w.putOne(ctx, key, waiting[key])
		}
	}
}

func (w *recordWriter) putOne(ctx context.Context, key string, body []byte) {
	ctx, cancel := context.WithTimeout(ctx, putTimeout)
	defer cancel()
	if err := w.put(ctx, key, body); err != nil {
		w.fail(key, err)
	}
}
