package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// The plan must be the slots redis-cli 7.0 takes: the largest source
// (5461-10922, one slot more) rounds up, the others down, lowest slots first.
func TestReshardPlan(t *testing.T) {
	p, err := planFor(WorkloadScaleout, DefaultSmallSlots)
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
	if p, _ := planFor(WorkloadSingle, DefaultSmallSlots); len(p.Shares) != 1 || p.Shares[0].Slots.String() != "0-5460" {
		t.Errorf("single: %+v", p.Shares)
	}
	// small: --cluster-slots N from node 0 takes its lowest N slots.
	for _, spec := range []string{"0-54", "0-272", "0-545", "0-1091", "0-1801", "0", "0-5460"} {
		p, err := planFor(WorkloadSmall, spec)
		if err != nil {
			t.Errorf("small %s: %v", spec, err)
			continue
		}
		set, _ := slots.Parse(spec)
		if len(p.Shares) != 1 || p.Shares[0].Source != 0 || p.Shares[0].Slots.String() != set.String() || p.NumSlots != set.Len() {
			t.Errorf("small %s: reshard --cluster-slots %d moves %+v", spec, p.NumSlots, p.Shares)
		}
	}
	for _, bad := range []string{"1-54", "0-5461", "0-10,20-30", "x"} {
		if _, err := planFor(WorkloadSmall, bad); err == nil {
			t.Errorf("small %s: no error", bad)
		}
	}
}

