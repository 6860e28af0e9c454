// Package mover runs one slot move: preflight, importing, snapshot,
// catch-up, cutover, cleanup, with rollback on failure. The phases and their
// transitions are in phase.go (no I/O); this file does the work each phase
// names and reports events to that machine.
package mover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/apply"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/throttle"
)

// Run moves opts.Slots from opts.Source to opts.Target. It returns the
// summary and, unless the slots moved, an error: an *InputError for a
// refusal (nothing changed), or the cause of a failure, after rollback.
// Cancelling ctx before the source released the slots rolls the move back;
// after, it stops the cleanup (the move ends stuck, for fix).
func Run(ctx context.Context, opts Options) (Summary, error) {
	return Start(ctx, opts).Wait()
}

// Move is a move under way, started by Start.
type Move struct {
	t      *task
	cancel context.CancelFunc
	done   chan struct{}
	sum    Summary
	err    error
}

// Start starts a move (see Run) and returns at once.
func Start(ctx context.Context, opts Options) *Move {
	opts.defaults()
	t := &task{
		opts:  opts,
		m:     NewMachine(opts.MaxAttempts),
		start: time.Now(),
		gate:  throttle.NewGate(),
	}
	t.log = opts.Logger.With("task", opts.TaskID, "slots", opts.Slots.String())
	t.probed = []throttle.Server{
		{Name: "source " + opts.Source.Addr, Client: opts.Source.Client()},
		{Name: "target " + opts.Target.Addr, Client: opts.Target.Client()},
	}
	t.prober = throttle.NewProber(t.gate, opts.Budget, t.probed, t.log)
	t.sum = Summary{TaskID: opts.TaskID, Source: opts.Source.Addr, Target: opts.Target.Addr, Slots: opts.Slots.String()}
	cctx, cancel := context.WithCancel(ctx)
	mv := &Move{t: t, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(mv.done)
		defer cancel()
		mv.err = t.run(ctx, cctx)
		mv.sum = t.finish()
	}()
	return mv
}

// TaskID names the move.
func (mv *Move) TaskID() string { return mv.t.opts.TaskID }

// Cancel asks the move to stop and roll back. Once the source has released
// the slots the move only goes forward: Cancel then changes nothing and
// returns ErrTooLate. A cancel that races the release may still see the
// move complete.
func (mv *Move) Cancel() error {
	mv.t.machineMu.Lock()
	defer mv.t.machineMu.Unlock()
	if mv.t.m.Released() {
		return ErrTooLate
	}
	mv.cancel()
	return nil
}

// Progress is where the move stands now.
func (mv *Move) Progress() Progress { return mv.t.progress() }

// Pause holds the move's copy (reads on the source, writes to the
// target), its cutover and its cleanup until Resume. A cutover under way
// finishes first.
func (mv *Move) Pause() { mv.t.gate.Set(throttle.Paused, true, "by an operator") }

// Resume lets a paused move go on.
func (mv *Move) Resume() { mv.t.gate.Set(throttle.Paused, false, "") }

// SetBudget changes the move's budget.
func (mv *Move) SetBudget(b throttle.Budget) { mv.t.prober.SetBudget(b) }

// HoldCutover keeps the move from cutting over (it keeps the target caught
// up meanwhile) until HoldCutover(false): an operator's window. Once the
// source has released the slots it changes nothing and returns ErrTooLate.
func (mv *Move) HoldCutover(hold bool) error {
	mv.t.machineMu.Lock()
	defer mv.t.machineMu.Unlock()
	if mv.t.m.Released() {
		return ErrTooLate
	}
	mv.t.cutoverHeld.Store(hold)
	mv.t.log.Info("cutover hold", "held", hold)
	return nil
}

// Wait waits for the end of the move and returns what Run returns.
func (mv *Move) Wait() (Summary, error) {
	<-mv.done
	return mv.sum, mv.err
}

// Done is closed when the move is over.
func (mv *Move) Done() <-chan struct{} { return mv.done }

