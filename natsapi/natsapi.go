// Package natsapi puts a sidecar on NATS: a NATS micro service named
// "slotmover" (so $SRV.PING, INFO and STATS find every sidecar) whose
// endpoints are import, status, cancel, control and ping under
// <prefix>.<node>, and <prefix>.ping for all; task events on
// <prefix>.events.<node>.<task>, and, with JetStream, those events kept in
// a stream (EventStream) for consumers that must see each at least once,
// and each task's record in a key-value bucket, where a restarted sidecar
// finds its unfinished tasks.
//
// NATS is not needed for the sidecar to work: the admin port serves
// without it, the client reconnects by itself, and events published while
// it is away are buffered by the client up to its reconnect buffer; beyond
// that they are counted as lost (Lost) and logged. Core NATS delivers at
// most once: an event sent in the moment the connection breaks, before the
// client notices, can be lost unseen. The bucket's records, written with
// an acknowledgement (a failed write is counted), are the reliable view.
package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/mod/semver"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// Bucket is the key-value bucket of task records; a record's key is
// <node>.<task>.
const Bucket = "slotmover_tasks"

// Config names the sidecar on the bus.
type Config struct {
	Prefix string // subject prefix; "slotmover" if empty
	NodeID string // the local master's cluster node ID
	Alias  string // another name for the node in subjects (optional)
	Addr   string // the local master's address, for ping replies
	// Version is the service's in $SRV.INFO: a semantic version (a
	// leading "v" dropped), else 0.0.0-dev.
	Version string
	Logger  *slog.Logger
}

// Server answers a sidecar's requests on NATS and publishes its tasks.
type Server struct {
	cfg Config
	nc  *nats.Conn
	m   sidecar.Manager
	log *slog.Logger
	kv  jetstream.KeyValue  // nil without JetStream
	js  jetstream.JetStream // publishes the events into their stream; nil without JetStream
	svc micro.Service       // nil until Serve, and after Close
	rec *recordWriter       // puts records into kv; nil without it

	mu   sync.Mutex
	seq  map[string]uint64 // per task, the sequence number of its last event
	lost atomic.Int64
}

// RecordTTL is how long the bucket keeps a record after its last change.
const RecordTTL = 30 * 24 * time.Hour

// The events' stream keeps every sidecar's events for a week (and 1 GiB at
// most, the oldest going first), so that a consumer that was away reads
// what it missed: at least once, where core NATS is at most once.
const (
	EventsMaxAge   = 7 * 24 * time.Hour
	EventsMaxBytes = 1 << 30
)

// EventStream names the stream of a subject prefix's events:
// "slotmover_events" for the default prefix.
func EventStream(prefix string) string { return strings.ReplaceAll(prefix, ".", "_") + "_events" }

// New opens the task bucket on nc if the server has JetStream (without
// it, records are not kept). Nothing is served before Serve: a restarted
// sidecar reads its Records and repairs them first.
func New(ctx context.Context, nc *nats.Conn, cfg Config) *Server {
	if cfg.Prefix == "" {
		cfg.Prefix = "slotmover"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, nc: nc, log: cfg.Logger, seq: map[string]uint64{}}
	// An event JetStream did not take is counted as lost; the publish
	// itself does not wait for the acknowledgement (it runs in a move's
	// progress report).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, msg *nats.Msg, err error) {
		s.lost.Add(1)
		s.log.Warn("task event not stored", "subject", msg.Subject, "error", err, "lost", s.lost.Load())
	}))
	if err != nil {
		return s
	}
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s.kv, err = js.CreateOrUpdateKeyValue(jctx, jetstream.KeyValueConfig{Bucket: Bucket, Description: "slotmover task records", History: 1, TTL: RecordTTL}); err != nil {
		s.log.Warn("no JetStream key-value bucket: task records are not kept on NATS", "error", err)
		s.kv = nil
	} else {
		s.rec = newRecordWriter(func(ctx context.Context, key string, body []byte) error {
			_, err := s.kv.Put(ctx, key, body)
			return err
		}, func(key string, err error) {
			s.lost.Add(1)
			s.log.Warn("task record not kept", "record", key, "error", err, "lost", s.lost.Load())
		})
	}
	if _, err := js.CreateOrUpdateStream(jctx, jetstream.StreamConfig{
		Name: EventStream(cfg.Prefix), Description: "slotmover task events", Subjects: []string{cfg.Prefix + ".events.>"},
		MaxAge: EventsMaxAge, MaxBytes: EventsMaxBytes, Discard: jetstream.DiscardOld, Duplicates: 2 * time.Minute,
	}); err != nil {
		s.log.Warn("no JetStream stream of events: they are sent at most once", "error", err)
	} else {
		s.js = js
	}
	return s
}