// The small workload: auto takes the keys path (no fork), the RDB path
// forks, reshard does not; every run is verified, and the table shows
// the snapshot path, the forks and the sources' PING latencies.
func TestRunSmallWorkload(t *testing.T) {
	for _, bin := range []string{localcluster.ServerBin, "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	methods := []string{MethodReshard10, MethodSlotmover, MethodSlotmoverRDB}
	rep, err := Run(ctx, Config{
		Keys: 20_000, ValueSize: 64, Workloads: []string{WorkloadSmall}, Methods: methods,
		Dir: t.TempDir(), MoveTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("three runs in %s", time.Since(start).Round(time.Millisecond))
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if !rep.OK() {
		t.Errorf("some run failed or did not pass its checks")
	}
	// The keys of slots 0-54, from their names alone.
	moved := slots.NewSet(slots.Range{Start: 0, End: 54})
	var want int64
	for i := 0; i < 20_000; i++ {
		if moved.Contains(slots.ForString(KeyName(i))) {
			want++
		}
	}
	wantForks := map[string]int64{MethodReshard10: 0, MethodSlotmover: 0}
	for _, m := range methods {
		row := rep.row(WorkloadSmall, m)
		if row == nil || len(row.Runs) != 1 {
			t.Fatalf("%s: row %+v", m, row)
		}
		r := row.Runs[0]
		if r.Error != "" || len(r.Warnings) > 0 {
			t.Errorf("%s: error %q, warnings %q", m, r.Error, r.Warnings)
		}
		if r.KeysMoved != want || r.TargetKeys != want || r.SourceLeft != 0 {
			t.Errorf("%s: %d keys to move, %d on the target, %d left; want %d, %d, 0", m, r.KeysMoved, r.TargetKeys, r.SourceLeft, want, want)
		}
		if row.Forks == nil {
			t.Errorf("%s: no fork count", m)
		} else if w, ok := wantForks[m]; ok && *row.Forks != w || !ok && *row.Forks <= 0 {
			t.Errorf("%s: the source forked %d times during the move", m, *row.Forks)
		}
		if row.StallMS == nil {
			t.Errorf("%s: no stall reported", m)
		}
		if row.PingIdleP99 == nil || row.PingP99 == nil || row.PingMax == nil || *row.PingIdleP99 <= 0 || *row.PingP99 <= 0 || *row.PingMax < *row.PingP99 {
			t.Errorf("%s: PING idle p99 %v, p99 %v, max %v ms", m, deref(row.PingIdleP99), deref(row.PingP99), deref(row.PingMax))
		}
		if len(r.Sources) != 1 || r.Sources[0].PingsIdle < 100 || r.Sources[0].PingsDuring < 1 {
			t.Errorf("%s: sources %+v", m, r.Sources)
		}
	}
	sm := rep.row(WorkloadSmall, MethodSlotmover).Runs[0]
	if len(sm.Tasks) != 1 || sm.Tasks[0].Summary.Snapshot != mover.SnapshotKeys || sm.Snapshot != mover.SnapshotKeys {
		t.Errorf("slotmover on small: snapshot %q, tasks %+v; want the keys path", sm.Snapshot, sm.Tasks)
	}
	if rdb := rep.row(WorkloadSmall, MethodSlotmoverRDB).Runs[0]; rdb.Snapshot != mover.SnapshotRDB {
		t.Errorf("slotmover-rdb took the %q path", rdb.Snapshot)
	}
	table := b.String()
	for _, s := range []string{"snapshot", "forks", "stall", "ping p99 idle", "ping p99 move", "ping max", "small: slots 0-54", "slotmover-rdb", " keys "} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q", s)
		}
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
	contents := &contentCheck{ctx: ctx, keys: keys}
	rep, err := Run(ctx, Config{
		Keys: keys, ValueSize: 64, Workloads: []string{WorkloadSingle},
		Methods: []string{MethodReshard1000, MethodSlotmover}, LoadRate: 200,
		Dir: t.TempDir(), KeepDirs: true, MoveTimeout: time.Minute, // kept for the content check
		Logger: slog.New(logHook{slog.NewTextHandler(t.Output(), nil), contents.filled}),
	})
	if err != nil {
		t.Fatal(err)
	}
	contents.check(t)
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
	// The pause bound is one of correctness, not speed: a cutover that
	// switches has met its fence within the fence timeout (250 ms) from
	// the pause's start, and the release, claim and unpause that follow
	// are transactions queued before the pause. A pause near the 2 s
	// budget (the bound this had) would be the server's own timeout ending
	// it, not slotmover. The README reports pauses of a few ms; twice the
	// fence timeout leaves room for a loaded machine.
	sm := rep.row(WorkloadSingle, MethodSlotmover)
	if maxPause := 2 * float64(mover.DefaultFenceTimeout.Milliseconds()); sm.PauseMS == nil || *sm.PauseMS <= 0 || *sm.PauseMS > maxPause || sm.Ratio == nil || *sm.Ratio != 1 {
		t.Errorf("slotmover: pause %v ms (at most %.0f), ratio %v", deref(sm.PauseMS), maxPause, deref(sm.Ratio))
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

// contentCheck compares the contents of the keys a benchmark run moves, as
// the target holds them at the end, with what they were before the move.
// The benchmark's own check counts keys; it keeps no cluster for a test to
// read. So when a run logs "bench: filled" (its cluster filled, the move
// about to start), the check captures the moved keys' states from the
// source and sets a save point on the target, which then writes its
// dataset when the run stops it; after Run, every saved dataset is loaded
// into a fresh server and compared.
type contentCheck struct {
	ctx  context.Context
	keys int
	runs []savedRun
	errs []error
}

type savedRun struct {
	dir    string // the target's working directory, where it saves dump.rdb
	before *localcluster.KeyStates
	count  int
}

// filled is called for every log record of the benchmark.
func (cc *contentCheck) filled(r slog.Record) {
	if r.Message != "bench: filled" {
		return
	}
	var dir string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "dir" {
			dir = a.Value.String()
		}
		return true
	})
	if err := cc.prepare(dir); err != nil {
		cc.errs = append(cc.errs, fmt.Errorf("run in %s: %w", dir, err))
	}
}

// prepare finds the run's source (the node owning slot 0) and target (the
// node owning nothing) among the servers in dir, captures the moved keys
// on the source and sets a save point on the target.
func (cc *contentCheck) prepare(dir string) error {
	ctx := cc.ctx
	entries, err := filepath.Glob(filepath.Join(dir, "redis-*"))
	if err != nil || len(entries) != len(layout) {
		return fmt.Errorf("%d server directories (%v), want %d", len(entries), err, len(layout))
	}
	var source *redis.Client
	var targetDir string
	var target *redis.Client
	for _, e := range entries {
		port := strings.TrimPrefix(filepath.Base(e), "redis-")
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, DisableIdentity: true})
		defer c.Close()
		top, err := cluster.Load(ctx, c)
		if err != nil {
			return err
		}
		switch {
		case top.Myself.Slots.Contains(0):
			source = c
		case top.Myself.Slots.Len() == 0:
			target, targetDir = c, e
		}
	}
	if source == nil || target == nil {
		return fmt.Errorf("no source or no target among %v", entries)
	}
	moved := slots.NewSet(slots.Range{Start: 0, End: 5460})
	var names []string
	for i := 0; i < cc.keys; i++ {
		if k := KeyName(i); moved.Contains(slots.ForString(k)) {
			names = append(names, k)
		}
	}
	before, err := localcluster.Capture(ctx, source, names)
	if err != nil {
		return err
	}
	if err := target.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		return err
	}
	cc.runs = append(cc.runs, savedRun{dir: targetDir, before: before, count: len(names)})
	return nil
}

