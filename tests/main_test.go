package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/lab/writecheck"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// fourMasters is the cluster of the move tests: three masters holding every
// slot, one empty.
func fourMasters(t *testing.T) *localcluster.Cluster {
	t.Helper()
	return harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
}

// fourMastersAndClient is fourMasters, a cluster client of it and a
// context bounded by d: where most move tests start.
func fourMastersAndClient(t *testing.T, d time.Duration) (*localcluster.Cluster, context.Context, *redis.ClusterClient) {
	t.Helper()
	c := fourMasters(t)
	return c, testContext(t, d), clusterClient(t, c)
}

// clusterClient is a cluster client of c, closed when the test ends.
func clusterClient(t *testing.T, c *localcluster.Cluster) *redis.ClusterClient {
	cc := c.Client()
	t.Cleanup(func() { cc.Close() })
	return cc
}

// nodeClient is a client of c's i-th node, closed when the test ends.
func nodeClient(t *testing.T, c *localcluster.Cluster, i int) *redis.Client {
	n := c.Nodes[i].Client()
	t.Cleanup(func() { n.Close() })
	return n
}

// capture is every key's type, value and TTL as they are now.
func capture(t *testing.T, ctx context.Context, cc redis.Cmdable, keys []string) *localcluster.KeyStates {
	t.Helper()
	states, err := localcluster.Capture(ctx, cc, keys)
	if err != nil {
		t.Fatal(err)
	}
	return states
}

// fingerprint is c's data and slot ownership as they are now (see
// assertUnchanged).
func fingerprint(t *testing.T, ctx context.Context, c *localcluster.Cluster) string {
	t.Helper()
	fp, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// must fails the test on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testContext is a test's context, bounded: a move or a command that
// hangs fails the test instead of running into the suite's timeout.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
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
// client of its own, and records how many increments of each were
// acknowledged, the errors it got, and the redirect replies its node
// clients saw (go-redis follows MOVED and ASK inside the cluster client,
// so only a hook on the node clients sees them).
type writer struct {
	c      *localcluster.Cluster
	cc     *redis.ClusterClient
	stop   context.CancelFunc
	wg     sync.WaitGroup
	tally  *writecheck.Tally
	errs   map[string]int
	seen   *localcluster.Redirects
	before map[string]int64 // the servers' error statistics at the start
	// tolerated errors of a kind, up to a count (see tolerate)
	tolerated map[string]int
	bounces   int // writes the client gave up on between source and target, then retried
	unowned   int // writes refused by a node that knew no owner of the slot yet, then retried
}

// A writer's client may give up on at most maxBounces writes bounced
// between a source and its target (it retries each for up to
// bounceRetry). More means the no-owner instant of a cutover is not an
// instant.
const (
	maxBounces  = 2
	bounceRetry = time.Second
)

// isBounce says whether err is the MOVED a cluster client returns when it
// ran out of redirects.
func isBounce(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "MOVED ") }

// isUnowned says whether err is the CLUSTERDOWN of a node that sees the
// slot unassigned, which a cluster client returns when its retries ran out.
func isUnowned(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "CLUSTERDOWN ") }

// retryWhile increments counter c again while it is refused (still), for
// bounceRetry at most: a refused command ran nothing.
func retryWhile(ctx context.Context, cc *redis.ClusterClient, c int, err error, still func(error) bool) error {
	for giveUp := time.Now().Add(bounceRetry); still(err) && time.Now().Before(giveUp) && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
		err = cc.Incr(ctx, counterKey(c)).Err()
	}
	return err
}

const counters = 512

// writerTimeout bounds a writer's run whoever stops it.
const writerTimeout = 3 * time.Minute

func counterKey(c int) string { return fmt.Sprint("counter:", c) }

// startWriter starts at most maxOps increments (and at most writerTimeout).
func startWriter(t *testing.T, c *localcluster.Cluster, maxOps int) *writer {
	t.Helper()
	before, err := c.ErrorStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cc, seen := localcluster.RedirectCountingClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), writerTimeout)
	w := &writer{c: c, cc: cc, stop: cancel, tally: writecheck.NewTally(counters, counterKey),
		errs: map[string]int{}, seen: seen, before: before, tolerated: map[string]int{}}
	t.Cleanup(func() { w.halt(); cc.Close() })
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i := 0; i < maxOps && ctx.Err() == nil; i++ {
			c := i % counters
			err := cc.Incr(ctx, counterKey(c)).Err()
			switch {
			case isBounce(err):
				// Every hop was answered MOVED, so nothing ran: the client
				// gave up on the instant between the source's release and
				// the target's claim (README, Cutover), which outlasts its
				// 5 redirects only when slotmover is starved of CPU (CI's 2
				// cores running 7 clusters). An application tries again.
				w.bounces++
				err = retryWhile(ctx, cc, c, err, isBounce)
			case isUnowned(err):
				// Refused, so nothing ran: Valkey 8's source between its
				// release and hearing of the owner, a slot at a time (a
				// whole shard: 100-400 ms for the last slots on CI), longer
				// than go-redis's own retries. An application tries again.
				w.unowned++
				err = retryWhile(ctx, cc, c, err, isUnowned)
			}
			w.tally.Note(c, err)
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return
			default:
				w.errs[strings.SplitN(err.Error(), " ", 2)[0]]++
				time.Sleep(time.Millisecond)
			}
		}
	}()
	return w
}

