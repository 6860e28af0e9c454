package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/rollout"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// fleetIdle is how long the writer runs before the rebalance starts: its
// idle latencies.
const fleetIdle = 3 * time.Second

// fleet is one fleet run's cluster: the masters (old ones first, then the
// new ones), their replicas, and its big keys' names.
type fleet struct {
	c        *localcluster.Cluster
	replicas []*localcluster.Server
	old      int // masters holding slots at the start
	big      []string
}

// pids are the fleet's servers: masters and replicas.
func (f *fleet) pids() []int {
	var out []int
	for _, s := range append(slices.Clone(f.c.Nodes), f.replicas...) {
		out = append(out, s.PID)
	}
	return out
}

func (f *fleet) stop() {
	for _, r := range f.replicas {
		r.Stop()
	}
	f.c.Stop()
}

// fleetLayout splits every slot evenly over masters, then adds empty ones.
func fleetLayout(masters, added int) []string {
	var out []string
	for i := range masters {
		lo, hi := i*slots.Count/masters, (i+1)*slots.Count/masters-1
		out = append(out, fmt.Sprintf("%d-%d", lo, hi))
	}
	for range added {
		out = append(out, "")
	}
	return out
}

// startFleet starts the masters and a replica of each, fills the old
// masters (cfg.Keys spread over them and a sorted set of cfg.BigElements
// members at each end of every range), and returns the cluster.
func startFleet(ctx context.Context, cfg *Config, dir, bin string) (*fleet, error) {
	layout := fleetLayout(cfg.FleetMasters, cfg.FleetNew)
	f := &fleet{old: cfg.FleetMasters}
	opts := localcluster.Options{Config: []string{"cluster-node-timeout 15000"}, Bin: bin}
	c, err := localcluster.StartCluster(ctx, dir, layout, opts)
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	f.c = c
	// Replicas before the data, as a cluster in service has them: the
	// fill reaches them through replication, and every master keeps a
	// backlog as it would.
	ropts := opts
	ropts.Cluster = true
	for i := range c.Nodes {
		r, err := localcluster.StartServer(ctx, dir, ropts)
		if err == nil {
			f.replicas = append(f.replicas, r)
			err = c.Replicate(ctx, r, i)
		}
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("replica of %s: %w", c.Nodes[i].Addr, err)
		}
	}
	if err := fill(ctx, c, layout, cfg); err != nil {
		f.stop()
		return nil, err
	}
	if f.big, err = fillEnds(ctx, c, layout[:f.old], cfg.BigElements); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

// fillEnds writes a sorted set of n members in the first and in the last
// slots of every range, straight to its master; it returns their names.
func fillEnds(ctx context.Context, c *localcluster.Cluster, ranges []string, n int) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	var names []string
	for i, spec := range ranges {
		set, err := slots.Parse(spec)
		if err != nil {
			return nil, err
		}
		all := set.Slots()
		first, last := all[0], all[len(all)-1]
		for j, key := range []string{tagIn(first, first+8, i) + "zset-low", tagIn(last-7, last+1, i) + "zset-high"} {
			if err := fillZSet(ctx, c.Nodes[i], key, n, i*2+j); err != nil {
				return nil, err
			}
			names = append(names, key)
		}
	}
	return names, nil
}

func fillZSet(ctx context.Context, s *localcluster.Server, key string, n, seed int) error {
	cl := s.Client()
	defer cl.Close()
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		zs := make([]redis.Z, 0, batch)
		for m := lo; m < min(lo+batch, n); m++ {
			zs = append(zs, redis.Z{Score: float64((m*7919 + seed) % 100_000), Member: fmt.Sprintf("member:%08d:%d", m, seed)})
		}
		if err := cl.ZAdd(ctx, key, zs...).Err(); err != nil {
			return fmt.Errorf("fill %s on %s: %w", key, s.Addr, err)
		}
	}
	return nil
}

