package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/rollout"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// RunResult is one run of one method on one workload.
type RunResult struct {
	Workload string `json:"workload"`
	Method   string `json:"method"`
	Run      int    `json:"run"`

	WallMS float64 `json:"wall_ms"` // start of the move to its end, source cleanup included
	FillMS float64 `json:"fill_ms"`

	Moved      map[string]string `json:"moved"`       // source address → slots it gave up
	KeysMoved  int64             `json:"keys_moved"`  // keys in the moved slots before the move
	TargetKeys int64             `json:"target_keys"` // keys on the target after (it starts empty)
	SourceLeft int64             `json:"source_left"` // keys of the moved slots still on a source after

	LoadOps         int64     `json:"load_ops"` // acknowledged INCRs during the move
	LoadErrors      int64     `json:"load_errors"`
	LostWrites      int64     `json:"lost_writes"`  // acknowledged INCRs missing afterwards
	ExtraWrites     int64     `json:"extra_writes"` // increments found that were never sent
	ServerRedirects Redirects `json:"server_redirects"`
	ClientRedirects Redirects `json:"client_redirects"`

	// Client is what the writer saw (the fleet workload).
	Client *ClientLatency `json:"client,omitempty"`
	// CPU is what the host spent during the move (the fleet workload).
	CPU *CPUUse `json:"cpu,omitempty"`
	// Moves are the fleet's slotmover moves, as apply reports them.
	Moves []rollout.Outcome `json:"moves,omitempty"`

	PauseMS  *float64     `json:"pause_ms,omitempty"`  // slotmover, asm: the longest write pause of its tasks
	SwitchMS *float64     `json:"switch_ms,omitempty"` // slotmover, asm: when its last task's target served the slots
	Snapshot string       `json:"snapshot,omitempty"`  // slotmover: the snapshot path(s) its tasks took
	Tasks    []TaskResult `json:"tasks,omitempty"`

	// The sources during the move (see ServerProbe): forks summed over
	// them, PING latencies the worst of them (nil with Config.NoLatency).
	Forks       *int64        `json:"forks,omitempty"`
	StallMS     *int64        `json:"stall_max_ms,omitempty"` // the longest event of a source's main thread, in whole ms
	StallEvent  string        `json:"stall_event,omitempty"`
	PingIdleP99 *float64      `json:"ping_idle_p99_ms,omitempty"`
	PingP99     *float64      `json:"ping_p99_ms,omitempty"`
	PingMax     *float64      `json:"ping_max_ms,omitempty"`
	Sources     []ServerProbe `json:"sources,omitempty"`
	// The target's longest event, as StallMS is the sources'.
	TargetStallMS    *int64        `json:"target_stall_max_ms,omitempty"`
	TargetStallEvent string        `json:"target_stall_event,omitempty"`
	Targets          []ServerProbe `json:"targets,omitempty"`
	// Commands of 5 ms or more in the sources' and the target's slow logs.
	StallsOver5MS, TargetStallsOver5MS int `json:"-"`

	Error    string   `json:"error,omitempty"`    // the move failed
	Warnings []string `json:"warnings,omitempty"` // a check after the move failed
	Notes    []string `json:"notes,omitempty"`    // worth knowing, not a fault
	Dir      string   `json:"dir,omitempty"`      // kept for a look
}

// ok reports whether the move worked and every check passed.
func (r *RunResult) ok() bool { return r.Error == "" && len(r.Warnings) == 0 && r.LostWrites == 0 }