// tolerate lets the writer get up to n errors of kind (an error prefix)
// without failing the test: for tests that break what keeps clients from
// seeing them. Call it before finish.
func (w *writer) tolerate(kind string, n int) { w.tolerated[kind] = n }

// halt stops the writer and waits for it.
func (w *writer) halt() {
	w.stop()
	w.wg.Wait()
}

// writerVerdict is what a writer's run shows.
type writerVerdict struct {
	ops       int64            // acknowledged increments
	bad       []string         // counters that lost or gained increments, with their values
	errs      map[string]int   // errors the writer got, by prefix
	seen      map[string]int64 // redirect replies its node clients got, by kind
	errorstat map[string]int64 // the servers' ASK and TRYAGAIN counts since the start
	bounces   int              // writes the client gave up on between two nodes (retried)
	unowned   int              // writes refused where no owner was known yet (retried)
}

// verdict reads every counter (the writer must be halted) and the
// servers' error statistics.
func (w *writer) verdict(ctx context.Context) (writerVerdict, error) {
	v := writerVerdict{errs: map[string]int{}, seen: w.seen.Counts(), errorstat: map[string]int64{}, bounces: w.bounces, unowned: w.unowned}
	for kind, n := range w.errs {
		if n > w.tolerated[kind] {
			v.errs[kind] = n
		}
	}
	cv, err := w.tally.Check(ctx, w.cc)
	if err != nil {
		return v, fmt.Errorf("read the counters: %w", err)
	}
	v.ops, v.bad = cv.Acked, cv.Wrong
	after, err := w.c.ErrorStats(ctx)
	if err != nil {
		return v, err
	}
	for _, kind := range []string{"ASK", "TRYAGAIN"} {
		if d := after[kind] - w.before[kind]; d != 0 {
			v.errorstat[kind] = d
		}
	}
	return v, nil
}

// problems lists how the run falls short of the README's claims: every
// acknowledged write kept and none made up; clients keep using the source
// during the copy and are switched at once, so no ASK and no TRYAGAIN,
// neither in the writer's client nor in any server's statistics, and no
// error at all (a write held by the pause waits; MOVED after the switch is
// followed by the client; a write it gave up on between release and
// claim is retried, at most maxBounces times, and one refused with
// CLUSTERDOWN on Valkey 8, until its source hears of the owner, for up to
// bounceRetry); and a writer that got nothing acknowledged tested nothing.
func (v writerVerdict) problems() []string {
	var out []string
	if len(v.bad) > 0 {
		out = append(out, fmt.Sprintf("%d counters lost or gained acknowledged writes: %s", len(v.bad), strings.Join(v.bad[:min(5, len(v.bad))], "; ")))
	}
	if v.ops == 0 {
		out = append(out, "the writer got no write acknowledged: it tested nothing")
	}
	if len(v.errs) > 0 {
		out = append(out, fmt.Sprintf("the writer got errors: %v", v.errs))
	}
	if v.bounces > maxBounces {
		out = append(out, fmt.Sprintf("the writer's client gave up on %d writes bounced between two nodes (at most %d)", v.bounces, maxBounces))
	}
	for _, kind := range []string{"ASK", "TRYAGAIN"} {
		if v.seen[kind] > 0 {
			out = append(out, fmt.Sprintf("the writer's client was answered %s %d times", kind, v.seen[kind]))
		}
		if v.errorstat[kind] > 0 {
			out = append(out, fmt.Sprintf("the servers answered %s %d times (errorstats)", kind, v.errorstat[kind]))
		}
	}
	return out
}