type task struct {
	opts      Options
	log       *slog.Logger
	machineMu sync.Mutex // guards m against Move.Cancel; only run's goroutine changes it
	m         *Machine
	sum       Summary
	start     time.Time
	p         *participants

	snap snapshotPlan
	copy *copying // while the snapshot, catch-up and cutover run

	mu   sync.Mutex // guards link and app for progress reports
	link *stream.Link
	app  *apply.Applier

	stats         copyStats
	lag           atomic.Int64
	clock         sourceClock
	evictedBefore int64  // the target's evicted_keys before the move
	lock          string // the key locking the slots on the target, while held (markOneByOne)

	gate        *throttle.Gate // holds the copy and the cleanup
	prober      *throttle.Prober
	probed      []throttle.Server
	cutoverHeld atomic.Bool // by HoldCutover

	claimer *cutover.Claimer // between the source's release and the claim
}

// copyStats count what the feeder copied, for progress reports and the summary.
type copyStats struct {
	keys, bytes, bigKeys, delta, resynced atomic.Int64
}

// step reports an event to the machine and logs the transition. A refused
// transition fails the move (see Machine.Step), and is logged as the bug
// it is.
func (t *task) step(ev Event, cause error) {
	t.machineMu.Lock()
	tr, err := t.m.Step(ev, cause)
	t.machineMu.Unlock()
	if errors.Is(err, ErrRefusedTransition) {
		t.log.Error("refused transition: the move fails", "event", ev, "from", tr.From, "to", tr.To, "error", err)
	} else if err != nil {
		t.log.Warn("event ignored", "event", ev, "phase", t.m.Phase(), "error", err)
		return
	}
	attrs := []any{"from", tr.From, "to", tr.To, "event", ev}
	t.mu.Lock()
	if t.link != nil {
		attrs = append(attrs, "sync_offset", t.link.Offset)
	}
	if t.app != nil {
		attrs = append(attrs, "applied_offset", t.app.Acked())
	}
	t.mu.Unlock()
	if cause != nil {
		attrs = append(attrs, "cause", cause)
	}
	t.log.Info("transition", attrs...)
	t.report()
}

// run drives the machine: the handler of the current phase does its work
// and reports one event, until the machine says the move is over. It
// returns nil if the slots moved, else the machine's cause. The phases up
// to the cutover run on cancellable (Move.Cancel); the cleanup only on ctx.
func (t *task) run(ctx, cancellable context.Context) error {
	handlers := map[Phase]func(context.Context) (Event, error){
		PhasePreflight: t.preflight,
		PhaseImporting: t.importing,
		PhaseSnapshot:  t.snapshot,
		PhaseCatchUp:   t.catchUp,
		PhaseCutover:   t.cutover,
		PhaseClaim:     t.claim,
		PhaseCleanup:   t.cleanup,
		PhaseRollback:  t.rollBack,
	}
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probing sync.WaitGroup
	probing.Go(func() { t.prober.Run(probeCtx) })
	defer func() {
		if t.claimer != nil { // the machine did not let the claim run: a bug
			t.log.Error("released, never claimed: the source is unpaused and the slots left to fix", "error", t.claimer.Abandon())
		}
		stopProbes()
		probing.Wait()
		for _, s := range t.probed {
			s.Client.Close()
		}
		t.stopCopy()
		if t.p != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			t.unlock(uctx)
			cancel()
			t.p.close()
		}
	}()
	for !t.m.Phase().Terminal() {
		hctx := ctx
		if t.m.Phase().Cancellable() {
			hctx = cancellable
		}
		ev, cause := handlers[t.m.Phase()](hctx)
		if ev == "" {
			ev, cause = t.failure(hctx, cause)
		}
		t.step(ev, cause)
	}
	return t.m.Cause()
}

// failure names the event of a handler's error (Machine.Failure), a
// failure named after an eviction on the target when there was one: an
// evicted key makes later commands fail in odd ways, such as a replay
// whose temporary key went. A cancel is known by the handler's context,
// not by its error, which may be what the cancel did to a connection
// ("use of closed network connection" in the middle of the replica
// handshake).
func (t *task) failure(ctx context.Context, err error) (Event, error) {
	ev := t.m.Failure(err, errors.Is(ctx.Err(), context.Canceled))
	if ev == EvFailed && t.p != nil && !errors.Is(err, ErrTargetEvicted) {
		ectx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if everr := noNewEvictions(ectx, t.p.target, t.evictedBefore); errors.Is(everr, ErrTargetEvicted) {
			err = fmt.Errorf("%w; then: %w", everr, err)
		}
		cancel()
	}
	return ev, err
}

