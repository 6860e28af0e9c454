package sidecar

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// fill writes n string keys spread over every slot, and returns their names.
func fill(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k:%d", i)
	}
	for start := 0; start < n; start += 1000 {
		if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys[start:min(start+1000, n)] {
				p.Set(ctx, k, "value of "+k, 0)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// waitEnded polls Status until every task has ended.
func waitEnded(t *testing.T, m *Local, ids []string) []Task {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var out []Task
		for _, id := range ids {
			got, err := m.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got...)
		}
		if !slices.ContainsFunc(out, func(t Task) bool { return t.State == StateRunning }) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks still running after 2 minutes: %+v", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An import whose slots span two sources runs two tasks; both complete,
// every node sees the local master own the slots, every key is intact, and
// the records follow the phases to the end.
func TestImportFromTwoSources(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	keys := fill(t, cc, 20_000)
	want, err := localcluster.Capture(ctx, cc, keys)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	phases := map[string][]string{}
	m := New(Config{Node: cluster.Conn{Addr: c.Nodes[3].Addr}, MaxTasks: 2, OnChange: func(t Task) {
		mu.Lock()
		defer mu.Unlock()
		if p := phases[t.ID]; len(p) == 0 || p[len(p)-1] != t.Phase {
			phases[t.ID] = append(p, t.Phase)
		}
	}})
	defer m.Close(ctx)

	set, _ := slots.Parse("5000-6000")
	tasks, err := m.Import(ctx, Request{Slots: set})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || tasks[0].Slots+","+tasks[1].Slots != "5000-5460,5461-6000" && tasks[1].Slots+","+tasks[0].Slots != "5000-5460,5461-6000" {
		t.Fatalf("tasks: %+v", tasks)
	}
	ended := waitEnded(t, m, []string{tasks[0].ID, tasks[1].ID})
	for _, task := range ended {
		if task.State != StateCompleted || task.Result != mover.ResultMoved || task.EndTime.IsZero() || task.KeysCopied == 0 || task.Dest != c.IDs[3] {
			t.Fatalf("task %+v", task)
		}
		// The record says which path ran, why, what was predicted and what it took.
		if p := task.Prediction; task.Snapshot == mover.SnapshotAuto || task.SnapshotReason == "" || p == nil || p.KeysMS <= 0 || p.RDBMS <= 0 || p.MovingKeys == 0 || task.TotalMS <= 0 {
			t.Fatalf("task %s: path %q (%s), prediction %+v, total %d ms", task.ID, task.Snapshot, task.SnapshotReason, p, task.TotalMS)
		}
		mu.Lock()
		got := phases[task.ID]
		mu.Unlock()
		if !slices.Contains(got, "snapshot") || !slices.Contains(got, "cutover") || got[len(got)-1] != "done" {
			t.Fatalf("task %s went through phases %v", task.ID, got)
		}
		// The claim is in the record's history, but no OnChange told of
		// it: the journal and NATS wait while the slots have no owner.
		var history []string
		for _, pc := range task.Phases {
			history = append(history, pc.Phase)
		}
		if i := slices.Index(history, "claim"); i < 1 || i+1 >= len(history) || history[i-1] != "cutover" || history[i+1] != "cleanup" || slices.Contains(got, "claim") {
			t.Fatalf("task %s: history %v, told of %v; want a claim between cutover and cleanup, never told", task.ID, history, got)
		}
	}
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatal(err)
	}

	// The local master owns them now: importing them again is refused.
	again, _ := slots.Parse("5500")
	if _, err := m.Import(ctx, Request{Slots: again}); !errors.Is(err, ErrOwnedHere) {
		t.Fatalf("import of an owned slot: %v", err)
	}
	if all, err := m.Status(""); err != nil || len(all) != 2 {
		t.Fatalf("status of all: %d tasks, %v", len(all), err)
	}
	if _, err := m.Status("nope"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("status of an unknown task: %v", err)
	}
}

// Requests that cannot be served change nothing: a range overlapping a
// running task, slots not of the source named, more tasks than the
// limit, a slot nobody owns. A cancel
// during the copy leaves the cluster exactly as it was.
func TestImportRefusalsAndCancel(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	fill(t, cc, 60_000)
	before, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Node: cluster.Conn{Addr: c.Nodes[3].Addr}, MaxTasks: 1})
	defer m.Close(ctx)

	shard, _ := slots.Parse("0-5460")
	tasks, err := m.Import(ctx, Request{Slots: shard})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("import: %v %+v", err, tasks)
	}
	overlap, _ := slots.Parse("100-200")
	if _, err := m.Import(ctx, Request{Slots: overlap}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlapping import: %v", err)
	}
	other, _ := slots.Parse("10923-10930")
	if _, err := m.Import(ctx, Request{Slots: other, From: c.IDs[0]}); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), c.IDs[2]) {
		t.Fatalf("import of master 2's slots from master 0: %v", err)
	}
	if _, err := m.Import(ctx, Request{Slots: other}); !errors.Is(err, ErrTooManyTasks) {
		t.Fatalf("import over the limit: %v", err)
	}
	if got, err := m.Cancel(tasks[0].ID); err != nil || len(got) != 1 {
		t.Fatalf("cancel: %v", err)
	}
	ended := waitEnded(t, m, []string{tasks[0].ID})
	if ended[0].State != StateCanceled || ended[0].Result != mover.ResultCancelled {
		t.Fatalf("cancelled task: %+v", ended[0])
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	after, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the cancelled import changed the cluster:\nbefore %s\nafter  %s", before, after)
	}
	if all, _ := m.Status(""); len(all) != 1 {
		t.Fatalf("refused requests left tasks: %+v", all)
	}

	// A slot that no master claims (given up everywhere by hand).
	for _, n := range c.Nodes {
		cl := n.Client()
		err := cl.Do(ctx, "CLUSTER", "DELSLOTS", 16383).Err()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	last, _ := slots.Parse("16383")
	if _, err := m.Import(ctx, Request{Slots: last}); !errors.Is(err, ErrUnowned) {
		t.Fatalf("import of an unowned slot: %v", err)
	}
	m.Close(ctx)
	if _, err := m.Import(ctx, Request{Slots: other}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("import after Close: %v", err)
	}
}

