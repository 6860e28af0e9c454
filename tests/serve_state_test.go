package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
)

// A sidecar died between its move's release and its claim: the source has
// given slots 0-99 up, the target imports them and holds every key, and
// no master serves them. It restarts while NATS is down. From its state
// directory alone it repairs the move (fix gives the slots back to the
// source, which holds every write): one owner serves the slots again,
// every key is there once, and the record says what happened, in
// STATUS and in the state file. When NATS comes up the sidecar takes it
// up and answers there.
func TestServeRepairsWithoutNATS(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := fourMasters(t)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-99")
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", tagIn(set, i%200), i)
	}
	if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, "value of "+k, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want, err := localcluster.Capture(ctx, cc, keys)
	if err != nil {
		t.Fatal(err)
	}

	// The move, by hand, up to its release.
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
	if err := cutover.SetSlots(ctx, target, set.Slots(), "IMPORTING", c.IDs[0]); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		dump := source.Dump(ctx, k).Val()
		if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Restore(ctx, k, 0, dump)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := source.Do(ctx, cluster.SlotsCommand("DELSLOTS", set.Slots())...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cutover.SetSlots(ctx, source, set.Slots(), "NODE", c.IDs[3]); err != nil {
		t.Fatal(err)
	}
	server0, err := info.Read(ctx, target, "server")
	if err != nil {
		t.Fatal(err)
	}
	// The state file of the sidecar that died, as it left it.
	stateDir := filepath.Join(stateHome(t), "slotmover")
	records := filepath.Join(stateDir, c.IDs[3]+".tasks.json")
	dead := []sidecar.Task{{
		ID: "0d1e2a3d4b5c", Slots: "0-99", Source: c.IDs[0], SourceAddr: c.Nodes[0].Addr, Dest: c.IDs[3], DestAddr: c.Nodes[3].Addr,
		DestRunID: server0["run_id"], Operation: "import", State: sidecar.StateRunning, Phase: "cutover", CreateTime: time.Now(),
	}}
	data, _ := json.Marshal(dead)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(records, data, 0o600); err != nil {
		t.Fatal(err)
	}

	natsAddr := freeAddr(t) // nothing listens there yet
	d := startDaemon(t, c.Nodes[3].Addr, "nats://"+natsAddr, "", "")
	status := d.waitState(t, dead[0].ID, time.Minute, "completed", "failed")
	if field(status, "state") != "failed" || field(status, "result") != "rolled_back" || field(status, "phase") != "repaired" ||
		!strings.Contains(field(status, "last_error"), "interrupted") {
		t.Fatalf("the repaired task:\n%s", status)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys { // once: on the source, nowhere else
		n := 0
		for _, node := range c.Nodes {
			cl := node.Client()
			n += int(cl.Exists(ctx, k).Val())
			cl.Close()
		}
		if n != 1 {
			t.Fatalf("key %s is on %d masters", k, n)
		}
	}
	var saved []sidecar.Task
	if data, err := os.ReadFile(records); err != nil || json.Unmarshal(data, &saved) != nil ||
		len(saved) != 1 || saved[0].State != sidecar.StateFailed || saved[0].Result != "rolled_back" || saved[0].Phase != "repaired" {
		t.Fatalf("the state file after the repair (%v): %s", err, data)
	}

	// NATS comes up where the sidecar looks for it: it is taken up, and
	// the bucket learns how the task ended.
	_, port, _ := net.SplitHostPort(natsAddr)
	var portN int
	fmt.Sscan(port, &portN)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: portN, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := &natsapi.Client{NC: nc}
	deadline := time.Now().Add(30 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		tasks, err := client.Status(qctx, c.IDs[3], dead[0].ID)
		cancel()
		if err == nil {
			if len(tasks) != 1 || tasks[0].Result != "rolled_back" {
				t.Fatalf("status over NATS: %+v", tasks)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never answered on NATS once it came up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, natsapi.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	var kept sidecar.Task
	if e, err := kv.Get(ctx, c.IDs[3]+"."+dead[0].ID); err != nil || json.Unmarshal(e.Value(), &kept) != nil || kept.Result != "rolled_back" {
		t.Fatalf("the bucket's record: %+v %v", kept, err)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("daemon after SIGTERM: %v", err)
	}
	if log := d.log.String(); !strings.Contains(log, "NATS unreachable") || !strings.Contains(log, "NATS taken up") {
		t.Fatalf("the log does not say that NATS was down, then taken up:\n%s", log)
	}
}