// preflight checks everything the move needs before anything is changed.
func (t *task) preflight(ctx context.Context) (Event, error) {
	p, err := preflight(ctx, t.opts)
	if err != nil {
		return "", err
	}
	t.p = p
	if t.snap, err = planSnapshot(ctx, t.opts, p); err != nil {
		return "", err
	}
	// Evictions answer no error: the target's own count is the only proof
	// that none of the copied keys went.
	if t.evictedBefore, err = evictions(ctx, p.target); err != nil {
		return "", fmt.Errorf("target %s: %w", t.opts.Target.Addr, err)
	}
	// What fix needs to trust the target with a slot it empties after its
	// claim (fix.Held): a move that stops past the claim says it.
	server, err := info.Read(ctx, p.target, "server")
	if err != nil {
		return "", fmt.Errorf("target %s: %w", t.opts.Target.Addr, err)
	}
	t.sum.TargetID, t.sum.TargetRunID = p.targetID, server["run_id"]
	return EvPreflightPassed, nil
}

func (t *task) importing(ctx context.Context) (Event, error) {
	if err := t.setImporting(ctx); err != nil {
		return "", err
	}
	return EvImportingSet, nil
}

// cleanup removes the source's copies of the moved keys, once the target's
// replicas hold them.
func (t *task) cleanup(ctx context.Context) (Event, error) {
	t.stopCopy()
	t.sum.SwitchMS = time.Since(t.start).Milliseconds()
	if n, err := cutover.WaitReplicas(ctx, t.p.target, t.opts.ReplicaWait); err != nil {
		return "", fmt.Errorf("cleanup postponed, the source keeps its copies (slotmover fix removes them later): %w", err)
	} else if n > 0 {
		t.log.Info("the target's replicas have every moved key", "replicas", n, "waited_ms", time.Since(t.start).Milliseconds()-t.sum.SwitchMS)
	}
	cleanupStart := time.Now()
	pace := t.opts.Cleanup
	pace.Gate = t.gate
	removed, err := cutover.Cleanup(ctx, t.p.source, t.p.targetID, t.opts.Slots, pace)
	t.sum.CleanupMS = time.Since(cleanupStart).Milliseconds()
	t.sum.OrphansRemoved = removed
	switch {
	case errors.Is(err, cutover.ErrNowReplica):
		t.log.Warn("source turned into a replica after losing its last slots; it resyncs from its new master and keeps no orphans", "removed", removed)
	case err != nil:
		return "", fmt.Errorf("cleanup of orphaned keys on the source: %w", err)
	}
	return EvCleanupDone, nil
}

// rollBack undoes the target side, even when ctx was cancelled.
func (t *task) rollBack(context.Context) (Event, error) {
	t.stopCopy()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	removed, err := t.rollback(ctx)
	if err != nil {
		return EvFailed, err
	}
	t.log.Info("rolled back: target purged and its slots stable", "keys_removed", removed)
	return EvRolledBack, nil
}

// rollback removes the move's keys from the target and clears its marks.
// The applier's connection is killed on the target first (apply.Applier.Kill):
// commands it sent with replies off may still wait in the target's buffers
// after we closed it, and would otherwise run after the purge and bring
// keys back. The target's own count of keys in the slots then proves it
// empty.
func (t *task) rollback(ctx context.Context) (int64, error) {
	t.mu.Lock()
	app := t.app
	t.mu.Unlock()
	if app != nil {
		if err := app.Kill(ctx, t.p.target); err != nil {
			return 0, fmt.Errorf("end the move's writing connection: %w", err)
		}
	}
	removed, err := cutover.Rollback(ctx, t.p.target, t.opts.Slots, t.opts.Cleanup)
	if err != nil {
		return removed, err
	}
	t.lock = "" // removed with the copies
	counts, err := cluster.CountKeys(ctx, t.p.target, t.opts.Slots.Slots())
	if err != nil {
		return removed, err
	}
	var left int64
	for _, n := range counts {
		left += n
	}
	if left > 0 {
		return removed, fmt.Errorf("target %s still holds %d keys of slots %s after the rollback", t.opts.Target.Addr, left, t.opts.Slots)
	}
	return removed, nil
}

