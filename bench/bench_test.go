package bench

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
)

// The plan must be the slots redis-cli 7.0 takes: the largest source
// (5461-10922, one slot more) rounds up, the others down, lowest slots first.
func TestReshardPlan(t *testing.T) {
	p, err := planFor(WorkloadScaleout)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0-1364", "5461-6826", "10923-12287"}
	for i, sh := range p.Shares {
		if sh.Source != i || sh.Slots.String() != want[i] {
			t.Errorf("share %d: node %d slots %s, want node %d slots %s", i, sh.Source, sh.Slots, i, want[i])
		}
	}
	if n := p.union().Len(); n != 4096 || p.NumSlots != 4096 {
		t.Errorf("moves %d slots, asks reshard for %d; want 4096", n, p.NumSlots)
	}
	if p, _ := planFor(WorkloadSingle); len(p.Shares) != 1 || p.Shares[0].Slots.String() != "0-5460" {
		t.Errorf("single: %+v", p.Shares)
	}
}

// A small benchmark end to end: both methods move the shard with a load
// running, and the report's numbers agree with the data.
func TestRunSmall(t *testing.T) {
	for _, bin := range []string{localcluster.ServerBin, "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const keys = 5000
	rep, err := Run(ctx, Config{
		Keys: keys, ValueSize: 64, Workloads: []string{WorkloadSingle},
		Methods: []string{MethodReshard1000, MethodSlotmover}, LoadRate: 200,
		Dir: t.TempDir(), MoveTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The keys that must move, from their names alone.
	moved := slots.NewSet(slots.Range{Start: 0, End: 5460})
	var want int64
	for i := 0; i < keys; i++ {
		if moved.Contains(slots.ForString(KeyName(i))) {
			want++
		}
	}
	for i := 0; i < Counters; i++ {
		if moved.Contains(slots.ForString(CounterName(i))) {
			want++
		}
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if len(row.Runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", row.Method, len(row.Runs))
		}
		r := row.Runs[0]
		if r.Error != "" || len(r.Warnings) > 0 {
			t.Errorf("%s: error %q, warnings %q", row.Method, r.Error, r.Warnings)
		}
		if r.KeysMoved != want || r.TargetKeys != want || r.SourceLeft != 0 {
			t.Errorf("%s: %d keys to move, %d on the target, %d left on the source; want %d, %d, 0",
				row.Method, r.KeysMoved, r.TargetKeys, r.SourceLeft, want, want)
		}
		if row.WallMS <= 0 || row.KeysPerSec <= 0 || row.Ratio == nil || *row.Ratio <= 0 {
			t.Errorf("%s: wall %.1f ms, %.0f keys/s, ratio %v", row.Method, row.WallMS, row.KeysPerSec, row.Ratio)
		}
		if row.LoadOps <= 0 || row.LostWrites != 0 {
			t.Errorf("%s: %d load ops, %d lost", row.Method, row.LoadOps, row.LostWrites)
		}
	}
	sm := rep.row(WorkloadSingle, MethodSlotmover)
	if sm.PauseMS == nil || *sm.PauseMS <= 0 || *sm.PauseMS > 2000 || sm.Ratio == nil || *sm.Ratio != 1 {
		t.Errorf("slotmover: pause %v ms, ratio %v", deref(sm.PauseMS), deref(sm.Ratio))
	}
	if tasks := sm.Runs[0].Tasks; len(tasks) != 1 || tasks[0].Summary.KeysCopied != want || tasks[0].Summary.SnapshotMS <= 0 {
		t.Errorf("slotmover tasks: %+v", tasks)
	}
	if rs := rep.row(WorkloadSingle, MethodReshard1000); rs.PauseMS != nil {
		t.Errorf("reshard has a write pause: %v", *rs.PauseMS)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, s := range []string{"reshard1000", "slotmover", "1.0×", "slotmover tasks:"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q", s)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
