package tests

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/throttle"
)

// A move under the default budget holds while its target is over it (a
// DEBUG SLEEP loop stands for a server busy with its clients' commands),
// reports the time held, and completes with every key once the target is
// itself again. The same move with the budget off copies through the
// slowdown: what tells the two apart.
func TestBudgetHoldsTheCopyWhileTheTargetIsSlow(t *testing.T) {
	c := fourMasters(t)
	set := mustSlots(t, "0-1999")
	keys := loadSmall(t, c.Client(), 60_000, set)
	for i, budget := range []throttle.Budget{{}, {Off: true}} {
		src, dst := 0, 3
		if i == 1 {
			src, dst = 3, 0 // and back
		}
		t.Run(budget.String(), func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			cc := c.Client() // the slots' owner now
			defer cc.Close()
			before := capture(t, ctx, cc, keys)
			mv := mover.Start(ctx, mover.Options{Source: mover.Conn{Addr: c.Nodes[src].Addr}, Target: mover.Conn{Addr: c.Nodes[dst].Addr},
				Slots: set, Logger: testLogger(t), Budget: budget})
			// Held until the copy has begun and the prober has its idle
			// round trips: the slowdown starts after both.
			mv.Pause()
			waitProgress(t, mv, "the copy to start, the idle round trips taken", func(p mover.Progress) bool {
				return p.Phase == mover.PhaseSnapshot && !holds(p.Holding, "measuring")
			})
			stopHog := slowDown(t, c.Nodes[dst].Client(), 50*time.Millisecond, 10*time.Millisecond)
			time.Sleep(300 * time.Millisecond) // for the probes to see it
			mv.Resume()
			k0 := mv.Progress().KeysCopied
			time.Sleep(1500 * time.Millisecond)
			during := mv.Progress()
			stopHog()
			sum, err := mv.Wait()
			if err != nil || sum.Result != mover.ResultMoved {
				t.Fatalf("move: %s: %v", sum.Result, err)
			}
			target := nodeClient(t, c, dst)
			if err := before.Compare(ctx, target); err != nil {
				t.Fatalf("on the target: %v", err)
			}
			copied := during.KeysCopied - k0
			t.Logf("budget %s: %d keys copied in 1.5 s of a slow target (held then: %q), %d ms throttled, %d ms paused, %d ms in all",
				sum.Budget, copied, during.Holding, sum.ThrottledMS, sum.PausedMS, sum.TotalMS)
			if budget.Off {
				if copied < 5000 || sum.ThrottledMS != 0 {
					t.Fatalf("budget off: %d keys copied while the target was slow, %d ms throttled: want thousands, and none", copied, sum.ThrottledMS)
				}
				return
			}
			if copied > 2*mover.DefaultWindow || sum.ThrottledMS < 1000 || !holds(during.Holding, "over budget") {
				t.Fatalf("default budget: %d keys copied while the target was slow (want a window's at most), %d ms throttled (want most of 1.8 s), held for %q",
					copied, sum.ThrottledMS, during.Holding)
			}
		})
	}
}

// A prober that is slow to read its replies, as a niced sidecar is on a
// host short of CPU once a move loads it, does not take its own wait for
// the server's: the gate stays open. The same server made slow itself
// still shuts it.
func TestBudgetProbesTimeTheServerNotTheProber(t *testing.T) {
	late := &lateReader{}
	c, _, gate, _ := startProber(t, throttle.DefaultBudget(), late)

	// The idle round trips (16 probes), read at once; then a second of
	// probes each read late.
	for late.replies.Load() <= 16 || holds(gate.State().Holding, "measuring") {
		time.Sleep(5 * time.Millisecond)
	}
	wait := 2 * throttle.DefaultMaxEvent
	late.wait.Store(int64(wait))
	n0 := late.replies.Load()
	time.Sleep(time.Second)
	// Read by their round trips, every probe would be over budget and the
	// gate shut all along; a real stall of a server on a busy host may
	// shut it for a moment.
	if s, n := gate.State(), late.replies.Load()-n0; n < 10 || s.Throttled > 250*time.Millisecond {
		t.Fatalf("%d replies read %s late: held %s over budget (%q), want next to none", n, wait, s.Throttled, s.Holding)
	}
	shutsOnASlowServer(t, c, gate)
}

// With the budget off a move probes nothing beyond its idle round trips
// (by the server's own count of TIME calls); turned on, it probes, and a
// slow server shuts the gate.
func TestBudgetOffProbesNothing(t *testing.T) {
	c, probed, gate, prober := startProber(t, throttle.Budget{Off: true})
	timeCalls := func() int64 {
		n, err := localcluster.CommandStat(context.Background(), probed, "time", "calls")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const idleProbes = 16
	for deadline := time.Now().Add(10 * time.Second); timeCalls() < idleProbes; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d TIME calls on the server, want the %d idle probes", timeCalls(), idleProbes)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n := timeCalls(); n != idleProbes {
		t.Fatalf("budget off: %d TIME calls on the server, want the %d idle probes only", n, idleProbes)
	}
	prober.SetBudget(throttle.DefaultBudget())
	time.Sleep(500 * time.Millisecond)
	if n := timeCalls() - idleProbes; n < 5 {
		t.Fatalf("budget on: %d probes in 500 ms, want one every 10 ms", n)
	}
	shutsOnASlowServer(t, c, gate)
}