// copying is what the snapshot, catch-up and cutover phases share: the
// replica link, the applier, and the feeder between them, which runs from
// the start of the snapshot until stopCopy.
type copying struct {
	link     *stream.Link
	f        *feeder
	snapDone chan struct{}
	feedErr  chan error
	stop     context.CancelFunc
	wg       sync.WaitGroup
	// catchupStart is when the snapshot was applied; lagTick paces the
	// looks at the lag (a full tick between them judges its trend).
	catchupStart time.Time
	clockFrom    time.Time     // what MaxCatchUp counts from (see catchUpTime)
	heldBefore   time.Duration // the gate's time held by then
	lagTick      *time.Ticker
	progressTick *time.Ticker // progress reports and eviction checks
}

// startCopy opens the replica link and the applier and starts the feeder.
func (t *task) startCopy(ctx context.Context) error {
	targetVersion, err := targetRDBVersion(ctx, t.p.target, t.opts.Slots.Slots()[0])
	if err != nil {
		return err
	}
	if err := apply.GuardScript.Load(ctx, t.p.target).Err(); err != nil {
		return fmt.Errorf("load the expiry guard on the target: %w", err)
	}
	keyTable, err := stream.LoadKeyTable(ctx, t.p.source)
	if err != nil {
		return fmt.Errorf("load the source's command table: %w", err)
	}
	if err := t.snap.checkVersions(t.opts.Snapshot == SnapshotKeys, targetVersion); err != nil {
		return err
	}
	link, err := t.openLink(ctx)
	if err != nil {
		return err
	}
	t.sum.Snapshot, t.sum.SnapshotReason, t.sum.Prediction = t.snap.path, t.snap.reason, t.snap.prediction
	t.log.Info("snapshot path", "path", t.snap.path, "reason", t.snap.reason)
	app, err := apply.Dial(ctx, t.opts.Target, t.opts.Window, -1)
	if err != nil {
		link.Close()
		return err
	}
	t.mu.Lock()
	t.link, t.app = link, app
	t.mu.Unlock()

	feedCtx, stop := context.WithCancel(ctx)
	app.SetGate(feedCtx, t.gate)
	c := &copying{link: link, snapDone: make(chan struct{}), feedErr: make(chan error, 1), stop: stop,
		lagTick: time.NewTicker(20 * time.Millisecond), progressTick: time.NewTicker(500 * time.Millisecond)}
	c.f = &feeder{
		opts: &t.opts, log: t.log, stats: &t.stats, clock: &t.clock,
		link: link, app: app, keyTable: keyTable, targetVersion: targetVersion,
		source: t.p.source, reads: newReads(t.opts.TaskID), expiring: newExpiring(),
	}
	if t.snap.path == SnapshotKeys {
		c.f.keys = newKeyLister(t.snap, &t.opts, t.p.source, c.f.reads, t.gate, t.log)
	} else {
		c.f.rdb = &rdbCopier{opts: &t.opts, log: t.log, sourceID: t.p.sourceID, stats: &t.stats, app: app, target: t.p.target,
			targetVersion: targetVersion, expiring: c.f.expiring, valueBuf: make([]byte, 0, 32)}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.feedErr <- c.f.run(feedCtx, c.snapDone)
	}()
	t.copy = c
	return nil
}