// Run measures every method on every workload cfg.Runs times, each run on
// a fresh cluster, and returns the report. Runs go in turns (run 1 of every
// method, then run 2, …) so that slow phases of a shared machine spread
// over the methods. A failed move is recorded in the report, not returned:
// the error is for faults that stop the benchmark itself.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := localcluster.NeedBinaries(localcluster.ServerBin, cfg.RedisCli); err != nil {
		return nil, err
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("bench dir: %w", err)
		}
	}
	rep := newReport(&cfg)
	defer rep.summarize() // also for a report cut short
	asmBin, asmErr := "", error(nil)
	if slices.Contains(cfg.Methods, MethodASM) {
		if asmBin, asmErr = cfg.asmServer(); asmErr == nil {
			rep.ASMServer = versionOf(asmBin)
		} else {
			cfg.Logger.Warn("bench: the asm method is skipped", "why", asmErr)
			for _, row := range rep.Rows {
				if row.Method == MethodASM {
					row.Skipped = asmErr.Error()
				}
			}
		}
	}
	for run := 1; run <= cfg.Runs; run++ {
		for _, w := range cfg.Workloads {
			var p plan
			if w != WorkloadFleet {
				var err error
				if p, err = planFor(w, cfg.SmallSlots); err != nil {
					return rep, fmt.Errorf("plan: %w", err)
				}
			}
			for _, m := range cfg.Methods {
				if m == MethodASM && asmErr != nil || !applies(w, m) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return rep, fmt.Errorf("bench stopped before %s/%s run %d: %w", w, m, run, err)
				}
				cfg.Logger.Info("bench: run", "workload", w, "method", m, "run", run, "of", cfg.Runs)
				r := inRunDir(&cfg, w, m, run, func(dir string, r *RunResult) {
					if w == WorkloadFleet {
						runFleet(ctx, &cfg, asmBin, dir, r)
					} else {
						runOne(ctx, &cfg, p, asmBin, dir, r)
					}
				})
				rep.add(r)
				cfg.Logger.Info("bench: run done", "workload", w, "method", m, "run", run,
					"wall_ms", r.WallMS, "keys", r.KeysMoved, "error", r.Error, "warnings", r.Warnings)
			}
		}
	}
	return rep, nil
}

// inRunDir makes a run in a directory of its own, kept when the run
// fails or with cfg.KeepDirs.
func inRunDir(cfg *Config, workload, method string, run int, do func(dir string, r *RunResult)) RunResult {
	r := RunResult{Workload: workload, Method: method, Run: run, Moved: map[string]string{}}
	dir, err := os.MkdirTemp(cfg.Dir, fmt.Sprintf("bench-%s-%s-%d-", workload, method, run))
	if err != nil {
		r.Error = fmt.Sprintf("run dir: %v", err)
		return r
	}
	do(dir, &r)
	if cfg.KeepDirs || !r.ok() {
		r.Dir = dir
	} else if err := os.RemoveAll(dir); err != nil {
		cfg.Logger.Warn("bench: remove run dir", "dir", dir, "error", err)
	}
	return r
}