// Serve adds the micro service and its endpoints, answered with m.
// Every endpoint has no queue group: <prefix>.ping must reach every
// sidecar, and one sidecar serves a node (natsapi.ClaimNode).
func (s *Server) Serve(m sidecar.Manager) error {
	s.m = m
	cfg := s.cfg
	svc, err := micro.AddService(s.nc, micro.Config{
		Name: "slotmover", Version: serviceVersion(cfg.Version), QueueGroupDisabled: true,
		Description: "moves Redis Cluster hash slots into this node's master",
		Metadata:    map[string]string{"node_id": cfg.NodeID, "alias": cfg.Alias, "addr": cfg.Addr},
	})
	if err != nil {
		return fmt.Errorf("NATS service: %w", err)
	}
	s.svc = svc
	// Endpoint names are unique: the alias's subjects get their own.
	type endpoint struct {
		name, subject string
		h             micro.HandlerFunc
	}
	eps := []endpoint{{"ping_all", cfg.Prefix + ".ping", s.onPing}}
	for i, n := range []string{cfg.NodeID, cfg.Alias} {
		if n == "" || (i == 1 && n == cfg.NodeID) {
			continue
		}
		suffix := []string{"", "_alias"}[i]
		base := cfg.Prefix + "." + n + "."
		eps = append(eps, endpoint{"import" + suffix, base + "import", s.onImport}, endpoint{"status" + suffix, base + "status", s.onStatus},
			endpoint{"cancel" + suffix, base + "cancel", s.onCancel}, endpoint{"control" + suffix, base + "control", s.onControl},
			endpoint{"ping" + suffix, base + "ping", s.onPing})
	}
	for _, e := range eps {
		if err := svc.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject)); err != nil {
			s.Close()
			return fmt.Errorf("NATS endpoint %s: %w", e.subject, err)
		}
	}
	if err := s.nc.FlushTimeout(5 * time.Second); err != nil {
		s.Close()
		return fmt.Errorf("subscribe on NATS: %w", err)
	}
	return nil
}

// serviceVersion is v as micro wants it: semantic, with no leading "v".
func serviceVersion(v string) string {
	if v = strings.TrimPrefix(v, "v"); semver.IsValid("v" + v) {
		return v
	}
	return "0.0.0-dev"
}

// Close removes the service, puts the records still waiting and waits
// (2 s at most each) for JetStream to acknowledge the events sent; the
// connection is the caller's.
func (s *Server) Close() {
	if s.svc != nil {
		if err := s.svc.Stop(); err != nil {
			s.log.Warn("NATS service not stopped cleanly", "error", err)
		}
		s.svc = nil
	}
	if s.rec != nil {
		s.rec.close()
	}
	if s.js != nil {
		select {
		case <-s.js.PublishAsyncComplete():
		case <-time.After(2 * time.Second):
			s.log.Warn("task events not acknowledged by JetStream at the close", "pending", s.js.PublishAsyncPending())
		}
	}
}

// Lost counts events and records that could not be published.
func (s *Server) Lost() int64 { return s.lost.Load() }

// Event is what <prefix>.events.<node>.<task> carries: a task's record
// each time it changes, numbered from 1; Final on the last one.
type Event struct {
	Seq   uint64       `json:"seq"`
	Final bool         `json:"final"`
	Task  sidecar.Task `json:"task"`
}