// openLink opens the replica link the snapshot path needs. The keys path
// continues the source's history from its current offset; should that
// point leave the backlog before the link attaches (a burst of writes),
// auto takes the RDB path instead.
func (t *task) openLink(ctx context.Context) (*stream.Link, error) {
	cfg := stream.Config{
		Conn: t.opts.Source, SpoolDir: t.opts.SpoolDir, MaxSpool: max(t.opts.MaxSpool, 0), KeepSourceConfig: t.opts.KeepSourceConfig, Logger: t.log,
	}
	if t.snap.path == SnapshotKeys && t.snap.startBacklog {
		if _, _, err := stream.StartBacklog(ctx, cfg); err != nil {
			if t.opts.Snapshot == SnapshotKeys {
				return nil, fmt.Errorf("--snapshot keys: %w", err)
			}
			t.log.Warn("the keys path needs a backlog the source cannot start without a fork: taking the RDB path", "error", err)
			t.snap = snapshotPlan{path: SnapshotRDB, reason: err.Error()}
		} else {
			t.snap.reason += "; the source kept no backlog, and started one without a fork"
		}
	}
	if t.snap.path == SnapshotKeys {
		repl, err := info.Read(ctx, t.p.source, "replication")
		if err != nil {
			return nil, err
		}
		if cfg.From, err = stream.ContinuePoint(repl); err != nil {
			return nil, fmt.Errorf("source %s: %w", t.opts.Source.Addr, err)
		}
		link, err := stream.Open(ctx, cfg)
		if !errors.Is(err, stream.ErrNoContinue) || t.opts.Snapshot == SnapshotKeys {
			return link, err
		}
		t.snap = snapshotPlan{path: SnapshotRDB, reason: err.Error()}
		cfg.From = nil
	}
	return stream.Open(ctx, cfg)
}

// stopCopy stops the feeder and closes the link and the applier; a no-op
// when they are not running.
func (t *task) stopCopy() {
	c := t.copy
	if c == nil {
		return
	}
	t.copy = nil
	c.stop()
	c.link.Close()
	c.f.app.Close()
	c.wg.Wait()
	c.lagTick.Stop()
	c.progressTick.Stop()
	st := c.link.Stats()
	t.sum.RDBBytes, t.sum.SpoolPeakBytes = st.RDBBytes, st.SpoolPeak
}

// snapshot copies the keys of the RDB; the stream is spooled meanwhile.
func (t *task) snapshot(ctx context.Context) (Event, error) {
	if err := t.startCopy(ctx); err != nil {
		return "", err
	}
	c := t.copy
	snapStart := time.Now()
	t.lag.Store(-1)
	for {
		select {
		case <-c.snapDone:
			t.sum.SnapshotMS = time.Since(snapStart).Milliseconds()
			c.catchupStart = time.Now()
			return EvSnapshotApplied, nil
		default:
		}
		if _, err := t.copyWait(ctx, c.snapDone); err != nil {
			return "", err
		}
		// The source's clock is sampled all along: writes made during the
		// snapshot are applied after it.
		if _, _, err := t.sourceOffset(ctx); err != nil {
			return "", err
		}
	}
}

// copyWait waits for the next tick of the lag (ticked), snap to close
// or a progress report (which checks the target's evictions), and returns
// the feeder's error or ctx's if either comes first.
func (t *task) copyWait(ctx context.Context, snap <-chan struct{}) (ticked bool, err error) {
	c := t.copy
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case err := <-c.feedErr:
		if err == nil {
			err = errors.New("replication stream ended")
		}
		return false, err
	case <-c.progressTick.C:
		t.report()
		return false, noNewEvictions(ctx, t.p.target, t.evictedBefore)
	case <-snap:
		return false, nil
	case <-c.lagTick.C:
		return true, nil
	}
}

// lagFloor is a lag small enough to drain within a millisecond or two of
// the pause, whatever the trend.
const lagFloor = 8 << 10

// caughtUp decides whether the target trails the source little enough for
// a cutover: below maxLag, and either tiny or no longer shrinking since the
// previous look (prev; -1 for none). Every byte of lag is drained inside
// the pause: cutting over while catch-up still gains ground (just after
// the snapshot, typically) would make writers wait for it.
func caughtUp(lag, prev, maxLag int64) bool {
	return lag <= maxLag && (lag <= lagFloor || (prev >= 0 && lag >= prev))
}