// A task that a dead sidecar left running (its record says so; the target
// imports the slots and holds copies of some keys) is repaired on restart
// with fix's logic: here rolled back, as the source never released them.
func TestRecoverRepairsInterruptedTasks(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	fill(t, cc, 5000)
	before, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	source, target := c.Nodes[0].Client(), c.Nodes[2].Client()
	defer source.Close()
	defer target.Close()
	set, _ := slots.Parse("0-99")
	importCopies(t, source, target, c.IDs[0], set, 10)
	m := New(Config{Node: cluster.Conn{Addr: c.Nodes[2].Addr}, MaxTasks: 1})
	defer m.Close(ctx)
	done := Task{ID: "old", Slots: "8192-8200", State: StateCompleted, Phase: "done"}
	interrupted := Task{ID: "dead", Slots: "0-99", Source: c.IDs[0], Dest: c.IDs[2], State: StateRunning, Phase: "snapshot"}
	got := m.Recover(ctx, []Task{done, interrupted})
	if len(got) != 2 || got[0].ID != "old" || got[0].State != StateCompleted || got[1].State != StateFailed || got[1].Result != mover.ResultRolledBack || got[1].EndTime.IsZero() {
		t.Fatalf("recovered: %+v", got)
	}
	if err := c.WaitHealthy(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	after, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the repair did not restore the cluster:\nbefore %s\nafter  %s", before, after)
	}
	if all, _ := m.Status(""); len(all) != 2 || all[1].ID != "dead" || all[1].State != StateFailed {
		t.Fatalf("status after recovery: %+v", all)
	}
}