// check loads each run's saved target dataset and compares it.
func (cc *contentCheck) check(t *testing.T) {
	t.Helper()
	for _, err := range cc.errs {
		t.Error(err)
	}
	if len(cc.runs) != 2 {
		t.Fatalf("%d runs captured for the content check, want 2 (does the benchmark still log \"bench: filled\" with its dir?)", len(cc.runs))
	}
	for _, run := range cc.runs {
		rdb := filepath.Join(run.dir, "dump.rdb")
		if _, err := os.Stat(rdb); err != nil {
			t.Errorf("the target saved nothing when stopped: %v", err)
			continue
		}
		// A standalone server that starts in that directory loads it.
		s := harness.ServerT(t, localcluster.Options{Config: []string{"dir " + run.dir}})
		c := s.Client()
		err := run.before.Compare(cc.ctx, c)
		c.Close()
		if err != nil {
			t.Errorf("the %d moved keys on the target at the end of the run in %s: %v", run.count, run.dir, err)
		}
	}
}

// logHook passes every record to on, then to the handler.
type logHook struct {
	slog.Handler
	on func(slog.Record)
}

func (h logHook) Handle(ctx context.Context, r slog.Record) error {
	h.on(r)
	return h.Handler.Handle(ctx, r)
}

func (h logHook) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHook{h.Handler.WithAttrs(attrs), h.on}
}

func (h logHook) WithGroup(name string) slog.Handler {
	return logHook{h.Handler.WithGroup(name), h.on}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// The probe's stalls are the servers' own: a 25 ms command on the source
// and a 10 ms one on the target during the move are reported as such, a
// longer one before the move is not.
func TestProbeReportsTheLongestStalls(t *testing.T) {
	s, tgt := harness.ServerT(t, localcluster.Options{}), harness.ServerT(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, tc := s.Client(), tgt.Client()
	defer c.Close()
	defer tc.Close()
	p, err := startProbe(ctx, []*localcluster.Server{s}, []*localcluster.Server{tgt}, false, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*redis.Client{c, tc} {
		if err := cl.Do(ctx, "DEBUG", "SLEEP", "0.06").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.resetStalls(ctx); err != nil {
		t.Fatal(err)
	}
	p.moveStarts()
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0.025").Err(); err != nil {
		t.Fatal(err)
	}
	if err := tc.Do(ctx, "DEBUG", "SLEEP", "0.01").Err(); err != nil {
		t.Fatal(err)
	}
	got, targets, err := p.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].StallMS < 25 || got[0].StallMS >= 60 || got[0].StallEvent != "command (DEBUG)" {
		t.Fatalf("source %+v; want a stall of 25-59 ms, event command (DEBUG)", got)
	}
	if len(targets) != 1 || targets[0].StallMS < 10 || targets[0].StallMS >= 60 || targets[0].StallEvent != "command (DEBUG)" {
		t.Fatalf("target %+v; want a stall of 10-59 ms, event command (DEBUG)", targets)
	}
}
