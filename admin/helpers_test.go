package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/slots"
)

// fakeManager is a sidecar.Manager that keeps task records in memory and
// records every call. Slots below 8192 belong to source "node-a", the
// others to "node-b", so an import across 8191/8192 starts two tasks, as
// the sidecar's Local does for two owners.
type fakeManager struct {
	mu       sync.Mutex
	tasks    []sidecar.Task // oldest first, as Local keeps them
	next     int
	clock    time.Time
	imports  []string // slot specs asked for
	status   []string // ids asked for ("" for all)
	cancels  []string
	controls []string // "action id budget"

	importErr, statusErr, cancelErr error
	// importHook, if set, runs inside Import (to block, or to panic).
	importHook func(ctx context.Context) error
}

func newFake() *fakeManager {
	return &fakeManager{clock: time.UnixMilli(1796102326840)}
}

func (f *fakeManager) Import(ctx context.Context, req sidecar.Request) ([]sidecar.Task, error) {
	set := req.Slots
	f.mu.Lock()
	f.imports = append(f.imports, set.String())
	hook, err := f.importHook, f.importErr
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	bySource := map[string]*slots.Set{}
	for _, s := range set.Slots() {
		src := "node-a"
		if s >= 8192 {
			src = "node-b"
		}
		if bySource[src] == nil {
			bySource[src] = &slots.Set{}
		}
		bySource[src].Add(s)
	}
	var out []sidecar.Task
	for _, src := range []string{"node-a", "node-b"} {
		if bySource[src] == nil {
			continue
		}
		f.next++
		f.clock = f.clock.Add(time.Millisecond)
		t := sidecar.Task{
			ID: fmt.Sprintf("task%02d", f.next), Slots: bySource[src].String(),
			Source: src, SourceAddr: "127.0.0.1:7001", Dest: "node-here", DestAddr: "127.0.0.1:7004",
			Operation: "import", State: sidecar.StateRunning, Phase: "snapshot",
			CreateTime: f.clock, StartTime: f.clock, KeysCopied: 42, BytesCopied: 4200, LagBytes: 7,
		}
		f.tasks = append(f.tasks, t)
		out = append(out, t)
	}
	return out, nil
}

func (f *fakeManager) Status(id string) ([]sidecar.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = append(f.status, id)
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	var out []sidecar.Task
	for _, t := range f.tasks {
		if id == "" || t.ID == id {
			out = append(out, t)
		}
	}
	if id != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", sidecar.ErrUnknownTask, id)
	}
	return out, nil
}

// Cancel returns the records as they stand when asked (a running task
// stays "running" in the reply, as with Local, whose moves end later) and
// then marks the running ones canceled.
func (f *fakeManager) Cancel(id string) ([]sidecar.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, id)
	if f.cancelErr != nil {
		return nil, f.cancelErr
	}
	// As sidecar.Manager says: the tasks it stopped, not those over.
	var out []sidecar.Task
	known := false
	for i := range f.tasks {
		t := &f.tasks[i]
		if id != "" && t.ID != id {
			continue
		}
		known = true
		if t.State == sidecar.StateRunning {
			out = append(out, *t)
			f.clock = f.clock.Add(time.Millisecond)
			t.State, t.Result, t.EndTime = sidecar.StateCanceled, "cancelled", f.clock
			t.LastError = "cancelled on request"
		}
	}
	if id != "" && !known {
		return nil, fmt.Errorf("%w: %s", sidecar.ErrUnknownTask, id)
	}
	return out, nil
}

// Control applies c to the running tasks as Local does, in their records.
func (f *fakeManager) Control(id string, c sidecar.Control) ([]sidecar.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.controls = append(f.controls, fmt.Sprint(c.Action, " ", idOrAll(id), " ", c.Budget))
	var out []sidecar.Task
	known := false
	for i := range f.tasks {
		t := &f.tasks[i]
		if id != "" && t.ID != id {
			continue
		}
		known = true
		if t.State != sidecar.StateRunning {
			continue
		}
		switch c.Action {
		case sidecar.ActionPause:
			t.Holding = []string{"paused: by an operator"}
		case sidecar.ActionResume:
			t.Holding = nil
		case sidecar.ActionHoldCutover, sidecar.ActionReleaseCutover:
			t.CutoverHeld = c.Action == sidecar.ActionHoldCutover
		case sidecar.ActionBudget:
			t.Budget = c.Budget.String()
		}
		out = append(out, *t)
	}
	if id != "" && !known {
		return nil, fmt.Errorf("%w: %s", sidecar.ErrUnknownTask, id)
	}
	return out, nil
}