// Publish sends a task's new record as an event and keeps it in the
// bucket. Use it as the manager's OnChange: calls for one task come in
// order, from one goroutine at a time. A running task's record is put in
// the background (a move's progress reports do not wait for NATS); a
// task's last record is in the bucket before its final event is sent, so
// a consumer of the event finds it there.
func (s *Server) Publish(t sidecar.Task) {
	if t.Over() {
		s.Keep(t)
	}
	s.mu.Lock()
	s.seq[t.ID]++
	ev := Event{Seq: s.seq[t.ID], Final: t.Over(), Task: t}
	if ev.Final {
		delete(s.seq, t.ID)
	}
	s.mu.Unlock()
	body, err := json.Marshal(ev)
	subject := s.cfg.Prefix + ".events." + s.cfg.NodeID + "." + t.ID
	switch {
	case err != nil:
	case s.js != nil:
		// The message ID makes a resent event one in the stream.
		_, err = s.js.PublishAsync(subject, body, jetstream.WithMsgID(fmt.Sprintf("%s.%s.%d", s.cfg.NodeID, t.ID, ev.Seq)))
	default:
		err = s.nc.Publish(subject, body)
	}
	if err != nil {
		s.lost.Add(1)
		s.log.Warn("task event not published", "task", t.ID, "seq", ev.Seq, "error", err, "lost", s.lost.Load())
	}
	if !t.Over() {
		s.queue(t)
	}
}

// Keep writes the record to the bucket, with no event, and returns once
// it is there. Records are the restart's memory: a failed put is counted
// and logged like a lost event.
func (s *Server) Keep(t sidecar.Task) {
	if s.rec != nil {
		s.queue(t)
		s.rec.flush()
	}
}

// queue has the record put in the background.
func (s *Server) queue(t sidecar.Task) {
	if s.rec == nil {
		return
	}
	body, err := json.Marshal(t)
	if err != nil {
		s.lost.Add(1)
		s.log.Warn("task record not kept", "task", t.ID, "error", err)
		return
	}
	s.rec.keep(s.cfg.NodeID+"."+t.ID, body)
}

// Records returns this node's task records from the bucket (none without
// JetStream).
func (s *Server) Records(ctx context.Context) ([]sidecar.Task, error) {
	if s.kv == nil {
		return nil, nil
	}
	w, err := s.kv.Watch(ctx, s.cfg.NodeID+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read the task records: %w", err)
	}
	defer w.Stop()
	var out []sidecar.Task
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			var t sidecar.Task
			if err := json.Unmarshal(e.Value(), &t); err != nil {
				s.log.Warn("unreadable task record skipped", "key", e.Key(), "error", err)
				continue
			}
			out = append(out, t)
		}
	}
}

// ImportRequest is the body of <prefix>.<node>.import.
type ImportRequest struct {
	Slots string `json:"slots"` // the CLI's slot syntax: "0-5460,6000"
	// Source, if set, is the node ID the slots must come from: if another
	// master owns any of them, the request is refused with code "stale".
	Source string `json:"source,omitempty"`
	// Snapshot is auto, rdb or keys; empty keeps the sidecar's setting.
	Snapshot string `json:"snapshot,omitempty"`
	// Budget is the move's impact budget (off, default, or
	// max-event=…,max-rise=…); empty keeps the sidecar's setting.
	Budget string `json:"budget,omitempty"`
}

// TaskRequest is the body of status and cancel: one task, or all ("" or {}).
type TaskRequest struct {
	ID string `json:"id"`
}

// ControlRequest is the body of <prefix>.<node>.control: an action
// (pause, resume, hold-cutover, release-cutover, budget) on one running
// task, or on all ("" ID); a budget for the action budget.
type ControlRequest struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Budget string `json:"budget,omitempty"`
}

// Reply is every reply's body: the tasks, or an error.
type Reply struct {
	Tasks []sidecar.Task `json:"tasks,omitempty"`
	Error *Error         `json:"error,omitempty"`
}

// Error is a refused request: a code a program can test, and a message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// PingReply answers <prefix>.ping and <prefix>.<node>.ping.
type PingReply struct {
	Node  string `json:"node"`
	Alias string `json:"alias,omitempty"`
	Addr  string `json:"addr"`
	Tasks int    `json:"tasks"` // running ones
}

