package bench

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
)

// The fleet's checks must be able to fail. On a fleet nobody rebalanced
// they name the idle new master and nothing else (nothing at all when no
// move was asked for, as in the nomove method); with a big key changed,
// a key deleted and an acknowledged write the servers never got, they name
// each fault.
func TestVerifyFleetCatchesPlantedFaults(t *testing.T) {
	for _, bin := range []string{localcluster.ServerBin, "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := &Config{Keys: 2000, ValueSize: 32, BigElements: 300, FleetMasters: 2, FleetNew: 1, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	cfg.defaults()
	f, err := startFleet(ctx, cfg, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	if len(f.c.Nodes) != 3 || len(f.replicas) != 3 || len(f.big) != 4 {
		t.Fatalf("%d masters, %d replicas, big keys %q; want 3, 3 and 4", len(f.c.Nodes), len(f.replicas), f.big)
	}
	cc := f.c.Client()
	defer cc.Close()
	for _, k := range f.big {
		if n, err := cc.ZCard(ctx, k).Result(); err != nil || n != 300 {
			t.Errorf("%s: %d members (%v), want 300", k, n, err)
		}
	}
	ld := newLoad(f.c)
	defer ld.close()
	if err := ld.prime(ctx); err != nil {
		t.Fatal(err)
	}
	total, _, err := masterKeys(ctx, f.c)
	if err != nil {
		t.Fatal(err)
	}
	if total != 2000+4+Counters {
		t.Fatalf("%d keys on the masters, want %d", total, 2000+4+Counters)
	}
	all := slots.NewSet(slots.Range{Start: 0, End: slots.Count - 1})
	sample, err := captureSample(ctx, f.c, all, cfg.Keys, f.big)
	if err != nil {
		t.Fatal(err)
	}

	unmoved := RunResult{Moved: map[string]string{}}
	verifyFleet(ctx, f, total, ld, sample, false, &unmoved)
	if len(unmoved.Warnings) != 0 {
		t.Errorf("no rebalance asked for: warnings %q, want none", unmoved.Warnings)
	}
	clean := RunResult{Moved: map[string]string{}}
	verifyFleet(ctx, f, total, ld, sample, true, &clean)
	if len(clean.Warnings) != 1 || !strings.Contains(clean.Warnings[0], "serves no slot") {
		t.Errorf("no rebalance: warnings %q, want only that the new master serves no slot", clean.Warnings)
	}

	if err := cc.ZAdd(ctx, f.big[1], redis.Z{Score: 1, Member: "planted"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.Del(ctx, KeyName(0)).Err(); err != nil {
		t.Fatal(err)
	}
	ld.tally.Note(7, nil) // an acknowledged write the servers never got
	planted := RunResult{Moved: map[string]string{}}
	verifyFleet(ctx, f, total, ld, sample, true, &planted)
	got := strings.Join(planted.Warnings, "\n")
	for _, want := range []string{"serves no slot", "hold 3027 keys, 3028 before", "2 of", "1 acknowledged writes lost"} {
		if !strings.Contains(got, want) {
			t.Errorf("planted faults: warnings lack %q:\n%s", want, got)
		}
	}
	if planted.LostWrites != 1 {
		t.Errorf("%d lost writes, want 1", planted.LostWrites)
	}
}
