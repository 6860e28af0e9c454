// Package soak proves that slot moves lose no write: it runs a checked
// workload on a Redis Cluster through a go-redis cluster client while
// moving slots between masters, then reads every key back.
//
// Every key is owned by one worker goroutine, so each worker keeps an exact
// model of what the cluster may hold given the replies it got (see
// model.go). An operation that fails without a reply has an unknown
// outcome: the model widens to "either" instead of failing. Reads during
// the run and a final pass over every key compare the cluster with the
// model; the verdict counts keys with lost writes, wrong values and keys
// that came back after they must have expired.
//
// Moves go through a Mover; the checker does not depend on how they happen.
package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// Pick modes for the source and target of moves.
const (
	PickRandom     = "random"      // a random master with slots, a random other master
	PickRoundRobin = "round-robin" // masters with slots in turn, each to the next master
	// PickSameSource is PickRandom, except that while a move is in flight
	// the next one takes its source too: moves from one source overlap,
	// and their write pauses with them.
	PickSameSource = "same-source"
)

// Slot pick modes.
const (
	SlotsMixed  = "mixed"  // runs and random sets in turn
	SlotsRun    = "run"    // a contiguous run
	SlotsRandom = "random" // slots at random among the source's
)

// Config is one soak run. Zero values take the defaults of defaults().
type Config struct {
	Addr               string // any node of the cluster
	Username, Password string

	Duration time.Duration // how long the workload runs
	Rate     int           // operations a second over all workers; 0 for as fast as they go
	MaxOps   int64         // bound on operations (0: derived from the rate and duration)

	Moves         int           // moves to start, spread over the duration (0: every MoveEvery)
	MoveEvery     time.Duration // interval between move starts
	SlotsPerMove  int
	SlotPick      string
	Pick          string
	ParallelMoves int
	// MoveGrace bounds how long moves still running at the end of Duration
	// may take (the load goes on meanwhile); past it they are cancelled.
	MoveGrace time.Duration

	Keys      int // tracked keys (units of a primary key and a counter)
	BigKeys   int // units whose primary key is a list or hash that keeps growing
	Workers   int
	ReadRatio int // reads per write
	// HotShare is the share of operations aimed at keys of the slots being
	// moved, half of them writes (0 for the default 0.2, negative for none).
	HotShare  float64
	OpTimeout time.Duration
	Seed      int64 // 0 for a random one

	// Snapshot is the moves' snapshot path (mover.Options.Snapshot), or
	// SnapshotAlternate. Only for the default Mover.
	Snapshot string

	Logger *slog.Logger
	// Mover carries out the moves; nil for LibraryMover with the settings
	// here.
	Mover Mover
}

// SnapshotAlternate takes the keys path where it can run (auto) for odd
// moves and the RDB's for even ones, so that one soak proves both. (The
// soak's big keys are growing lists, which the keys path refuses.)
const SnapshotAlternate = "alternate"