// runFleet builds a fleet in dir, rebalances it onto its new masters with
// r's method while the writer runs, and checks the outcome.
func runFleet(ctx context.Context, cfg *Config, asmBin, dir string, r *RunResult) {
	method := r.Method
	bin := ""
	if method == MethodASM {
		bin = asmBin
	}
	t0 := time.Now()
	f, err := startFleet(ctx, cfg, dir, bin)
	if err != nil {
		r.Error = err.Error()
		return
	}
	defer f.stop()
	c := f.c
	ld := newLoad(c)
	defer ld.close()
	if err := ld.prime(ctx); err != nil {
		r.Error = err.Error()
		return
	}
	total, _, err := masterKeys(ctx, c)
	if err != nil {
		r.Error = err.Error()
		return
	}
	r.FillMS = ms(time.Since(t0))
	all := slots.NewSet(slots.Range{Start: 0, End: slots.Count - 1})
	sample, err := captureSample(ctx, c, all, cfg.Keys, f.big)
	if err != nil {
		r.Error = err.Error()
		return
	}
	cfg.Logger.Info("bench: fleet filled", "ms", r.FillMS, "keys", total, "dir", dir)

	var sc *fleetSidecars
	if runsSidecars(method) {
		if sc, err = startFleetSidecars(ctx, cfg, f, dir); err != nil {
			r.Error = err.Error()
			return
		}
		defer sc.close()
	}
	before, err := serverRedirects(ctx, c)
	if err != nil {
		r.Error = err.Error()
		return
	}
	// Every master is a source or a target: the forks and the longest
	// events of each; the writer's round trips stand for the PINGs.
	pr, err := startProbe(ctx, c.Nodes, nil, false, cfg.MoveTimeout)
	if err != nil {
		r.Error = fmt.Sprintf("probe the masters: %v", err)
		return
	}
	ld.start(cmp.Or(cfg.LoadRate, DefaultFleetLoadRate), fleetIdle+cfg.MoveTimeout)
	select {
	case <-ctx.Done():
	case <-time.After(fleetIdle):
	}
	if err := pr.resetStalls(ctx); err != nil {
		pr.finish(ctx)
		ld.finish()
		r.Error = fmt.Sprintf("probe the masters: %v", err)
		return
	}
	mctx, cancel := context.WithTimeout(ctx, cfg.MoveTimeout)
	cpuFrom, cpuErr := markCPU(f.pids())
	ld.markDuring()
	start := time.Now()
	switch method {
	case MethodRebalance:
		err = rebalance(mctx, cfg, c, dir)
	case MethodNoMove:
		select {
		case <-mctx.Done():
			err = mctx.Err()
		case <-time.After(cfg.NoMoveFor):
		}
	case MethodASM:
		var res asmResult
		if res, err = fleetWithASM(mctx, f, dir); err == nil {
			r.PauseMS, r.SwitchMS = &res.PauseMS, &res.SwitchMS
		}
		r.Notes = append(r.Notes, res.Notes...)
	default:
		r.Moves, err = fleetWithSlotmover(mctx, cfg, f, sc, method)
		for _, o := range r.Moves {
			if r.PauseMS == nil || o.Pause > *r.PauseMS {
				r.PauseMS = &o.Pause
			}
		}
	}
	r.WallMS = ms(time.Since(start))
	if cpuErr == nil {
		var cpuTo cpuMark
		if cpuTo, cpuErr = markCPU(f.pids()); cpuErr == nil {
			use := cpuFrom.since(cpuTo)
			r.CPU = &use
		}
	}
	if cpuErr != nil {
		r.Notes = append(r.Notes, "no CPU accounting: "+cpuErr.Error())
	}
	cancel()
	ld.finish()
	cl := ld.latency()
	r.Client = &cl
	r.ClientRedirects, r.LoadErrors = ld.redirects(), ld.errs.Load()
	probes, _, perr := pr.finish(ctx)
	r.sources(probes, perr, true)
	if after, err := serverRedirects(ctx, c); err == nil {
		r.ServerRedirects = after.sub(before)
	}
	if err != nil {
		r.Error = err.Error()
		if ops, lost, extra, cerr := ld.check(ctx); cerr == nil {
			r.LoadOps, r.LostWrites, r.ExtraWrites = ops, lost, extra
		}
		return
	}
	verifyFleet(ctx, f, total, ld, sample, method != MethodNoMove, r)
}