// runOne builds a cluster in dir, fills it, moves, checks and tears it
// down. The asm method's cluster runs asmBin.
func runOne(ctx context.Context, cfg *Config, p plan, asmBin, dir string, r *RunResult) {
	method := r.Method
	opts := localcluster.Options{Config: []string{"cluster-node-timeout 15000"}}
	if method == MethodASM {
		opts.Bin = asmBin
	}
	c, err := localcluster.StartCluster(ctx, dir, layout, opts)
	if err != nil {
		r.Error = fmt.Sprintf("start cluster: %v", err)
		return
	}
	defer c.Stop()
	// Nothing prepared that a user's cluster would not have: its masters
	// never had a replica, so they keep no backlog, and the keys path
	// starts one itself (stream.StartBacklog), its cost in the move's time.

	t0 := time.Now()
	if err := fill(ctx, c, layout, cfg); err != nil {
		r.Error = err.Error()
		return
	}
	if cfg.BigKeys {
		if err := fillBig(ctx, c, cfg); err != nil {
			r.Error = err.Error()
			return
		}
	}
	var ld *load
	if cfg.LoadRate > 0 {
		ld = newLoad(c)
		defer ld.close()
		if err := ld.prime(ctx); err != nil {
			r.Error = err.Error()
			return
		}
	}
	r.FillMS = ms(time.Since(t0))
	for _, sh := range p.Shares {
		src := c.Nodes[sh.Source]
		cl := src.Client()
		n, err := countKeys(ctx, cl, sh.Slots)
		cl.Close()
		if err != nil {
			r.Error = err.Error()
			return
		}
		r.KeysMoved += n
		r.Moved[src.Addr] = sh.Slots.String()
	}
	cfg.Logger.Info("bench: filled", "ms", r.FillMS, "keys_to_move", r.KeysMoved, "dir", dir)
	sample, err := captureSample(ctx, c, p.union(), cfg.Keys, nil)
	if err != nil {
		r.Error = err.Error()
		return
	}

	before, err := serverRedirects(ctx, c)
	if err != nil {
		r.Error = err.Error()
		return
	}
	var sources []*localcluster.Server
	for _, sh := range p.Shares {
		sources = append(sources, c.Nodes[sh.Source])
	}
	// The fork counts, and a second of idle PINGs, before the load starts.
	pr, err := startProbe(ctx, sources, []*localcluster.Server{c.Nodes[targetNode]}, !cfg.NoLatency, cfg.MoveTimeout)
	if err != nil {
		r.Error = fmt.Sprintf("probe the sources: %v", err)
		return
	}
	if err := pr.resetStalls(ctx); err != nil {
		pr.finish(ctx)
		r.Error = fmt.Sprintf("probe the sources: %v", err)
		return
	}
	if ld != nil {
		ld.start(cfg.LoadRate, cfg.MoveTimeout)
	}
	mctx, cancel := context.WithTimeout(ctx, cfg.MoveTimeout)
	pr.moveStarts()
	start := time.Now()
	switch method {
	case MethodReshard10:
		err = reshard(mctx, cfg, c, p, 10, dir)
	case MethodReshard1000:
		err = reshard(mctx, cfg, c, p, 1000, dir)
	case MethodSlotmover, MethodSlotmoverOff, MethodSlotmoverRDB, MethodSlotmoverKeys:
		// The label lets a profile (--cpuprofile) be narrowed to the moves:
		// go tool pprof -tagfocus phase=move.
		pprof.Do(mctx, pprof.Labels("phase", "move"), func(mctx context.Context) {
			budget := cfg.Budget
			if method == MethodSlotmoverOff {
				budget = throttle.Budget{Off: true}
			}
			r.Tasks, err = moveWithSlotmover(mctx, c, p, snapshotOf[method], budget, dir)
		})
		var paths []string
		for _, t := range r.Tasks {
			if r.PauseMS == nil || t.Summary.PauseMS > *r.PauseMS {
				v := t.Summary.PauseMS
				r.PauseMS = &v
			}
			if v := float64(t.Summary.SwitchMS); r.SwitchMS == nil || v > *r.SwitchMS {
				r.SwitchMS = &v
			}
			if t.Summary.Snapshot != "" && !slices.Contains(paths, t.Summary.Snapshot) {
				paths = append(paths, t.Summary.Snapshot)
			}
		}
		r.Snapshot = strings.Join(paths, "+")
	case MethodASM:
		var res asmResult
		res, err = moveWithASM(mctx, c, p, dir)
		if err == nil {
			r.PauseMS, r.SwitchMS = &res.PauseMS, &res.SwitchMS
		}
		r.Notes = append(r.Notes, res.Notes...)
	default:
		err = fmt.Errorf("unknown method %q", method)
	}
	r.WallMS = ms(time.Since(start))
	cancel()
	probes, targets, perr := pr.finish(ctx)
	r.Targets = targets
	if r.sources(probes, perr, false) {
		var tstall int64
		for _, tp := range targets {
			if tp.StallMS >= tstall {
				tstall, r.TargetStallEvent = tp.StallMS, tp.StallEvent
			}
			r.TargetStallsOver5MS += tp.Over5MS
		}
		r.TargetStallMS = &tstall
	}
	if !cfg.NoLatency {
		var idle, p99, worst float64
		for _, sp := range probes {
			idle, p99, worst = max(idle, sp.IdleP99MS), max(p99, sp.P99MS), max(worst, sp.MaxMS)
			if sp.PingErrors > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("%d PINGs to %s failed", sp.PingErrors, sp.Addr))
			}
		}
		r.PingIdleP99, r.PingP99, r.PingMax = &idle, &p99, &worst
	}
	if ld != nil {
		ld.finish()
		r.ClientRedirects = ld.redirects()
		r.LoadErrors = ld.errs.Load()
	}
	if err != nil {
		r.Error = err.Error()
		// A failed move must lose no write either (slotmover rolls back).
		if ld != nil {
			if ops, lost, extra, cerr := ld.check(ctx); cerr == nil {
				r.LoadOps, r.LostWrites, r.ExtraWrites = ops, lost, extra
			}
		}
		return
	}
	after, err := serverRedirects(ctx, c)
	if err != nil {
		r.warn("%v", err)
	}
	r.ServerRedirects = after.sub(before)
	verify(ctx, c, p, method, ld, sample, r)
}

// sources records the probes of the sources (or of every master) and
// sums them up: forks, the longest event (named with its server's
// address if named), slow commands. It reports whether perr left them
// whole.
func (r *RunResult) sources(probes []ServerProbe, perr error, named bool) bool {
	r.Sources = probes
	if perr != nil {
		r.warn("the sources after the move: %v", perr)
		return false
	}
	var forks, stall int64
	for _, sp := range probes {
		forks += sp.Forks
		if sp.StallMS >= stall {
			stall, r.StallEvent = sp.StallMS, sp.StallEvent
			if named {
				r.StallEvent += " on " + sp.Addr
			}
		}
		r.StallsOver5MS += sp.Over5MS
	}
	r.Forks, r.StallMS = &forks, &stall
	return true
}