// catchUp applies the stream until the target has caught up (see
// caughtUp) and no resync is pending. Right after the snapshot the lag is
// looked at at once (it is often low already); after a missed fence, only
// after a full tick.
func (t *task) catchUp(ctx context.Context) (Event, error) {
	c := t.copy
	look := t.m.Attempts() == 0
	for {
		if !look {
			// A full tick before the next look, which judges the trend.
			c.lagTick.Reset(20 * time.Millisecond)
			if err := t.waitTick(ctx); err != nil {
				return "", err
			}
		}
		look = false
		if waited := t.catchUpTime(c); waited > t.opts.MaxCatchUp {
			return "", fmt.Errorf("no cutover after %s of catch-up: the target trails by %d bytes and %d keys wait for a resync (multi-key writes on the moving slots keep coming?)",
				waited.Round(time.Second), t.lag.Load(), c.f.reads.count.Load())
		}
		off, replid, err := t.sourceOffset(ctx)
		if err != nil {
			return "", err
		}
		if replid != c.link.ReplID {
			return "", fmt.Errorf("the source's replication ID changed from %s to %s (restart or failover): the stream is no longer the source's history", c.link.ReplID, replid)
		}
		lag := off - c.f.app.Acked()
		prev := t.lag.Swap(lag)
		if caughtUp(lag, prev, t.opts.MaxLag) && c.f.reads.count.Load() == 0 && c.f.app.Gone() == 0 && !t.holdsCutover() {
			return EvLagLow, nil
		}
	}
}

// holdsCutover says whether the cutover must wait: held, or the move
// paused (its lag may be low only because no write came).
func (t *task) holdsCutover() bool {
	return t.cutoverHeld.Load() || t.gate.State().IsPaused
}

// catchUpTime is the catch-up's time as MaxCatchUp counts it: not the
// time the move was held, and from the last held cutover's release on.
func (t *task) catchUpTime(c *copying) time.Duration {
	st := t.gate.State()
	held := st.Throttled + st.Paused
	if c.clockFrom.IsZero() || t.cutoverHeld.Load() {
		c.clockFrom, c.heldBefore = time.Now(), held
	}
	return time.Since(c.clockFrom) - (held - c.heldBefore)
}

// waitTick waits for the next tick of the lag, reporting progress meanwhile.
func (t *task) waitTick(ctx context.Context) error {
	for {
		ticked, err := t.copyWait(ctx, nil)
		if ticked || err != nil {
			return err
		}
	}
}

// fence waits until the target has applied the stream up to off, and
// checks what else must hold before the source lets go of its copies.
func (t *task) fence(f *feeder) cutover.Fence {
	fence := func(ctx context.Context, off int64) error {
		if err := f.app.Wait(ctx, off); err != nil {
			return err
		}
		// The last look before the source lets go of its copies.
		if err := noNewEvictions(ctx, t.p.target, t.evictedBefore); err != nil {
			return err
		}
		// Keys waiting for a resync are not on the target yet; their
		// marker cannot reach the paused source. Nor can a resync of
		// keys the target expired before the stream reached them.
		if n := f.reads.count.Load() + int64(f.app.Gone()); n > 0 {
			return fmt.Errorf("%w: %d keys wait for a resync", cutover.ErrFenceMissed, n)
		}
		return nil
	}
	if h := t.opts.Hooks.Fence; h != nil {
		return h(fence)
	}
	return fence
}

// cutover makes one attempt at the switch, up to the source's release
// (cutover.Release).
func (t *task) cutover(ctx context.Context) (Event, error) {
	f := t.copy.f
	t.gate.Bypass(true)
	defer t.gate.Bypass(false)
	c, res, err := cutover.Release(ctx, cutover.Nodes{
		Source: t.p.source, Target: t.p.target, SourceID: t.p.sourceID, TargetID: t.p.targetID, Others: t.p.others,
	}, cutover.Plan{Slots: t.opts.Slots, PauseBudget: t.opts.PauseBudget, FenceTimeout: t.opts.FenceTimeout,
		SetSlotBlocks: t.p.setSlotBlocks, AfterRelease: t.opts.Hooks.AfterRelease, BeforeClaim: t.unlock},
		t.fence(f),
		f.freeze)
	if c != nil {
		t.claimer = c
		return EvSourceReleased, nil
	}
	t.attempted(res, err)
	switch {
	case res.Released:
		return EvSourceReleased, err // half-way: stuck
	case errors.Is(err, cutover.ErrFenceMissed):
		return EvFenceMissed, err
	default:
		return "", err
	}
}

// claim finishes the attempt the cutover released: the target claims the
// slots (cutover.Claimer).
func (t *task) claim(ctx context.Context) (Event, error) {
	c := t.claimer
	t.claimer = nil
	res, err := c.Claim(ctx)
	t.attempted(res, err)
	if err != nil {
		return "", err
	}
	return EvSwitched, nil
}