// calls returns how many times each method was called.
func (f *fakeManager) calls() (imports, status, cancels int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.imports), len(f.status), len(f.cancels)
}

// seen returns copies of the slot specs imported and the ids cancelled.
func (f *fakeManager) seen() (imports, cancels []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.imports...), append([]string(nil), f.cancels...)
}

// fail sets the errors the manager answers with from now on.
func (f *fakeManager) fail(importErr, statusErr, cancelErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.importErr, f.statusErr, f.cancelErr = importErr, statusErr, cancelErr
}

// hook sets importHook.
func (f *fakeManager) hook(h func(context.Context) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.importHook = h
}

// setState changes a task's state, as a move's end would.
func (f *fakeManager) setState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.tasks {
		if f.tasks[i].ID == id {
			f.tasks[i].State = state
		}
	}
}

// served is a server running for a test: its address, and stop, which
// cancels Serve's context and returns what Serve returned.
type served struct {
	addr string
	port int
	stop func() error
}

// serve starts a server on 127.0.0.1:0; it is stopped at cleanup if the
// test did not stop it.
func serve(t *testing.T, cfg Config, m sidecar.Manager) served {
	t.Helper()
	return serveLogged(t, cfg, m, nil)
}

// serveLogged is serve with the server's log written to logger.
func serveLogged(t *testing.T, cfg Config, m sidecar.Manager, logger *slog.Logger) served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := New(cfg, m, logger)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(5 * time.Second):
				serveErr = errors.New("Serve did not return within 5s of its context's end")
			}
		})
		return serveErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return served{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port, stop: stop}
}

// client is a go-redis client as an application would make one (RESP3
// asked for, identity sent), for the server at addr.
func client(t *testing.T, addr string, opts *redis.Options) *redis.Client {
	t.Helper()
	if opts == nil {
		opts = &redis.Options{}
	}
	opts.Addr = addr
	opts.MaxRetries = -1
	opts.DialTimeout, opts.ReadTimeout = 2*time.Second, 2*time.Second
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn speaks RESP by hand, to see replies byte for byte.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// do sends one command and returns its reply as raw RESP.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	r.send(args...)
	reply, err := r.read()
	if err != nil {
		r.t.Fatalf("%q: %v", args, err)
	}
	return reply
}

func (r *rawConn) send(args ...string) {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) read() (string, error) {
	r.c.SetDeadline(time.Now().Add(5 * time.Second))
	return readRESP(r.rd)
}

// readRESP reads one RESP2/RESP3 reply and returns it raw.
func readRESP(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 3 {
		return line, fmt.Errorf("short line %q", line)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	switch line[0] {
	case '$':
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return line, err
		}
		return line + string(buf), nil
	case '*', '%':
		if line[0] == '%' {
			n *= 2
		}
		out := line
		for i := 0; i < n; i++ {
			el, err := readRESP(rd)
			out += el
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, nil
}

// resp encodes what a reply should be: strings starting with one of
// "+-:" are simple lines, others bulk strings; []any nests arrays.
func resp(v any) string {
	switch v := v.(type) {
	case string:
		if v != "" && strings.ContainsRune("+-:", rune(v[0])) {
			return v + "\r\n"
		}
		return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
	case nil:
		return "$-1\r\n"
	case int:
		return fmt.Sprintf(":%d\r\n", v)
	case []any:
		s := fmt.Sprintf("*%d\r\n", len(v))
		for _, el := range v {
			s += resp(el)
		}
		return s
	}
	panic(fmt.Sprintf("resp: %T", v))
}