// sampleSize is how many of the moved keys are compared, value, type and
// TTL, before and after each move: enough to catch a broken copy, cheap on
// a million keys.
const sampleSize = 2000

// captureSample records keys of the moved slots, spread over the fill, and
// the keys extra.
func captureSample(ctx context.Context, c *localcluster.Cluster, moved *slots.Set, keys int, extra []string) (*localcluster.KeyStates, error) {
	names := slices.Clone(extra)
	for i := 0; i < keys && len(names) < len(extra)+sampleSize; i += max(1, keys/(8*sampleSize)) {
		if k := KeyName(i); moved.Contains(slots.ForString(k)) {
			names = append(names, k)
		}
	}
	cc := c.Client()
	defer cc.Close()
	ks, err := localcluster.Capture(ctx, cc, names)
	if err != nil {
		return nil, fmt.Errorf("sample the moved keys: %w", err)
	}
	return ks, nil
}

// verify checks the outcome cheaply, against the cluster's state and data,
// and notes every failed check as a warning of the run.
func verify(ctx context.Context, c *localcluster.Cluster, p plan, method string, ld *load, sample *localcluster.KeyStates, r *RunResult) {
	moved := p.union()
	target := c.Nodes[targetNode]
	tc := target.Client()
	defer tc.Close()

	// What the target owns should be exactly the plan: the check that
	// reshard took the slots slotmover is given.
	if top, err := cluster.Load(ctx, tc); err != nil {
		r.warn("read the target's slots: %v", err)
	} else if got := top.Myself.Slots.String(); got != moved.String() {
		r.warn("%s: the target owns %s, the plan assumed %s", method, got, moved)
	}
	if err := c.WaitOwner(ctx, moved, c.IDs[targetNode], 30*time.Second); err != nil {
		r.warn("ownership: %v", err)
	}
	if n, err := tc.DBSize(ctx).Result(); err != nil {
		r.warn("DBSIZE on the target: %v", err)
	} else {
		r.TargetKeys = n
		if n != r.KeysMoved {
			r.warn("the target holds %d keys, %d were in the moved slots", n, r.KeysMoved)
		}
	}
	for _, sh := range p.Shares {
		src := c.Nodes[sh.Source]
		cl := src.Client()
		role, err := cl.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			// Replica migration after the last slot went: it resyncs from the target.
			r.Notes = append(r.Notes, fmt.Sprintf("%s became a replica after giving up its last slot", src.Addr))
			cl.Close()
			continue
		}
		n, err := countKeys(ctx, cl, sh.Slots)
		cl.Close()
		if err != nil {
			r.warn("%v", err)
			continue
		}
		r.SourceLeft += n
	}
	if r.SourceLeft > 0 {
		r.warn("%d keys of the moved slots are still on the sources", r.SourceLeft)
	}
	if err := localcluster.CheckWithRedisCli(ctx, target.Addr); err != nil {
		r.warn("redis-cli --cluster check: %s", firstLines(err.Error(), 3))
	}
	// A fresh client: its slot map is read after the move.
	cc := c.Client()
	if err := sample.Compare(ctx, cc); err != nil {
		r.warn("the moved keys' contents: %s", firstLines(err.Error(), 3))
	}
	cc.Close()
	if ld != nil {
		r.checkLoad(ctx, ld)
	}
}

// warn notes a failed check of the run.
func (r *RunResult) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// checkLoad reads the load's counters into r; a failed read, or a write
// lost or extra, is a warning of the run.
func (r *RunResult) checkLoad(ctx context.Context, ld *load) {
	ops, lost, extra, err := ld.check(ctx)
	if err != nil {
		r.warn("load check: %v", err)
	}
	r.LoadOps, r.LostWrites, r.ExtraWrites = ops, lost, extra
	if lost > 0 || extra > 0 {
		r.warn("load: %d acknowledged writes lost, %d extra", lost, extra)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// snapshotOf is the snapshot path of each slotmover method.
var snapshotOf = map[string]string{
	MethodSlotmover:     mover.SnapshotAuto,
	MethodSlotmoverOff:  mover.SnapshotAuto,
	MethodSlotmoverRDB:  mover.SnapshotRDB,
	MethodSlotmoverKeys: mover.SnapshotKeys,
}

// serverVersion asks the redis-server binary for its version line.
func serverVersion() string { return versionOf(localcluster.ServerBin) }

func versionOf(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return bin
	}
	return strings.TrimSpace(string(out))
}