// masterKeys reads DBSIZE of every master; total is their sum.
func masterKeys(ctx context.Context, c *localcluster.Cluster) (total int64, each []int64, err error) {
	for _, n := range c.Nodes {
		cl := n.Client()
		k, err := cl.DBSize(ctx).Result()
		cl.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("DBSIZE on %s: %w", n.Addr, err)
		}
		total, each = total+k, append(each, k)
	}
	return total, each, nil
}

// verifyFleet checks a fleet after its run: every node agrees on the
// owners and redis-cli's check passes, no key is lost or left behind, the
// sample is as it was, and the writer lost nothing. Once rebalanced, every
// new master serves slots, and the balance (heaviest master's keys over
// the mean) is noted.
func verifyFleet(ctx context.Context, f *fleet, total int64, ld *load, sample *localcluster.KeyStates, rebalanced bool, r *RunResult) {
	c := f.c
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		r.warn("the nodes do not agree: %v", err)
	}
	if err := localcluster.CheckWithRedisCli(ctx, c.Nodes[0].Addr); err != nil {
		r.warn("redis-cli --cluster check: %s", firstLines(err.Error(), 3))
	}
	cl := c.Nodes[0].Client()
	top, err := cluster.Load(ctx, cl)
	cl.Close()
	if err != nil {
		r.warn("read the slots: %v", err)
	} else if rebalanced {
		for i, n := range c.Nodes[f.old:] {
			if m := top.ByID(c.IDs[f.old+i]); m == nil || m.Slots.Len() == 0 {
				r.warn("the new master %s serves no slot", n.Addr)
			} else {
				r.Moved[n.Addr] = m.Slots.String()
			}
		}
	}
	if now, each, err := masterKeys(ctx, c); err != nil {
		r.warn("%v", err)
	} else {
		if now != total {
			r.warn("the masters hold %d keys, %d before", now, total)
		}
		for _, k := range each[f.old:] {
			r.TargetKeys += k // the new masters started empty
		}
		r.KeysMoved = r.TargetKeys
		if now > 0 && rebalanced {
			r.Notes = append(r.Notes, fmt.Sprintf("balance: heaviest master %.3f × the mean keys", float64(slices.Max(each))*float64(len(each))/float64(now)))
		}
	}
	if orphans, err := c.Orphans(ctx); err != nil {
		r.warn("orphans: %v", err)
	} else if len(orphans) > 0 {
		r.SourceLeft = int64(len(orphans))
		r.warn("keys left in slots their node does not serve: %s", strings.Join(orphans[:min(3, len(orphans))], "; "))
	}
	cc := c.Client()
	if err := sample.Compare(ctx, cc); err != nil {
		r.warn("the keys' contents: %s", firstLines(err.Error(), 3))
	}
	cc.Close()
	r.checkLoad(ctx, ld)
}

// rebalance runs redis-cli --cluster rebalance --cluster-use-empty-masters
// and waits for it; its output goes to rebalance.log in dir.
func rebalance(ctx context.Context, cfg *Config, c *localcluster.Cluster, dir string) error {
	return runRedisCli(ctx, cfg, filepath.Join(dir, "rebalance.log"),
		"--cluster", "rebalance", c.Nodes[0].Addr, "--cluster-use-empty-masters")
}