// ConfigError is a configuration or cluster that a soak cannot run on.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func (c *Config) normalize() error {
	switch {
	case c.Addr == "":
		return errors.New("the cluster address is required")
	case c.Duration <= 0 || c.Duration > 7*24*time.Hour:
		return fmt.Errorf("duration %s: want more than 0 and at most a week", c.Duration)
	case c.Moves < 0 || c.MoveEvery < 0 || c.Rate < 0 || c.Keys < 0 || c.SlotsPerMove < 0 || c.ParallelMoves < 0 || c.MaxOps < 0:
		return errors.New("counts, rates and intervals cannot be negative")
	case c.Moves > 0 && c.MoveEvery > 0:
		return errors.New("give either the number of moves or the interval between them, not both")
	case c.SlotsPerMove > slots.Count:
		return fmt.Errorf("slots per move %d: there are only %d slots", c.SlotsPerMove, slots.Count)
	}
	if c.Pick == "" {
		c.Pick = PickRandom
	}
	if c.Pick != PickRandom && c.Pick != PickRoundRobin && c.Pick != PickSameSource {
		return fmt.Errorf("pick %q: want %s, %s or %s", c.Pick, PickRandom, PickRoundRobin, PickSameSource)
	}
	switch c.Snapshot {
	case "", mover.SnapshotAuto, mover.SnapshotRDB, mover.SnapshotKeys, SnapshotAlternate:
	default:
		return fmt.Errorf("snapshot %q: want auto, rdb, keys or %s", c.Snapshot, SnapshotAlternate)
	}
	if c.SlotPick == "" {
		c.SlotPick = SlotsMixed
	}
	if c.SlotPick != SlotsMixed && c.SlotPick != SlotsRun && c.SlotPick != SlotsRandom {
		return fmt.Errorf("slot pick %q: want %s, %s or %s", c.SlotPick, SlotsMixed, SlotsRun, SlotsRandom)
	}
	if c.Moves == 0 && c.MoveEvery == 0 {
		c.MoveEvery = 5 * time.Second
	}
	if c.Moves > 0 {
		c.MoveEvery = c.Duration / time.Duration(c.Moves+1)
	}
	if c.SlotsPerMove == 0 {
		c.SlotsPerMove = 64
	}
	if c.ParallelMoves == 0 {
		c.ParallelMoves = 1
	}
	if c.MoveGrace == 0 {
		c.MoveGrace = 2 * time.Minute
	}
	if c.Keys == 0 {
		c.Keys = 20000
	}
	if c.BigKeys == 0 {
		c.BigKeys = 4
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.ReadRatio <= 0 {
		c.ReadRatio = 10
	}
	switch {
	case c.HotShare == 0:
		c.HotShare = 0.2
	case c.HotShare > 1:
		return fmt.Errorf("hot share %g: want at most 1", c.HotShare)
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = rand.Int64N(1<<53) + 1 // printed, so a run can be repeated
	}
	if c.MaxOps == 0 {
		// A bound even for an unthrottled run; with a rate, room for the grace.
		c.MaxOps = 50_000_000
		if c.Rate > 0 {
			c.MaxOps = int64(float64(c.Rate)*(c.Duration+c.MoveGrace).Seconds()*1.2) + 1000
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Mover == nil {
		base := mover.Options{
			Source: mover.Conn{Username: c.Username, Password: c.Password},
			Target: mover.Conn{Username: c.Username, Password: c.Password},
			Logger: c.Logger, Snapshot: c.Snapshot,
		}
		c.Mover = LibraryMover(base)
		if c.Snapshot == SnapshotAlternate {
			base.Snapshot = mover.SnapshotAuto
			keys := LibraryMover(base)
			base.Snapshot = mover.SnapshotRDB
			rdb := LibraryMover(base)
			c.Mover = MoverFunc(func(ctx context.Context, m Move) Outcome {
				if m.Seq%2 == 1 {
					return keys.Move(ctx, m)
				}
				return rdb.Move(ctx, m)
			})
		}
	}
	return nil
}

// soak is one run's shared state; workers own their own.
type soak struct {
	cfg   *Config
	log   *slog.Logger
	t0    time.Time
	disc  *discovery
	dmu   sync.Mutex // guards disc, which the move lanes share
	sched *scheduler

	mu    sync.Mutex // guards moves
	moves []moveRun
}

// moveRun is one move as the soak saw it.
type moveRun struct {
	move       Move
	out        Outcome
	class      string
	start, end time.Time
}

// verifyTimeout bounds the final pass.
const verifyTimeout = 10 * time.Minute

// Run runs the soak and returns its report; check Report.Pass. An error
// means the soak could not run (a *ConfigError for bad input).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.normalize(); err != nil {
		return nil, &ConfigError{Err: err}
	}
	s := &soak{cfg: &cfg, log: cfg.Logger, disc: newDiscovery(&cfg)}
	top, err := s.disc.load(ctx)
	if err != nil {
		// Like an unreachable node for `slotmover move`: the input is wrong.
		return nil, &ConfigError{Err: fmt.Errorf("read the cluster from %s: %w", cfg.Addr, err)}
	}
	if err := usable(top); err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("cluster at %s: %w", cfg.Addr, err)}
	}
	startAddrs := nodeAddrs(top)
	before, err := errorStats(ctx, &cfg, startAddrs)
	if err != nil {
		s.log.Warn("soak: error stats incomplete at the start", "error", err)
	}

	// Key names carry a run ID, so runs on one cluster never see each other's keys.
	runID := fmt.Sprintf("%08x", rand.Uint32())
	units := keySpace(runID, cfg.Keys, cfg.BigKeys)
	var bigSlots []uint16
	for _, u := range units[:min(cfg.BigKeys, len(units))] {
		bigSlots = append(bigSlots, slots.ForString(u.prim.name))
	}
	s.sched = newScheduler(&cfg, bigSlots)
	rd := &redirects{}
	cc := newClusterClient(&cfg, rd)
	defer cc.Close()
	if err := cc.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("cluster client through %s: %w", cfg.Addr, err)
	}
	s.log.Info("soak: starting", "cluster", cfg.Addr, "duration", cfg.Duration, "rate", cfg.Rate, "keys", 2*len(units),
		"workers", cfg.Workers, "move_every", cfg.MoveEvery, "moves", cfg.Moves, "slots_per_move", cfg.SlotsPerMove,
		"parallel_moves", cfg.ParallelMoves, "seed", cfg.Seed, "run", runID)

	// Every key gets a value first, each worker writing its own.
	fillStart := time.Now()
	workers := make([]*worker, cfg.Workers)
	var fill sync.WaitGroup
	for i := range workers {
		wk := newWorker(i, &cfg, cc, units, fillStart)
		workers[i] = wk
		fill.Add(1)
		go func() {
			defer fill.Done()
			wk.fill(ctx)
		}()
	}
	fill.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	s.log.Info("soak: keys written once", "keys", 2*len(units), "took", time.Since(fillStart).Round(time.Millisecond))

	s.t0 = time.Now()
	end := s.t0.Add(cfg.Duration)
	stopLoad := make(chan struct{})
	verifyGo := make(chan struct{})
	verifyCtx, cancelVerify := context.WithTimeout(context.WithoutCancel(ctx), cfg.Duration+cfg.MoveGrace+verifyTimeout+time.Minute)
	defer cancelVerify()
	// The workers' hard stop, should the orchestration below not stop them.
	loadDeadline := end.Add(cfg.MoveGrace + 30*time.Second)
	perRate := float64(cfg.Rate) / float64(cfg.Workers)
	perMax := cfg.MaxOps/int64(cfg.Workers) + 1

	var wg sync.WaitGroup
	for _, wk := range workers {
		wk.t0 = s.t0
		wk.moving = s.sched.movingSlots
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk.load(ctx, stopLoad, perRate, perMax, loadDeadline)
			select {
			case <-verifyGo:
			case <-verifyCtx.Done():
				return
			}
			wk.verify(verifyCtx)
		}()
	}

	// Moves: a scheduler hands out starts; lanes carry them out.
	moveCtx, cancelMoves := context.WithDeadline(ctx, end.Add(cfg.MoveGrace))
	defer cancelMoves()
	starts := make(chan int)
	var lanes sync.WaitGroup
	lanes.Add(1)
	go func() {
		defer lanes.Done()
		s.schedule(moveCtx, starts, end)
	}()
	for range cfg.ParallelMoves {
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			for seq := range starts {
				s.oneMove(moveCtx, seq)
			}
		}()
	}
	lanes.Wait()
	cancelMoves()
	// The load runs its full duration even when the moves are done early.
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(end)):
	}
	loadEnd := time.Now()
	close(stopLoad)
	s.log.Info("soak: load stopped; verifying every key", "load", loadEnd.Sub(s.t0).Round(time.Millisecond))
	close(verifyGo)
	wg.Wait()
	verifyEnd := time.Now()

	s.dmu.Lock()
	endTop, err := s.disc.load(verifyCtx)
	s.dmu.Unlock()
	endAddrs := startAddrs
	if err == nil {
		endAddrs = union(startAddrs, nodeAddrs(endTop))
	}
	after, err := errorStats(verifyCtx, &cfg, endAddrs)
	if err != nil {
		s.log.Warn("soak: error stats incomplete at the end", "error", err)
	}
	r := s.report(workers, rd, before, after, loadEnd, verifyEnd, runID)
	return r, nil
}

