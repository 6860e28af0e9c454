package natsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// startNATS runs an embedded NATS server with JetStream and returns a
// connection to it.
func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(harness.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// sidecarOn starts a manager for node 3 of c and puts it on nc.
func sidecarOn(t *testing.T, c *localcluster.Cluster, nc *nats.Conn, maxTasks int) (*sidecar.Local, *Server) {
	t.Helper()
	var srv atomic.Pointer[Server]
	m := sidecar.New(sidecar.Config{Node: cluster.Conn{Addr: c.Nodes[3].Addr}, MaxTasks: maxTasks, OnChange: func(t sidecar.Task) {
		if s := srv.Load(); s != nil {
			s.Publish(t)
		}
	}})
	t.Cleanup(func() { m.Close(context.Background()) })
	s := New(context.Background(), nc, Config{NodeID: c.IDs[3], Alias: "target", Addr: c.Nodes[3].Addr})
	if err := s.Serve(m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv.Store(s)
	return m, s
}

func request(t *testing.T, nc *nats.Conn, subject string, body string) Reply {
	t.Helper()
	r, _ := requestMsg(t, nc, subject, body)
	return r
}

// requestMsg is request that also returns the reply message (headers).
func requestMsg(t *testing.T, nc *nats.Conn, subject string, body string) (Reply, *nats.Msg) {
	t.Helper()
	msg, err := nc.Request(subject, []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatalf("reply to %s: %q: %v", subject, msg.Data, err)
	}
	return r, msg
}

// A move started by a NATS request completes while a writer keeps writing
// the moving slots: the requester sees the task's events in order, ending
// with a final one; the bucket's record ends completed with the counts
// the move reported; every key is equal on the target and no acknowledged
// write is lost.
func TestImportOverNATS(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	set, _ := slots.Parse("0-1000")
	var keys []string
	for i := range 5000 {
		keys = append(keys, fmt.Sprintf("k:%d", i))
		if err := cc.Set(ctx, keys[i], "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	nc := startNATS(t)
	_, srv := sidecarOn(t, c, nc, 2)

	events := make(chan *nats.Msg, 10_000)
	sub, err := nc.ChanSubscribe("slotmover.events."+c.IDs[3]+".*", events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	// The writer: one counter per key of the moving slots, its last
	// acknowledged value remembered; bounded in count and time.
	var counters []string
	for i := 0; len(counters) < 300; i++ {
		if k := fmt.Sprint("n:", i); set.Contains(slots.ForString(k)) {
			counters = append(counters, k)
		}
	}
	acked := make([]int64, len(counters))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(time.Minute)
		for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			j := i % len(counters)
			if v, err := cc.Incr(ctx, counters[j]).Result(); err == nil {
				acked[j] = v
			}
		}
	}()

	r := request(t, nc, "slotmover.target.import", `{"slots": "0-1000"}`)
	if r.Error != nil || len(r.Tasks) != 1 || r.Tasks[0].Source != c.IDs[0] || r.Tasks[0].Slots != "0-1000" {
		t.Fatalf("import reply: %+v %+v", r.Error, r.Tasks)
	}
	id := r.Tasks[0].ID

	var last Event
	timeout := time.After(2 * time.Minute)
	for !last.Final {
		select {
		case msg := <-events:
			var ev Event
			if err := json.Unmarshal(msg.Data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Task.ID != id || ev.Seq != last.Seq+1 {
				t.Fatalf("event %d of task %s after event %d: out of order", ev.Seq, ev.Task.ID, last.Seq)
			}
			last = ev
		case <-timeout:
			t.Fatalf("no final event after 2 minutes; last %+v", last)
		}
	}
	close(stop)
	wg.Wait()
	if last.Task.State != sidecar.StateCompleted || last.Seq < 5 {
		t.Fatalf("final event %d: %+v", last.Seq, last.Task)
	}
	recs, err := srv.Records(ctx)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %v %+v", err, recs)
	}
	if rec := recs[0]; rec.State != sidecar.StateCompleted || rec.KeysCopied != last.Task.KeysCopied || rec.KeysCopied == 0 || len(rec.Phases) < 5 {
		t.Fatalf("record %+v, final event %+v", rec, last.Task)
	}
	if r := request(t, nc, "slotmover."+c.IDs[3]+".status", `{"id": "`+id+`"}`); r.Error != nil || len(r.Tasks) != 1 || r.Tasks[0].State != sidecar.StateCompleted {
		t.Fatalf("status: %+v %+v", r.Error, r.Tasks)
	}

	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	target := c.Nodes[3].Client()
	defer target.Close()
	lost := 0
	for j, k := range counters {
		got, err := target.Get(ctx, k).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if got < acked[j] {
			lost++
		}
	}
	var written int64
	for _, v := range acked {
		written += v
	}
	if lost > 0 || written == 0 {
		t.Fatalf("%d of %d counters lost acknowledged writes (%d acknowledged in all)", lost, len(counters), written)
	}
	for _, k := range keys {
		if set.Contains(slots.ForString(k)) {
			if v, err := target.Get(ctx, k).Result(); err != nil || v != "v" {
				t.Fatalf("%s on the target: %q %v", k, v, err)
			}
		}
	}
}

// Bad requests get an error with a code, in the body and in the NATS
// micro error headers, and change nothing.
func TestBadRequestsOverNATS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16000", "16001-16383"}, localcluster.Options{})
	nc := startNATS(t)
	m, _ := sidecarOn(t, c, nc, 1)
	node := "slotmover." + c.IDs[3]
	for _, tc := range []struct{ subject, body, code string }{
		{node + ".import", `not json`, "bad_request"},
		{node + ".import", `{"slots": "0-99999"}`, "bad_request"},
		{node + ".import", `{"slots": ""}`, "bad_request"},
		{node + ".import", `{"slots": "16383"}`, "owned_here"},
		{node + ".status", `{"id": "nope"}`, "unknown_task"},
		{node + ".cancel", `{"id": "nope"}`, "unknown_task"},
		{node + ".status", `{`, "bad_request"},
	} {
		r, msg := requestMsg(t, nc, tc.subject, tc.body)
		if r.Error == nil || r.Error.Code != tc.code || r.Error.Message == "" || len(r.Tasks) != 0 {
			t.Errorf("%s %s: %+v (want code %s)", tc.subject, tc.body, r.Error, tc.code)
		}
		if got := msg.Header.Get(micro.ErrorCodeHeader); got != tc.code || msg.Header.Get(micro.ErrorHeader) == "" {
			t.Errorf("%s %s: headers %v, want %s %q", tc.subject, tc.body, msg.Header, micro.ErrorCodeHeader, tc.code)
		}
	}
	// A request to a node nobody serves gets no answer at all.
	if _, err := nc.Request("slotmover.nosuchnode.import", []byte(`{"slots": "0"}`), 300*time.Millisecond); err == nil {
		t.Error("a request to an unknown node was answered")
	}
	if all, _ := m.Status(""); len(all) != 0 {
		t.Fatalf("bad requests started tasks: %+v", all)
	}
	// Discovery.
	msg, err := nc.Request("slotmover.ping", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var p PingReply
	if err := json.Unmarshal(msg.Data, &p); err != nil || p.Node != c.IDs[3] || p.Alias != "target" {
		t.Fatalf("ping: %s %v", msg.Data, err)
	}
}

// Overlapping and excess imports are refused while a task runs.
func TestImportLimitsOverNATS(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	for i := range 50_000 {
		if i%1000 == 0 {
			if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := i; j < i+1000; j++ {
					p.Set(ctx, fmt.Sprint("k:", j), "some value", 0)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	nc := startNATS(t)
	m, _ := sidecarOn(t, c, nc, 1)
	node := "slotmover." + c.IDs[3]
	r := request(t, nc, node+".import", `{"slots": "0-5460"}`)
	if r.Error != nil || len(r.Tasks) != 1 {
		t.Fatalf("import: %+v", r.Error)
	}
	for body, code := range map[string]string{`{"slots": "100-200"}`: "overlap", `{"slots": "6000"}`: "too_many_tasks"} {
		if r := request(t, nc, node+".import", body); r.Error == nil || r.Error.Code != code {
			t.Errorf("%s: %+v, want %s", body, r.Error, code)
		}
	}
	if r := request(t, nc, node+".cancel", ``); r.Error != nil || len(r.Tasks) != 1 {
		t.Fatalf("cancel all: %+v", r.Error)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		all, _ := m.Status("")
		if len(all) == 1 && all[0].Over() {
			if all[0].State != sidecar.StateCanceled {
				t.Fatalf("cancelled task ended %s: %s", all[0].State, all[0].LastError)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not over a minute after its cancel: %+v", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
	set, _ := slots.Parse("0-5460")
	if err := c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// NATS lost and back: events published meanwhile are buffered by the
// client and arrive after it reconnects by itself; a record the bucket
// could not take is counted as lost (and logged), not dropped in silence;
// requests are served again once it is back.
func TestNATSLostAndBack(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", "", ""}, localcluster.Options{})
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	port := ns.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, srv := sidecarOn(t, c, nc, 1)
	events := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe("slotmover.events."+c.IDs[3]+".*", events); err != nil {
		t.Fatal(err)
	}
	nc.Flush()

	ns.Shutdown()
	ns.WaitForShutdown()
	// Buffered once the client knows the server is gone; an event sent in
	// the moment before (core NATS is at most once) can be lost unseen.
	for deadline := time.Now().Add(10 * time.Second); nc.Status() != nats.RECONNECTING; {
		if time.Now().After(deadline) {
			t.Fatalf("the client did not notice the server's end: %v", nc.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A running task's record is put in the background: it is counted
	// lost once its put runs out of time.
	srv.Publish(sidecar.Task{ID: "t1", State: sidecar.StateRunning, Phase: "snapshot"})
	for deadline := time.Now().Add(10 * time.Second); srv.Lost() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lost while NATS is down: %d, want 1 (the record the bucket could not take)", srv.Lost())
		}
	}

	again := *opts
	again.Port = port
	ns2, err := server.NewServer(&again)
	if err != nil {
		t.Fatal(err)
	}
	ns2.Start()
	defer func() { ns2.Shutdown(); ns2.WaitForShutdown() }()
	select {
	case msg := <-events:
		var ev Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Task.ID != "t1" || ev.Seq != 1 {
			t.Fatalf("event after the reconnect: %s %v", msg.Data, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the event published while NATS was down never arrived")
	}
	if r := request(t, nc, "slotmover.target.status", ``); r.Error != nil {
		t.Fatalf("status after the reconnect: %+v", r.Error)
	}
	nc.Close()
	srv.Publish(sidecar.Task{ID: "t1", State: sidecar.StateFailed})
	if srv.Lost() < 2 {
		t.Fatalf("an event on a closed connection was not counted as lost: %d", srv.Lost())
	}
}

// Every sidecar is a NATS micro service named slotmover: $SRV.PING finds
// each, $SRV.INFO lists its endpoints' subjects and its node in the
// metadata, and $SRV.STATS counts its requests and errors.
func TestSidecarsFoundAsMicroServices(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", "", ""}, localcluster.Options{})
	nc := startNATS(t)
	for _, i := range []int{2, 3} {
		m := sidecar.New(sidecar.Config{Node: cluster.Conn{Addr: c.Nodes[i].Addr}, MaxTasks: 1})
		t.Cleanup(func() { m.Close(context.Background()) })
		s := New(context.Background(), nc, Config{NodeID: c.IDs[i], Alias: fmt.Sprint("node", i), Addr: c.Nodes[i].Addr, Version: "v1.2.3"})
		if err := s.Serve(m); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
	}
	// One request, every sidecar's answer: both (within 10 s, however
	// loaded the machine), then any extra for a moment.
	all := func(subject string) []*nats.Msg {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			t.Fatal(err)
		}
		var out []*nats.Msg
		for {
			wait := 10 * time.Second
			if len(out) >= 2 {
				wait = 200 * time.Millisecond
			}
			msg, err := sub.NextMsg(wait)
			if err != nil {
				return out
			}
			out = append(out, msg)
		}
	}
	request(t, nc, "slotmover.node3.status", `{"id": "nope"}`) // an error, for STATS

	nodes := map[string]bool{}
	for _, msg := range all("$SRV.PING.slotmover") {
		var p micro.Ping
		if err := json.Unmarshal(msg.Data, &p); err != nil || p.Name != "slotmover" || p.Version != "1.2.3" {
			t.Fatalf("$SRV.PING reply: %s (%v)", msg.Data, err)
		}
		nodes[p.Metadata["node_id"]] = true
	}
	if len(nodes) != 2 || !nodes[c.IDs[2]] || !nodes[c.IDs[3]] {
		t.Fatalf("$SRV.PING found nodes %v, want %s and %s", nodes, c.IDs[2], c.IDs[3])
	}
	for _, msg := range all("$SRV.INFO.slotmover") {
		var info micro.Info
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			t.Fatal(err)
		}
		subjects := map[string]bool{}
		for _, e := range info.Endpoints {
			subjects[e.Subject] = true
		}
		id, alias := info.Metadata["node_id"], info.Metadata["alias"]
		for _, want := range []string{"slotmover.ping", "slotmover." + id + ".import", "slotmover." + alias + ".cancel", "slotmover." + id + ".status"} {
			if !subjects[want] {
				t.Errorf("$SRV.INFO of %s lacks endpoint %s: %v", id, want, subjects)
			}
		}
	}
	// The fleet ping, as slotmover ls asks it.
	found, err := (&Client{NC: nc}).Sidecars(context.Background(), 3*time.Second)
	if err != nil || len(found) != 2 {
		t.Fatalf("Sidecars: %+v, %v; want nodes 2 and 3", found, err)
	}
	for _, p := range found {
		if !nodes[p.Node] || p.Alias == "" || p.Addr == "" {
			t.Errorf("Sidecars: %+v", p)
		}
	}
	errs := 0
	for _, msg := range all("$SRV.STATS.slotmover") {
		var st micro.Stats
		if err := json.Unmarshal(msg.Data, &st); err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Endpoints {
			errs += e.NumErrors
		}
	}
	if errs != 1 {
		t.Fatalf("$SRV.STATS counts %d errors, want the 1 status of an unknown task", errs)
	}
}