// importCopies marks set importing on target from source (sourceID) and
// copies up to perSlot keys of each slot there, as a move's snapshot does.
func importCopies(t *testing.T, source, target *redis.Client, sourceID string, set *slots.Set, perSlot int) {
	t.Helper()
	ctx := context.Background()
	copied := 0
	for _, s := range set.Slots() {
		if err := target.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", sourceID).Err(); err != nil {
			t.Fatal(err)
		}
		keys, err := source.ClusterGetKeysInSlot(ctx, int(s), perSlot).Result()
		if err != nil {
			t.Fatal(err)
		}
		harness.CopyKeys(t, ctx, source, target, keys)
		copied += len(keys)
	}
	if copied == 0 {
		t.Fatal("nothing copied: the test tests nothing")
	}
}

// A sidecar died after its move's claim, before the cleanup, and the local
// master's clients then emptied one moved slot. On restart the source's
// keys of every moved slot go, the emptied one too: the record's run ID of
// the local master, unchanged, shows it held them all since it took them
// over. A record whose run ID is not the master's (it restarted: a stale
// RDB may have lost them) leaves that slot's copies alone and says so: the
// task ends stuck with fix's note, never completed.
func TestRecoverCleansASlotTheTargetEmptied(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(fmt.Sprint("restarted=", restarted), func(t *testing.T) {
			ctx := context.Background()
			c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
			cc := c.Client()
			defer cc.Close()
			fill(t, cc, 20000)
			source, target := c.Nodes[0].Client(), c.Nodes[2].Client()
			defer source.Close()
			defer target.Close()
			set, _ := slots.Parse("0-99")
			importCopies(t, source, target, c.IDs[0], set, 1000)
			if err := source.Do(ctx, cluster.SlotsCommand("DELSLOTS", set.Slots())...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := cutover.SetSlots(ctx, source, set.Slots(), "NODE", c.IDs[2]); err != nil {
				t.Fatal(err)
			}
			if err := cutover.Claim(ctx, target, c.IDs[2], set, false); err != nil {
				t.Fatal(err)
			}
			emptied, _ := slots.Parse("5")
			keys, err := target.ClusterGetKeysInSlot(ctx, 5, 1000).Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("slot 5 on the target: %d keys, %v", len(keys), err)
			}
			if err := target.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			server, err := info.Read(ctx, target, "server")
			if err != nil {
				t.Fatal(err)
			}
			runID := server["run_id"]
			if restarted {
				runID = strings.Repeat("0", 40)
			}
			m := New(Config{Node: cluster.Conn{Addr: c.Nodes[2].Addr}, MaxTasks: 1})
			defer m.Close(ctx)
			rec := Task{ID: "dead", Slots: "0-99", Source: c.IDs[0], Dest: c.IDs[2], DestRunID: runID, State: StateRunning, Phase: "cleanup"}
			got := m.Recover(ctx, []Task{rec})[0]
			left := func(set *slots.Set) int64 {
				t.Helper()
				n, err := cluster.CountKeys(ctx, source, set.Slots())
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				for _, k := range n {
					sum += k
				}
				return sum
			}
			rest, _ := slots.Parse("0-4,6-99")
			if n := left(rest); n != 0 {
				t.Fatalf("the source keeps %d keys of the slots the target holds keys of", n)
			}
			if !restarted {
				if n := left(emptied); n != 0 {
					t.Fatalf("the source keeps %d keys of the slot the target emptied", n)
				}
				if got.State != StateCompleted || got.Result != mover.ResultMoved {
					t.Fatalf("recovered: %s %s: %s", got.State, got.Result, got.LastError)
				}
				return
			}
			if n := left(emptied); n != int64(len(keys)) {
				t.Fatalf("the source keeps %d keys of the emptied slot, want its %d copies", n, len(keys))
			}
			if got.State != StateFailed || got.Result != mover.ResultStuck || !strings.Contains(got.LastError, "slot 5") {
				t.Fatalf("recovered: %s %s: %s", got.State, got.Result, got.LastError)
			}
		})
	}
}