// attempted records how a cutover attempt went.
func (t *task) attempted(res cutover.Result, err error) {
	if h := t.opts.Hooks.OnCutover; h != nil {
		h(res, err)
	}
	t.sum.CatchupMS = time.Since(t.copy.catchupStart).Milliseconds()
	t.sum.CutoverAttempts = t.m.Attempts()
	t.sum.PauseMS = float64(res.Pause.Microseconds()) / 1000
	t.sum.NoOwnerMS = float64(res.NoOwner.Microseconds()) / 1000
	t.sum.FenceOffset, t.sum.ReleaseOffset = res.Fence, res.ReleaseOffset
	t.sum.ReleaseRefusals += res.Refusals
	t.log.Info("cutover attempt", "attempt", t.m.Attempts(), "lag_before", t.lag.Load(), "fence", res.Fence, "release_offset", res.ReleaseOffset, "refusals", res.Refusals,
		"pause", res.Pause, "fence_wait", res.FenceWait, "release", res.Release, "catch_up", res.CatchUp, "claim", res.Claim, "no_owner", res.NoOwner, "rest", res.Rest(), "released", res.Released, "error", err)
	if res.NotTold != nil {
		t.log.Warn("masters not told of the new owner; they learn it by gossip", "error", res.NotTold)
	}
}

func (t *task) report() {
	if t.opts.Progress != nil {
		t.opts.Progress(t.progress())
	}
}

// progress is where the move stands now.
func (t *task) progress() Progress {
	t.machineMu.Lock()
	phase := t.m.Phase()
	t.machineMu.Unlock()
	p := Progress{
		TaskID: t.opts.TaskID, Phase: phase,
		KeysCopied: t.stats.keys.Load(), BytesCopied: t.stats.bytes.Load(), BigKeys: t.stats.bigKeys.Load(),
		DeltaCommands: t.stats.delta.Load(), Lag: t.lag.Load(), Elapsed: time.Since(t.start),
		Budget: t.prober.Budget().String(), CutoverHeld: t.cutoverHeld.Load(),
	}
	st := t.gate.State()
	p.Holding, p.Throttled, p.Paused = st.Holding, st.Throttled, st.Paused
	t.mu.Lock()
	if t.link != nil {
		st := t.link.Stats()
		p.RDBBytes, p.SpoolBytes = st.RDBBytes, st.SpoolBytes
	}
	t.mu.Unlock()
	return p
}

// finish fills the summary from the machine's final state.
func (t *task) finish() Summary {
	s := &t.sum
	s.Phase = t.m.Phase()
	s.Result = t.m.Result()
	s.CutoverAttempts = t.m.Attempts()
	s.KeysResynced = t.stats.resynced.Load()
	s.KeysCopied, s.BytesCopied, s.BigKeys, s.DeltaCommands = t.stats.keys.Load(), t.stats.bytes.Load(), t.stats.bigKeys.Load(), t.stats.delta.Load()
	s.TotalMS = time.Since(t.start).Milliseconds()
	st := t.gate.State()
	s.ThrottledMS, s.PausedMS, s.Budget = st.Throttled.Milliseconds(), st.Paused.Milliseconds(), t.prober.Budget().String()
	if err := t.m.Cause(); err != nil {
		s.Error = err.Error()
	}
	if s.Result == ResultStuck {
		s.Repair = t.repair()
	}
	t.log.Info("move finished", "result", s.Result, "keys", s.KeysCopied, "pause_ms", s.PauseMS, "total_ms", s.TotalMS, "throttled_ms", s.ThrottledMS, "spool_peak_bytes", s.SpoolPeakBytes, "error", s.Error)
	return *s
}

