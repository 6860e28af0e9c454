package tests

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/soak"
	"github.com/slotmover/slotmover/tests/harness"
)

// The soak tests run the checked workload of `slotmover soak` on a real
// cluster of 4 masters (3 holding every slot, 1 empty) while slots move.
//
// A longer soak: SLOTMOVER_SOAK_DURATION=10m (and optionally
// SLOTMOVER_SOAK_RATE=3000, SLOTMOVER_SOAK_SEED=…) with a test timeout to
// match:
//
//	SLOTMOVER_SOAK_DURATION=10m go test -count=1 -timeout 30m -run TestSoakMovesLoseNoWrite -v ./tests

// soakEnv reads an integer environment variable, def when unset.
func soakEnv(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// soakCluster starts the 4-master cluster.
func soakCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	return harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
}

// soakReport logs the report as the CLI prints it.
// assertNothingLost fails on any lost, wrong or resurrected key, and on a
// final pass that did not read every key.
func assertNothingLost(t *testing.T, rep *soak.Report) {
	t.Helper()
	v := rep.Verdict
	if v.LostWrites != 0 || v.WrongReads != 0 || v.Resurrected != 0 {
		t.Errorf("lost writes %d, wrong reads %d, resurrected %d: %v", v.LostWrites, v.WrongReads, v.Resurrected, v.Examples)
	}
	if v.KeysChecked != rep.Keys || v.Unchecked != 0 {
		t.Errorf("the final pass checked %d of %d keys (%d unreadable)", v.KeysChecked, rep.Keys, v.Unchecked)
	}
}

func soakReport(t *testing.T, r *soak.Report) {
	t.Helper()
	var b bytes.Buffer
	r.WriteText(&b)
	t.Log("\n" + b.String())
}

// At least ten moves during a minute of mixed load lose no acknowledged
// write, show no wrong value and bring back no expired key; clients never
// see ASK or TRYAGAIN.
func TestSoakMovesLoseNoWrite(t *testing.T) {
	duration := 60 * time.Second
	// Two moves at a time, from one source where it can: their cutovers
	// share the source's one write pause.
	cfg := soak.Config{Moves: 14, ParallelMoves: 2, Pick: soak.PickSameSource}
	long := os.Getenv("SLOTMOVER_SOAK_DURATION") != ""
	if long {
		d, err := time.ParseDuration(os.Getenv("SLOTMOVER_SOAK_DURATION"))
		if err != nil {
			t.Fatalf("SLOTMOVER_SOAK_DURATION: %v", err)
		}
		duration = d
		cfg = soak.Config{MoveEvery: 5 * time.Second, ParallelMoves: 2, Pick: soak.PickSameSource}
	}
	if p := os.Getenv("SLOTMOVER_SOAK_PICK"); p != "" {
		cfg.Pick = p
	}
	c := soakCluster(t)
	ctx := context.Background()
	before, err := c.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = c.Nodes[0].Addr
	cfg.Duration = duration
	cfg.Rate = int(soakEnv(t, "SLOTMOVER_SOAK_RATE", 2000))
	cfg.Seed = soakEnv(t, "SLOTMOVER_SOAK_SEED", 0)
	cfg.SlotsPerMove = 256
	cfg.Keys = 20000
	cfg.Logger = testLogger(t)
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	soakReport(t, rep)
	assertNothingLost(t, rep)
	wantMoves := 10
	if long {
		wantMoves = int(duration / (10 * time.Second))
	}
	if rep.Moves.Moved < wantMoves || rep.Moves.Failed != 0 {
		t.Errorf("moves: %d moved (want at least %d), %d failed", rep.Moves.Moved, wantMoves, rep.Moves.Failed)
	}
	if floor := int64(cfg.Rate) * int64(duration/time.Second) / 2; rep.OpsTotal < floor {
		t.Errorf("only %d operations ran (want at least %d)", rep.OpsTotal, floor)
	}
	// Clients never see ASK or TRYAGAIN: neither the servers counted one
	// (all nodes, before and after) nor did the workload's node clients.
	after, err := c.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ASK", "TRYAGAIN"} {
		if after[kind] != before[kind] || rep.ServerErrors[kind] != 0 || rep.ClientRedirects[kind] != 0 {
			t.Errorf("%s: servers went from %d to %d (the soak's sum: +%d), the client saw %d",
				kind, before[kind], after[kind], rep.ServerErrors[kind], rep.ClientRedirects[kind])
		}
	}
	if !rep.Pass {
		t.Errorf("the soak did not pass: %v", rep.Failures)
	}
	for _, n := range c.Nodes {
		cl := n.Client()
		role, err := cl.Do(ctx, "ROLE").Slice()
		cl.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			if err := localcluster.CheckWithRedisCli(ctx, n.Addr); err != nil {
				t.Error(err)
			}
			break
		}
	}
}