// finish stops the writer and fails the test on any of its problems; it
// returns the acknowledged writes.
func (w *writer) finish(t *testing.T) (ops int64) {
	t.Helper()
	w.halt()
	v, err := w.verdict(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p := v.problems(); len(p) > 0 {
		t.Fatalf("writer: %s", strings.Join(p, "; "))
	}
	t.Logf("writer: %d acknowledged writes, none lost; errors %v (tolerated %v); redirects seen %v; bounces given up on and retried %d; refused as unowned and retried %d", v.ops, w.errs, w.tolerated, v.seen, v.bounces, v.unowned)
	return v.ops
}

// The binaries under test, side by side as an operator installs them:
// slotmover, and slotmover-lab (demo, bench, soak), whose bench runs the
// slotmover beside it.
var slotmoverBin, labBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "slotmover-bin-")
	if err != nil {
		panic(err)
	}
	slotmoverBin, labBin = filepath.Join(dir, "slotmover"), filepath.Join(dir, "slotmover-lab")
	if out, err := exec.Command("go", "build", "-o", dir+"/", "../cmd/slotmover", "../cmd/slotmover-lab").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("build slotmover: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runCLI runs `slotmover args…` (`slotmover-lab args…` for the lab's
// verbs) and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// binOf is the binary that runs the command line args: the lab's for
// demo, bench and soak.
func binOf(args []string) string {
	if len(args) > 0 && slices.Contains([]string{"demo", "bench", "soak"}, args[0]) {
		return labBin
	}
	return slotmoverBin
}

// assertUnchanged fails unless the cluster's fingerprint is still before.
func assertUnchanged(t *testing.T, c *localcluster.Cluster, before string) {
	t.Helper()
	after, err := c.Fingerprint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("the cluster changed:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// runCLIEnv is runCLI with extra environment variables.
func runCLIEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binOf(args), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run slotmover: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// summary is the part of `slotmover move --json`'s output the tests read.
type summary struct {
	TaskID          string  `json:"task_id"`
	Result          string  `json:"result"`
	KeysCopied      int64   `json:"keys_copied"`
	BigKeys         int64   `json:"big_keys"`
	DeltaCommands   int64   `json:"delta_commands"`
	PauseMS         float64 `json:"pause_ms"`
	CleanupMS       int64   `json:"cleanup_ms"`
	CutoverAttempts int     `json:"cutover_attempts"`
	FenceOffset     int64   `json:"fence_offset"`
	ReleaseOffset   int64   `json:"release_offset"`
	OrphansRemoved  int64   `json:"orphans_removed"`
}

func parseSummary(t *testing.T, code int, stdout, stderr string) summary {
	t.Helper()
	var s summary
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("exit %d, no JSON summary on stdout (%v): %q; stderr %s", code, err, stdout, stderr)
	}
	return s
}

// fillMoved writes keys of every type and encoding (half of them with a
// TTL) under n hash tags of set, and returns them.
func fillMoved(t *testing.T, ctx context.Context, cc *redis.ClusterClient, set *slots.Set, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; i < n; i++ {
		k, err := localcluster.FillEveryType(ctx, cc, tagIn(set, 100+i), localcluster.FillOptions{Small: 2, TTL: time.Hour, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k...)
	}
	return keys
}

// moveHeldInCatchUp starts a move of set from the first master to the
// fourth that stays in catch-up (a fence that is never met) until cancel,
// and returns once it is there; done gives its summary at the end. tune
// changes the move's options.
func moveHeldInCatchUp(t *testing.T, c *localcluster.Cluster, set *slots.Set, tune ...func(*mover.Options)) (done <-chan mover.Summary, cancel func()) {
	t.Helper()
	inCatchUp := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out := make(chan mover.Summary, 1)
	opts := mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
		Slots: set, Logger: testLogger(t),
		FenceTimeout: time.Nanosecond, MaxAttempts: 1_000_000,
		Progress: func(p mover.Progress) {
			if p.Phase == mover.PhaseCatchUp {
				once.Do(func() { close(inCatchUp) })
			}
		},
	}
	for _, f := range tune {
		f(&opts)
	}
	go func() {
		sum, _ := mover.Run(ctx, opts)
		out <- sum
	}()
	select {
	case <-inCatchUp:
	case <-ctx.Done():
		cancel()
		t.Fatal("the move never reached catch-up")
	}
	return out, cancel
}

// holdFenceUntil is a Hooks.Fence that misses every fence (waits out its
// deadline) until released is closed, then waits for it as the move would:
// the move stays in catch-up, its cutovers failing harmlessly, until the
// test has done what it must do during the catch-up.
func holdFenceUntil(released <-chan struct{}) func(cutover.Fence) cutover.Fence {
	return func(f cutover.Fence) cutover.Fence {
		return func(ctx context.Context, off int64) error {
			select {
			case <-released:
				return f(ctx, off)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// moveDuringCatchUp runs a move with opts and, once it is in catch-up,
// runs during in a goroutine of its own while the move misses every
// fence, so that all that during does reaches the move in catch-up; the
// move then completes. It fails the test if the move never reached
// catch-up, and returns the move's summary and error once during has
// returned.
func moveDuringCatchUp(t *testing.T, ctx context.Context, opts mover.Options, during func()) (mover.Summary, error) {
	t.Helper()
	done := make(chan struct{})
	var started atomic.Bool
	progress := opts.Progress
	opts.Progress = func(p mover.Progress) {
		if progress != nil {
			progress(p)
		}
		if p.Phase == mover.PhaseCatchUp && started.CompareAndSwap(false, true) {
			go func() {
				defer close(done)
				during()
			}()
		}
	}
	opts.Hooks.Fence = holdFenceUntil(done)
	opts.MaxAttempts, opts.FenceTimeout = 1_000_000, 5*time.Millisecond
	sum, err := mover.Run(ctx, opts)
	if !started.Load() {
		t.Fatalf("the move never reached catch-up: %s (%v)", sum.Result, err)
	}
	<-done
	return sum, err
}

// onBothPaths runs test as a subtest on each snapshot path.
func onBothPaths(t *testing.T, test func(t *testing.T, path string)) {
	for _, path := range []string{mover.SnapshotRDB, mover.SnapshotKeys} {
		t.Run(path, func(t *testing.T) { test(t, path) })
	}
}