func (s *Server) onImport(msg micro.Request) {
	var req ImportRequest
	if err := json.Unmarshal(msg.Data(), &req); err != nil {
		s.reply(msg, nil, badRequest("the body must be JSON like {\"slots\": \"0-5460,6000\"}: %v", err))
		return
	}
	set, err := slots.Parse(req.Slots)
	if err != nil {
		s.reply(msg, nil, badRequest("slots %q: %v", req.Slots, err))
		return
	}
	switch req.Snapshot {
	case "", mover.SnapshotAuto, mover.SnapshotRDB, mover.SnapshotKeys:
	default:
		s.reply(msg, nil, badRequest("snapshot %q: want auto, rdb or keys", req.Snapshot))
		return
	}
	r := sidecar.Request{Slots: set, From: req.Source, Snapshot: req.Snapshot}
	if req.Budget != "" {
		b, err := throttle.ParseBudget(req.Budget)
		if err != nil {
			s.reply(msg, nil, badRequest("%v", err))
			return
		}
		r.Budget = &b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := s.m.Import(ctx, r)
	s.reply(msg, tasks, err)
}

func (s *Server) onControl(msg micro.Request) {
	var req ControlRequest
	if err := json.Unmarshal(msg.Data(), &req); err != nil {
		s.reply(msg, nil, badRequest("the body must be JSON like {\"id\": \"…\", \"action\": \"pause\"}: %v", err))
		return
	}
	c, err := sidecar.ParseControl(req.Action, req.Budget)
	if err != nil {
		s.reply(msg, nil, badRequest("%v", err))
		return
	}
	tasks, err := s.m.Control(req.ID, c)
	s.reply(msg, tasks, err)
}

func (s *Server) onStatus(msg micro.Request) {
	req, ok := s.taskRequest(msg)
	if !ok {
		return
	}
	tasks, err := s.m.Status(req.ID)
	s.reply(msg, tasks, err)
}

func (s *Server) onCancel(msg micro.Request) {
	req, ok := s.taskRequest(msg)
	if !ok {
		return
	}
	tasks, err := s.m.Cancel(req.ID)
	s.reply(msg, tasks, err)
}

func (s *Server) onPing(msg micro.Request) {
	tasks, _ := s.m.Status("")
	running := 0
	for _, t := range tasks {
		if !t.Over() {
			running++
		}
	}
	if msg.Reply() == "" {
		return // published, not asked
	}
	body, _ := json.Marshal(PingReply{Node: s.cfg.NodeID, Alias: s.cfg.Alias, Addr: s.cfg.Addr, Tasks: running})
	if err := msg.Respond(body); err != nil {
		s.log.Warn("ping reply not sent", "error", err)
	}
}

// taskRequest reads a status or cancel body; an empty body means all.
func (s *Server) taskRequest(msg micro.Request) (TaskRequest, bool) {
	var req TaskRequest
	if len(msg.Data()) == 0 {
		return req, true
	}
	if err := json.Unmarshal(msg.Data(), &req); err != nil {
		s.reply(msg, nil, badRequest("the body must be empty or JSON like {\"id\": \"…\"}: %v", err))
		return req, false
	}
	return req, true
}

type requestError struct{ code, msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{"bad_request", fmt.Sprintf(format, args...)}
}

// codes name the manager's refusals in replies.
var codes = []struct {
	err  error
	code string
}{
	{sidecar.ErrUnknownTask, "unknown_task"},
	{sidecar.ErrOverlap, "overlap"},
	{sidecar.ErrOwnedHere, "owned_here"},
	{sidecar.ErrUnowned, "unowned"},
	{sidecar.ErrTooManyTasks, "too_many_tasks"},
	{sidecar.ErrShuttingDown, "shutting_down"},
	{sidecar.ErrTooLate, "too_late"},
	{sidecar.ErrStale, "stale"},
}

// reply answers with the tasks, or with the error: its code in the body
// and, as NATS micro clients expect, in the Nats-Service-Error-Code and
// Nats-Service-Error headers (which also count it in $SRV.STATS).
func (s *Server) reply(msg micro.Request, tasks []sidecar.Task, err error) {
	r := Reply{Tasks: tasks}
	if err != nil {
		r = Reply{Error: &Error{Code: "internal", Message: err.Error()}}
		var re *requestError
		if errors.As(err, &re) {
			r.Error.Code = re.code
		}
		for _, c := range codes {
			if errors.Is(err, c.err) {
				r.Error.Code = c.code
			}
		}
	}
	body, _ := json.Marshal(r)
	var rerr error
	if r.Error != nil {
		rerr = msg.Error(r.Error.Code, r.Error.Message, body)
	} else {
		rerr = msg.Respond(body)
	}
	if rerr != nil {
		s.log.Warn("reply not sent", "subject", msg.Subject(), "error", rerr)
	}
}