// usable checks the cluster can take a soak: two masters, every slot served.
func usable(top *cluster.Topology) error {
	if n := len(usableMasters(top)); n < 2 {
		return fmt.Errorf("%d usable masters: moves need at least 2", n)
	}
	for x := 0; x < slots.Count; x++ {
		if top.Owner(uint16(x)) == nil {
			return fmt.Errorf("slot %d has no owner: the cluster does not cover every slot", x)
		}
	}
	return nil
}

func nodeAddrs(top *cluster.Topology) []string {
	var out []string
	for _, n := range top.Nodes {
		if n.Addr != "" && n.Addr[0] != ':' && !n.Is("noaddr") {
			out = append(out, n.Addr)
		}
	}
	sort.Strings(out)
	return out
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range append(append([]string{}, a...), b...) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// schedule hands out move sequence numbers, one every MoveEvery (or as soon
// as a lane is free after that), until the end of the load or the number
// of moves asked for; then it closes starts. With PickSameSource it hands
// them out ParallelMoves at a time, so that moves from one source overlap.
func (s *soak) schedule(ctx context.Context, starts chan<- int, end time.Time) {
	defer close(starts)
	burst := 1
	if s.cfg.Pick == PickSameSource {
		burst = s.cfg.ParallelMoves
	}
	next := s.t0.Add(s.cfg.MoveEvery)
	for seq := 1; s.cfg.Moves == 0 || seq <= s.cfg.Moves; seq++ {
		if next.After(end) {
			return
		}
		if (seq-1)%burst == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(end)):
			return
		case starts <- seq:
		}
		if seq%burst != 0 {
			continue
		}
		next = next.Add(s.cfg.MoveEvery)
		if now := time.Now(); next.Before(now) {
			next = now
		}
	}
}

