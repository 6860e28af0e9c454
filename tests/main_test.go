package tests

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// fourMasters is the cluster of the move tests: three masters holding every
// slot, one empty.
func fourMasters(t *testing.T) *localcluster.Cluster {
	t.Helper()
	return harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
}

// testLogger writes the mover's log through t.Log: shown for failed tests.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustSlots(t *testing.T, spec string) *slots.Set {
	t.Helper()
	s, err := slots.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tagIn returns a hash tag whose slot is in set, so that test keys land there.
func tagIn(set *slots.Set, n int) string {
	for i := 0; ; i++ {
		tag := fmt.Sprintf("t%d-%d", n, i)
		if set.Contains(slots.ForString(tag)) {
			return "{" + tag + "}"
		}
	}
}

// load fills the cluster with at least n keys spread over all slots: every
// type and encoding (with TTLs) under many hash tags, plain strings, and
// the big keys of one type each in a slot of bigIn. It returns every key.
func load(t *testing.T, cc *redis.ClusterClient, n int, bigIn *slots.Set) []string {
	t.Helper()
	ctx := context.Background()
	var all []string
	for i := 0; i < 150; i++ {
		keys, err := localcluster.FillEveryType(ctx, cc, fmt.Sprintf("{p%d}", i), localcluster.FillOptions{Small: 2, TTL: time.Hour, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys...)
	}
	big, err := localcluster.FillEveryType(ctx, cc, tagIn(bigIn, 0), localcluster.FillOptions{Small: 1, BigElements: 20_000, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, big...)
	value := strings.Repeat("v", 200)
	for i := 0; len(all) < n; i += 1000 {
		p := cc.Pipeline()
		for j := i; j < i+1000; j++ {
			k := fmt.Sprint("plain:", j)
			if j%3 == 0 {
				p.Set(ctx, k, value, time.Hour)
			} else {
				p.Set(ctx, k, value, 0)
			}
			all = append(all, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

func keysIn(keys []string, set *slots.Set) []string {
	var out []string
	for _, k := range keys {
		if set.Contains(slots.ForString(k)) {
			out = append(out, k)
		}
	}
	return out
}

// writer increments counters spread over every slot through a cluster
// client, and records how many increments of each were acknowledged.
type writer struct {
	cc      *redis.ClusterClient
	stop    context.CancelFunc
	wg      sync.WaitGroup
	acked   []int64
	unknown []int64 // increments that failed: applied or not
	errs    map[string]int
}

const counters = 512

func startWriter(cc *redis.ClusterClient, maxOps int) *writer {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	w := &writer{cc: cc, stop: cancel, acked: make([]int64, counters), unknown: make([]int64, counters), errs: map[string]int{}}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; i < maxOps && ctx.Err() == nil; i++ {
			c := i % counters
			err := cc.Incr(ctx, fmt.Sprint("counter:", c)).Err()
			switch {
			case err == nil:
				w.acked[c]++
			case ctx.Err() != nil:
				w.unknown[c]++
				return
			default:
				w.unknown[c]++
				w.errs[strings.SplitN(err.Error(), " ", 2)[0]]++
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return w
}

// finish stops the writer and checks every acknowledged increment is there.
func (w *writer) finish(t *testing.T) (ops int64) {
	t.Helper()
	w.stop()
	w.wg.Wait()
	ctx := context.Background()
	lost := 0
	for c := 0; c < counters; c++ {
		v, err := w.cc.Get(ctx, fmt.Sprint("counter:", c)).Int64()
		if err != nil && err != redis.Nil {
			t.Fatalf("read counter %d: %v", c, err)
		}
		if v < w.acked[c] || v > w.acked[c]+w.unknown[c] {
			lost++
			if lost < 5 {
				t.Errorf("counter:%d = %d, acknowledged %d (+%d unknown)", c, v, w.acked[c], w.unknown[c])
			}
		}
		ops += w.acked[c]
	}
	if lost > 0 {
		t.Fatalf("%d counters lost or gained writes", lost)
	}
	if len(w.errs) > 0 {
		t.Logf("writer errors: %v", w.errs)
	}
	return ops
}