// A mover that drops a command of the replication stream and switches
// ownership without waiting for the target loses writes under load: the
// checker must say so.
func TestSoakCatchesBrokenMover(t *testing.T) {
	c := soakCluster(t)
	rep, err := soak.Run(context.Background(), soak.Config{
		Addr:          c.Nodes[0].Addr,
		Duration:      15 * time.Second,
		Rate:          0, // as fast as it goes, so that moves see many writes
		ReadRatio:     1,
		Moves:         5,
		SlotsPerMove:  1024,
		Keys:          20000,
		Seed:          soakEnv(t, "SLOTMOVER_SOAK_SEED", 0),
		Logger:        testLogger(t),
		Faults:        mover.Faults{DropDelta: 2, SkipFence: true},
		ParallelMoves: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	soakReport(t, rep)
	v := rep.Verdict
	if v.LostWrites+v.WrongReads == 0 {
		t.Fatalf("a mover that drops stream commands passed the checker: %d moves, %d delta commands in all",
			rep.Moves.Moved, soakDeltas(rep))
	}
	if rep.Pass {
		t.Fatal("the report passes with lost or wrong writes")
	}
	if len(v.Examples) == 0 {
		t.Fatal("the report names no offending key")
	}
}

// Moves that die right after the source released the slots (no claim, the
// pause left to run out) are given back to their source by slotmover fix
// (the target may lack the writes after the fence): every such crash is
// recorded and repaired, the source owns the slots again in every master's
// view with nothing left on the target (CrashingMover checks), and no write
// is lost.
func TestSoakCrashedMovesAreFixed(t *testing.T) {
	c := soakCluster(t)
	log := testLogger(t)
	rep, err := soak.Run(context.Background(), soak.Config{
		Addr:          c.Nodes[0].Addr,
		Duration:      25 * time.Second,
		Rate:          2000,
		Moves:         6,
		SlotsPerMove:  256,
		Keys:          20000,
		Seed:          soakEnv(t, "SLOTMOVER_SOAK_SEED", 0),
		Logger:        log,
		ParallelMoves: 2,
		Mover:         soak.CrashingMover(mover.Options{Logger: log}, 2),
	})
	if err != nil {
		t.Fatal(err)
	}
	soakReport(t, rep)
	assertNothingLost(t, rep)
	m := rep.Moves
	if m.Moved+m.GivenBack < 5 || m.Failed != 0 || !rep.Pass {
		t.Errorf("moves: %d moved, %d given back, %d failed; failures %v", m.Moved, m.GivenBack, m.Failed, rep.Failures)
	}
	crashed := 0
	for _, e := range m.List {
		switch {
		case e.Crashed:
			crashed++
			if !e.GivenBack || e.Class != "rolled_back" || e.Error != "" || len(e.Repairs) == 0 {
				t.Errorf("move %d crashed after the release and was not given back: class %s, repairs %q, error %s", e.Seq, e.Class, e.Repairs, e.Error)
			}
		case e.Seq%2 == 0 && e.Class == "moved":
			t.Errorf("move %d should have crashed after its release, but moved", e.Seq)
		}
	}
	if crashed != m.Crashed || m.GivenBack != m.Crashed {
		t.Errorf("%d moves crashed (%d counted), %d given back", crashed, m.Crashed, m.GivenBack)
	}
	if m.GivenBack < 2 {
		t.Errorf("only %d moves crashed and were given back: the test tests little", m.GivenBack)
	}
}

func soakDeltas(r *soak.Report) int64 {
	var n int64
	for _, m := range r.Moves.List {
		n += m.DeltaCommands
	}
	return n
}