// fleetPlan is what `slotmover plan --add <the new masters>` computes.
func fleetPlan(ctx context.Context, f *fleet) (*planner.Plan, error) {
	var added []string
	for _, n := range f.c.Nodes[f.old:] {
		added = append(added, n.Addr)
	}
	p, err := planner.Build(ctx, cluster.Conn{Addr: f.c.Nodes[0].Addr}, planner.Request{Mode: planner.Add, Nodes: added, By: planner.ByKeys}, planner.BigKeyOptions{})
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return p, nil
}

// fleetSidecars are the fleet's sidecars, one beside every master, on an
// embedded NATS server, and a connection to it. They start before the
// writer's idle window, as in a cluster that runs them all along: neither
// their start nor NATS's is a rebalance's time.
type fleetSidecars struct {
	ns   *server.Server
	nc   *nats.Conn
	stop func() // the sidecars'
}

func startFleetSidecars(ctx context.Context, cfg *Config, f *fleet, dir string) (*fleetSidecars, error) {
	if cfg.Sidecars == nil {
		return nil, errors.New("no sidecars to run the moves (Config.Sidecars)")
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("NATS server: %w", err)
	}
	ns.Start()
	s := &fleetSidecars{ns: ns}
	if !ns.ReadyForConnections(10 * time.Second) {
		s.close()
		return nil, errors.New("the NATS server did not start")
	}
	var nodes []string
	for _, n := range f.c.Nodes {
		nodes = append(nodes, n.Addr)
	}
	s.stop, err = cfg.Sidecars(ctx, ns.ClientURL(), nodes, dir) // stop also those that started before one failed
	if err == nil {
		s.nc, err = nats.Connect(ns.ClientURL(), nats.Name("slotmover bench"))
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("sidecars: %w", err)
	}
	return s, nil
}

func (s *fleetSidecars) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.stop != nil {
		s.stop()
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// fleetWithSlotmover does what `slotmover plan --add` and `slotmover apply
// --nats --parallel` do, through the sidecars: slotmover-off applies with
// --budget off, the other methods with the configured budget and their
// snapshot path.
func fleetWithSlotmover(ctx context.Context, cfg *Config, f *fleet, sc *fleetSidecars, method string) ([]rollout.Outcome, error) {
	p, err := fleetPlan(ctx, f)
	if err != nil {
		return nil, err
	}
	budget := cfg.Budget
	if method == MethodSlotmoverOff {
		budget = throttle.Budget{Off: true}
	}
	runner := &rollout.Runner{Plan: p, Parallel: cfg.Parallel, Budgeted: !budget.Off,
		Mover: rollout.Sidecars{Bus: &natsapi.Client{NC: sc.nc}, Snapshot: snapshotOf[method], Budget: &budget}}
	out := runner.Run(ctx)
	var failed []string
	for _, o := range out {
		if o.Result != mover.ResultMoved {
			failed = append(failed, fmt.Sprintf("move %d (%s → %s, slots %s): %s %s", o.N, o.Move.Source, o.Move.Target, o.Move.Slots, o.Result, o.Err))
		}
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("%d of %d moves did not move: %s", len(failed), len(out), strings.Join(failed, "; "))
	}
	return out, nil
}

// fleetWithASM imports the plan's moves with the built-in migration: one
// CLUSTER MIGRATION IMPORT per move, a target's one after the other, the
// targets side by side, as far as the server lets tasks run at once.
func fleetWithASM(ctx context.Context, f *fleet, dir string) (asmResult, error) {
	p, err := fleetPlan(ctx, f)
	if err != nil {
		return asmResult{}, err
	}
	byAddr := map[string]*localcluster.Server{}
	for _, n := range f.c.Nodes {
		byAddr[n.Addr] = n
	}
	var groups [][]asmImport
	index := map[string]int{}
	for _, m := range p.Moves {
		set, err := slots.Parse(m.Slots)
		if err != nil {
			return asmResult{}, err
		}
		i, ok := index[m.Target]
		if !ok {
			i = len(groups)
			index[m.Target] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], asmImport{Target: byAddr[m.Target], Source: byAddr[m.Source], Slots: set})
	}
	return importWithASM(ctx, groups, dir)
}