// repair says what is left after a failure the task could not undo, and the
// commands that finish the job: what slotmover fix would do on these
// servers, which the first line runs.
func (t *task) repair() []string {
	src, tgt := hostPort(t.opts.Source.Addr), hostPort(t.opts.Target.Addr)
	fixCmd := fmt.Sprintf("slotmover fix --cluster %s --slots %s", t.opts.Target.Addr, t.opts.Slots)
	if t.m.Released() && t.sum.TargetRunID != "" {
		fixCmd += fmt.Sprintf(" --held-by %s:%s", t.sum.TargetID, t.sum.TargetRunID)
	}
	out := []string{fixCmd + "   # reads the cluster's state, finishes or undoes this move (--dry-run: only show); or by hand:"}
	forEach := func(host, cmd string) {
		for _, r := range t.opts.Slots.Ranges() {
			out = append(out, fmt.Sprintf("for s in $(seq %d %d); do redis-cli %s %s; done", r.Start, r.End, host, cmd))
		}
	}
	switch {
	case !t.m.Released():
		out = append(out, "The source still owns the slots and was never changed. The target may still hold copied keys and IMPORTING marks:")
		// Not redis-cli --cluster fix: it counts the target's copies as a
		// second owner's keys and may migrate them back over newer data.
		out = append(out, "Remove the keys of the slots on the target, then:")
		forEach(tgt, "CLUSTER SETSLOT $s STABLE")
	case !t.m.Switched() && t.p.setSlotBlocks:
		// A guarded release (Valkey 8): the target had every write the
		// source took before it let go, and takes the slots over by gossip
		// anyway; a give-back would race that, and the loser deletes its
		// keys. So forward, as fix does.
		out = append(out, "The source released the slots once the target had every write (a guarded release); the target takes them over. Claim them on the target, then tell the source:")
		forEach(tgt, "CLUSTER SETSLOT $s NODE "+t.p.targetID)
		forEach(src, "CLUSTER SETSLOT $s NODE "+t.p.targetID)
		t.cleanupHint(&out, forEach, src)
	case !t.m.Switched():
		// Giving back is lossless (the source kept every key as of its
		// release); claiming is not, unless the target reached the release
		// offset, which nothing left behind proves.
		out = append(out, "The source released the slots but the target may not have claimed them. Give them back to the source, which kept every key as of its release:")
		forEach(src, "CLUSTER SETSLOT $s NODE "+t.p.sourceID)
		out = append(out, "Then, unless the target owns them after all, remove the keys of the slots on the target, and:")
		forEach(tgt, "CLUSTER SETSLOT $s STABLE")
	default:
		out = append(out, "The target owns the slots.")
		t.cleanupHint(&out, forEach, src)
	}
	return out
}

// cleanupHint tells how to remove the source's orphaned keys by hand, as
// cutover.Cleanup does: the slots marked importing from the source itself,
// never from the target, whom Valkey 8 would then let the source take the
// slots back from (and the target would delete its keys of them).
func (t *task) cleanupHint(out *[]string, forEach func(host, cmd string), src string) {
	*out = append(*out, "The source keeps orphaned keys of them; remove them, paced:")
	forEach(src, "CLUSTER SETSLOT $s IMPORTING "+t.p.sourceID)
	*out = append(*out, fmt.Sprintf("# then, per slot: redis-cli %s CLUSTER GETKEYSINSLOT <s> 1000, and ASKING + UNLINK of those keys, until none are left", src))
	forEach(src, "CLUSTER SETSLOT $s STABLE")
}

func hostPort(addr string) string {
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return "-h " + addr
	}
	return "-h " + host + " -p " + port
}

// sourceOffset reads master_repl_offset and master_replid, and the
// source's TIME right after them, which it records on the task's clock of
// the source (see absoluteTTL).
func (t *task) sourceOffset(ctx context.Context) (int64, string, error) {
	c := t.p.source
	var infoCmd *redis.StringCmd
	var timeCmd *redis.TimeCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		infoCmd = p.Info(ctx, "replication")
		timeCmd = p.Time(ctx)
		return nil
	})
	if err != nil {
		return 0, "", fmt.Errorf("INFO replication and TIME on source %s: %w", c.Options().Addr, err)
	}
	f := info.Parse(infoCmd.Val())
	off, err := f.Int("master_repl_offset")
	if err != nil || f["master_replid"] == "" {
		return 0, "", fmt.Errorf("INFO replication on source %s: no offset or replid", c.Options().Addr)
	}
	t.clock.add(off, timeCmd.Val().UnixMilli(), time.Now())
	return off, f["master_replid"], nil
}