// oneMove plans and runs one move; a refusal (say the view of the cluster
// was stale) is recorded and another plan is tried a few times.
func (s *soak) oneMove(ctx context.Context, seq int) {
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
		s.dmu.Lock()
		top, err := s.disc.load(ctx)
		s.dmu.Unlock()
		if err != nil {
			s.log.Warn("soak: cannot read the cluster to plan a move", "move", seq, "error", err)
			continue
		}
		m, ok := s.sched.plan(top, seq)
		if !ok {
			s.log.Warn("soak: no move possible now", "move", seq)
			continue
		}
		s.log.Info("soak: move", "move", seq, "source", m.SourceAddr, "target", m.TargetAddr, "slots", m.Slots.String(), "count", m.Slots.Len())
		start := time.Now()
		out := s.cfg.Mover.Move(ctx, m)
		mr := moveRun{move: m, out: out, class: classify(out), start: start, end: time.Now()}
		s.sched.release(m, mr.class == classFailed)
		s.mu.Lock()
		s.moves = append(s.moves, mr)
		s.mu.Unlock()
		lvl := slog.LevelInfo
		if mr.class != classMoved {
			lvl = slog.LevelWarn
		}
		s.log.Log(ctx, lvl, "soak: move done", "move", seq, "class", mr.class, "result", out.Summary.Result,
			"pause_ms", out.Summary.PauseMS, "total_ms", out.Summary.TotalMS, "error", out.Err)
		if mr.class != classRefused {
			return
		}
	}
}
