package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/lab/bench"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
)

// A small fleet rebalanced by every method, slotmover through a
// `slotmover serve` beside every master over NATS: each run balances the cluster with every
// key kept and no write lost, the writer's latencies idle and during are
// measured, and under the budget no two moves into one target overlap, by
// the sidecars' task records. nomove, the control, watches the same fleet
// and moves nothing.
func TestBenchFleet(t *testing.T) {
	for _, bin := range []string{localcluster.ServerBin, "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	methods := []string{bench.MethodNoMove, bench.MethodRebalance, bench.MethodSlotmover, bench.MethodSlotmoverOff, bench.MethodASM}
	args := []string{"bench", "--workloads", "fleet", "--methods", strings.Join(methods, ","), "--keys", "6000", "--value-size", "64", "--types",
		"--big-elements", "3000", "--fleet-masters", "3", "--fleet-new", "2", "--parallel", "3", "--load-rate", "500", "--nomove-for", "2s",
		"--asm-build", bench.DefaultASMBuild(), "--redis-cli", localcluster.CliBin(), "--server-bin", localcluster.ServerBin,
		"--dir", t.TempDir(), "--move-timeout", "2m", "--json"}
	cmd := exec.CommandContext(ctx, labBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("slotmover %s:\n%s", strings.Join(args, " "), stderr.String())
	if err != nil {
		t.Errorf("exit: %v", err)
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report: %v\n%s", err, stdout.String())
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if len(rep.Rows) != len(methods) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(methods))
	}
	for _, row := range rep.Rows {
		if row.Skipped != "" {
			if row.Method != bench.MethodASM {
				t.Errorf("%s skipped: %s", row.Method, row.Skipped)
			}
			continue
		}
		if len(row.Runs) != 1 {
			t.Fatalf("%s: %d runs", row.Method, len(row.Runs))
		}
		r := row.Runs[0]
		if r.Error != "" || len(r.Warnings) > 0 || r.LostWrites != 0 || r.ExtraWrites != 0 || r.LoadOps == 0 {
			t.Errorf("%s: error %q, warnings %q, %d writes, %d lost, %d extra", row.Method, r.Error, r.Warnings, r.LoadOps, r.LostWrites, r.ExtraWrites)
		}
		// Both new masters serve slots and hold keys; with no move, neither.
		if moved := row.Method != bench.MethodNoMove; moved != (len(r.Moved) == 2 && r.KeysMoved > 0) || !moved && (len(r.Moved) != 0 || r.KeysMoved != 0 || row.Ratio != nil) {
			t.Errorf("%s: new masters serve %v, hold %d keys, ratio %v", row.Method, r.Moved, r.KeysMoved, row.Ratio)
		}
		if c := r.Client; c == nil || c.Idle < 100 || c.During == 0 || c.IdleP99MS <= 0 || c.P99MS <= 0 || c.MaxMS < c.P99MS || c.OpsPerSec <= 0 {
			t.Errorf("%s: client %+v", row.Method, c)
		}
		if r.Forks == nil || r.StallMS == nil || len(r.Sources) != 5 {
			t.Errorf("%s: forks %v, stall %v, %d masters probed", row.Method, r.Forks, r.StallMS, len(r.Sources))
		}
		// The servers work in every method; redis-cli or the sidecars too,
		// outside the servers and the bench.
		if c := r.CPU; c == nil || c.Servers <= 0 || c.Bench <= 0 || (row.Method != bench.MethodASM && row.Method != bench.MethodNoMove && c.Mover <= 0) {
			t.Errorf("%s: CPU %+v", row.Method, c)
		}
		if !slices.Contains([]string{bench.MethodSlotmover, bench.MethodSlotmoverOff}, row.Method) {
			continue
		}
		if *r.Forks != 0 {
			t.Errorf("%s: the masters forked %d times (they keep a backlog: the keys path needs none)", row.Method, *r.Forks)
		}
		if len(r.Moves) < 2 {
			t.Errorf("%s: %d moves", row.Method, len(r.Moves))
		}
		for i, a := range r.Moves {
			if a.Result != mover.ResultMoved || a.Task == "" || a.Start.IsZero() || !a.End.After(a.Start) {
				t.Errorf("%s: move %d: %+v", row.Method, a.N, a)
			}
			for _, o := range r.Moves[i+1:] {
				overlap := a.Start.Before(o.End) && o.Start.Before(a.End)
				if row.Method == bench.MethodSlotmover && a.Move.TargetID == o.Move.TargetID && overlap {
					t.Errorf("under the budget, moves %d and %d into %s overlap: %s–%s and %s–%s", a.N, o.N, a.Move.Target,
						a.Start.Format(time.StampMilli), a.End.Format(time.StampMilli), o.Start.Format(time.StampMilli), o.End.Format(time.StampMilli))
				}
			}
		}
	}
	for _, s := range []string{"client idle", "client during", "CPU servers/mover/bench", "longest event", "nomove", "rebalance", "slotmover-off", "max-event=20ms"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q", s)
		}
	}
}