// startProber probes the first master of a new cluster, on a client with
// hooks, under budget b until the test ends.
func startProber(t *testing.T, b throttle.Budget, hooks ...redis.Hook) (*localcluster.Cluster, *redis.Client, *throttle.Gate, *throttle.Prober) {
	c := fourMasters(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	probed := c.Nodes[0].Client()
	for _, h := range hooks {
		probed.AddHook(h)
	}
	gate := throttle.NewGate()
	prober := throttle.NewProber(gate, b, []throttle.Server{{Name: "probed", Client: probed}}, testLogger(t))
	done := make(chan error, 1)
	go func() { done <- prober.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		probed.Close()
	})
	return c, probed, gate, prober
}

// shutsOnASlowServer makes the probed server sleep 50 ms of every 60 and
// waits for the gate to hold over budget.
func shutsOnASlowServer(t *testing.T, c *localcluster.Cluster, gate *throttle.Gate) {
	t.Helper()
	slowDown(t, c.Nodes[0].Client(), 50*time.Millisecond, 10*time.Millisecond)
	for deadline := time.Now().Add(5 * time.Second); !holds(gate.State().Holding, "over budget"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a server sleeping 50 ms of every 60: the gate holds %q, want over budget", gate.State().Holding)
		}
	}
}

// lateReader waits before the caller gets each reply, once told how long.
type lateReader struct {
	wait    atomic.Int64 // nanoseconds
	replies atomic.Int64
}

func (h *lateReader) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateReader) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.replies.Add(1)
		time.Sleep(time.Duration(h.wait.Load()))
		return err
	}
}

func (h *lateReader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A paused move stands still: nothing reaches the target, while a client
// writes on. Resumed, it catches up and then waits for its held cutover,
// the source still the owner, until the hold is released. No write is
// lost.
func TestPausedMoveAndHeldCutover(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-5460")
	keys := loadSmall(t, cc, 20_000, set)
	w := startWriter(t, c, 2_000_000)
	mv := mover.Start(ctx, mover.Options{Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t)})
	mv.Pause()
	if err := mv.HoldCutover(true); err != nil {
		t.Fatal(err)
	}
	waitProgress(t, mv, "the copy to start", func(p mover.Progress) bool { return p.Phase == mover.PhaseSnapshot })
	target := nodeClient(t, c, 3)
	size0, _ := target.DBSize(ctx).Result()
	p0 := mv.Progress()
	time.Sleep(time.Second)
	size1, _ := target.DBSize(ctx).Result()
	p1 := mv.Progress()
	if size1 != size0 || p1.KeysCopied != p0.KeysCopied || p1.DeltaCommands != p0.DeltaCommands || !holds(p1.Holding, "paused") {
		t.Fatalf("paused for 1 s: the target went from %d to %d keys, the move copied %d then %d keys and %d then %d commands, holding %q",
			size0, size1, p0.KeysCopied, p1.KeysCopied, p0.DeltaCommands, p1.DeltaCommands, p1.Holding)
	}
	mv.Resume()
	waitProgress(t, mv, "the catch-up to close in", func(p mover.Progress) bool {
		return p.Phase == mover.PhaseCatchUp && p.Lag >= 0 && p.Lag < mover.DefaultMaxLag
	})
	time.Sleep(time.Second)
	if p := mv.Progress(); p.Phase != mover.PhaseCatchUp || !p.CutoverHeld {
		t.Fatalf("with the cutover held: phase %s, held %v", p.Phase, p.CutoverHeld)
	}
	for _, n := range c.Nodes {
		top, err := cluster.Load(ctx, n.Client())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range set.Slots() {
			if o := top.Owner(s); o == nil || o.ID != c.IDs[0] {
				t.Fatalf("with the cutover held, %s sees slot %d owned by %v, not the source", n.Addr, s, o)
			}
		}
	}
	if err := mv.HoldCutover(false); err != nil {
		t.Fatal(err)
	}
	sum, err := mv.Wait()
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	if sum.PausedMS < 1000 {
		t.Fatalf("paused %d ms, want the 1 s it was paused", sum.PausedMS)
	}
	if err := mv.HoldCutover(true); err != mover.ErrTooLate {
		t.Fatalf("a hold after the switch: %v, want ErrTooLate", err)
	}
	for _, k := range keys[:100] {
		if v, err := target.Get(ctx, k).Result(); err != nil || v != "v" {
			t.Fatalf("%s on the target: %q, %v", k, v, err)
		}
	}
	assertNoOrphans(t, c)
	w.finish(t)
}

// waitProgress waits up to 30 s for the move's progress to satisfy ok.
func waitProgress(t *testing.T, mv *mover.Move, what string, ok func(mover.Progress) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		p := mv.Progress()
		if ok(p) {
			return
		}
		if time.Now().After(deadline) || p.Phase.Terminal() {
			t.Fatalf("waited for %s: %+v", what, p)
		}
	}
}

// holds says whether a hold of that name is among those a move or a gate
// reports.
func holds(holding []string, hold string) bool {
	return slices.ContainsFunc(holding, func(h string) bool { return strings.HasPrefix(h, hold) })
}

// slowDown holds c's main thread for sleep out of every sleep+gap until
// the returned func is called (at most a minute).
func slowDown(t *testing.T, c *redis.Client, sleep, gap time.Duration) (stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		for ctx.Err() == nil {
			if err := c.Do(ctx, "DEBUG", "SLEEP", sleep.Seconds()).Err(); err != nil && ctx.Err() == nil {
				t.Errorf("DEBUG SLEEP: %v", err)
				return
			}
			time.Sleep(gap)
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}
