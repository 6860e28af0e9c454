package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// Results of apply beside mover's.
const (
	resultStale   = "stale"   // the plan no longer matches the cluster: refused, nothing changed
	resultSkipped = "skipped" // not started (cancelled before its turn)
	resultChecked = "checked" // --dry-run: the move would run
	resultRefused = "refused" // over NATS, the sidecar refused the request: nothing started
	resultLost    = "lost"    // over NATS, the task's end was not seen: it may still run
)

// applied is the outcome of one move of a plan.
type applied struct {
	N      int          `json:"n"` // 1-based, in the plan's order
	Move   planner.Move `json:"move"`
	Result string       `json:"result"`
	Err    string       `json:"error,omitempty"`
	Keys   int64        `json:"keys"`
	Total  int64        `json:"total_ms"`
	Pause  float64      `json:"pause_ms"`
	// Throttled is the time the move held because its servers were over
	// its impact budget.
	Throttled int64    `json:"throttled_ms"`
	Repair    []string `json:"repair,omitempty"`
	Task      string   `json:"task,omitempty"` // over NATS, the task's ID on the target's sidecar
}

func applyCmd(args []string) int {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	var cf connFlags
	var parallel int
	var dryRun, asJSON bool
	var snapshot, budget string
	fs.IntVar(&parallel, "parallel", 1, "run at most `N` moves at a time (never two from the same source)")
	fs.BoolVar(&dryRun, "dry-run", false, "check every move against the cluster and print what would run; change nothing")
	fs.BoolVar(&asJSON, "json", false, "print the outcome as one JSON object on stdout (progress goes to stderr)")
	fs.StringVar(&snapshot, "snapshot", "", "how each move first copies the keys: `auto`, rdb or keys (see slotmover move -h); over NATS, unset keeps each sidecar's setting")
	fs.StringVar(&budget, "budget", "", "each move's impact budget: `default`, off, or max-event=DURATION,max-rise=RATIO (see slotmover move -h); over NATS, unset keeps each sidecar's setting")
	var d daemonFlags
	fs.StringVar(&d.natsURL, "nats", "", "send each move to its target's sidecar over NATS at this `URL`, instead of running it here")
	fs.StringVar(&d.config, "nats-config", "", "over NATS, connect as the sidecar of this YAML `file` does (servers, credentials, TLS, subject prefix)")
	fs.StringVar(&d.prefix, "subject-prefix", "slotmover", "over NATS: the sidecars' subject prefix")
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: slotmover apply PLAN.json [--parallel N] [--dry-run] [--json] [--budget B] [--nats URL]")
		fs.PrintDefaults()
	}
	// The plan file may come before the flags, among them or after them.
	pos, err := parseAnywhere(fs, args)
	if err != nil || refuseExtra("apply", pos, 1, "one plan file") {
		return exitRefused
	}
	if len(pos) == 0 {
		fs.Usage()
		return exitRefused
	}
	path := pos[0]
	if parallel < 1 {
		fmt.Fprintf(os.Stderr, "slotmover apply: --parallel %d: 1 or more\n", parallel)
		return exitRefused
	}
	b, err := throttle.ParseBudget(budget)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: --budget: %v\n", err)
		return exitRefused
	}
	p, err := readPlan(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
		return exitRefused
	}
	for i, m := range p.Moves {
		if _, err := slots.Parse(m.Slots); err != nil || m.Source == "" || m.Target == "" || m.SourceID == "" || m.TargetID == "" {
			fmt.Fprintf(os.Stderr, "slotmover apply: %s: move %d is incomplete or its slots are bad (%v)\n", path, i+1, err)
			return exitRefused
		}
	}
	if _, err := cf.conn(""); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
		return exitRefused
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cf.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: --log-level: %v\n", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &applier{plan: p, cf: cf, parallel: parallel, snapshot: snapshot, level: level, out: os.Stdout}
	if asJSON {
		a.out = os.Stderr
	}
	if budget != "" {
		a.budget = &b
	}
	if (d.natsURL != "" || d.config != "") && !dryRun {
		if a.bus, err = d.bus("slotmover apply"); err != nil {
			fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
			return exitRefused
		}
		defer a.bus.NC.Close()
	}
	var results []applied
	if dryRun {
		results = a.dryRun(ctx)
	} else {
		results = a.run(ctx)
	}
	if asJSON {
		printAppliedJSON(os.Stdout, results, dryRun)
	} else {
		printApplied(os.Stdout, results, dryRun)
	}
	for _, r := range results {
		if r.Result != mover.ResultMoved && r.Result != resultChecked {
			return exitFailed
		}
	}
	return exitMoved
}

// applier runs a plan's moves.
type applier struct {
	plan     *planner.Plan
	cf       connFlags
	parallel int
	snapshot string
	budget   *throttle.Budget // nil: the default here, each sidecar's setting over NATS
	level    slog.Level
	out      io.Writer
	bus      *natsapi.Client // moves go to the targets' sidecars; nil: run here

	mu sync.Mutex // serializes plain progress lines
}

// label names move n for progress lines and bars.
func label(n int, m planner.Move) string {
	return fmt.Sprintf("#%d %s→%s", n, m.Source, m.Target)
}

// dryRun checks every move and changes nothing.
func (a *applier) dryRun(ctx context.Context) []applied {
	var out []applied
	for i, m := range a.plan.Moves {
		r := applied{N: i + 1, Move: m, Result: resultChecked, Keys: m.Keys}
		if err := a.check(ctx, m); err != nil {
			r.Result, r.Err = resultStale, err.Error()
		}
		out = append(out, r)
	}
	return out
}

// check tells whether the plan still matches the cluster for move m: the
// source (the same node, still a master) owns every slot of the move in
// its own view, with none migrating, and the target is still that master.
// It changes nothing.
func (a *applier) check(ctx context.Context, m planner.Move) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	set, err := slots.Parse(m.Slots)
	if err != nil {
		return err
	}
	self := func(addr, id, role string) (*cluster.Topology, error) {
		conn, err := a.cf.conn(addr)
		if err != nil {
			return nil, err
		}
		c := conn.Client()
		defer c.Close()
		top, err := cluster.Load(ctx, c)
		if err != nil {
			return nil, err
		}
		switch {
		case top.Myself.ID != id:
			return nil, fmt.Errorf("the %s %s is now node %s, not %s", role, addr, top.Myself.ID, id)
		case !top.Myself.Master():
			return nil, fmt.Errorf("the %s %s is no longer a master (flags %s)", role, addr, strings.Join(top.Myself.Flags, ","))
		}
		return top, nil
	}
	src, err := self(m.Source, m.SourceID, "source")
	if err != nil {
		return err
	}
	if _, err := self(m.Target, m.TargetID, "target"); err != nil {
		return err
	}
	var gone slots.Set
	owners := map[string]bool{}
	for _, s := range set.Slots() {
		if !src.Myself.Slots.Contains(s) {
			gone.Add(s)
			if o := src.AssignedTo(s); o != nil {
				owners[o.Addr] = true
			} else {
				owners["nobody"] = true
			}
		}
	}
	if gone.Len() > 0 {
		var who []string
		for o := range owners {
			who = append(who, o)
		}
		return fmt.Errorf("the plan is stale: the source %s no longer owns slots %s of this move (now %s, by its view); plan again", m.Source, gone.String(), strings.Join(who, ", "))
	}
	for _, s := range set.Slots() {
		if id, ok := src.Myself.Migrating[s]; ok {
			return fmt.Errorf("slot %d is migrating on the source to %s: another move is under way (or stopped half-way: slotmover fix)", s, id)
		}
	}
	return nil
}

// run runs the moves, at most a.parallel at a time and never two from
// the same source (nor one whose source is another's target), in the
// plan's order as far as that allows. Unless the budget is off, never two
// into the same target either: each move paces itself to its target's
// budget, and a second one would load the target before the first's
// probes see it.
func (a *applier) run(ctx context.Context) []applied {
	results := make([]applied, len(a.plan.Moves))
	var bars *mpb.Progress
	logOut := io.Writer(os.Stderr)
	if isTerminal(a.out) {
		bars = mpb.NewWithContext(ctx, mpb.WithOutput(a.out), mpb.WithRefreshRate(250*time.Millisecond))
		logOut = bars // log lines print above the bars
	}
	logger := commandLogger(slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: a.level})))
	var pending []int
	for i := range a.plan.Moves {
		pending = append(pending, i)
	}
	running := map[int]bool{}
	budgeted := a.budget == nil || !a.budget.Off
	conflicts := func(m planner.Move) bool {
		for j := range running {
			if conflict(a.plan.Moves[j], m, budgeted) {
				return true
			}
		}
		return false
	}
	done := make(chan int)
	for iter := 0; iter < 4*len(a.plan.Moves)+4 && (len(pending) > 0 || len(running) > 0); iter++ {
		if ctx.Err() != nil {
			for _, i := range pending {
				results[i] = applied{N: i + 1, Move: a.plan.Moves[i], Result: resultSkipped, Err: "cancelled before it started"}
			}
			pending = nil
		}
		for k := 0; k < len(pending) && len(running) < a.parallel; {
			i := pending[k]
			if conflicts(a.plan.Moves[i]) {
				k++
				continue
			}
			pending = append(pending[:k], pending[k+1:]...)
			running[i] = true
			go func() {
				results[i] = a.one(ctx, i, bars, logger.With("move", i+1))
				done <- i
			}()
		}
		if len(running) == 0 {
			break
		}
		delete(running, <-done)
	}
	if bars != nil {
		bars.Wait()
	}
	return results
}

// conflict reports whether m may not start beside the running move o:
// they share a source, one's target is the other's source, or, under a
// budget, they share a target.
func conflict(o, m planner.Move, budgeted bool) bool {
	return o.SourceID == m.SourceID || o.TargetID == m.SourceID || o.SourceID == m.TargetID || budgeted && o.TargetID == m.TargetID
}

// one checks and runs move i, here or on its target's sidecar.
func (a *applier) one(ctx context.Context, i int, bars *mpb.Progress, logger *slog.Logger) applied {
	m := a.plan.Moves[i]
	r := applied{N: i + 1, Move: m}
	name := label(i+1, m)
	if ctx.Err() != nil {
		r.Result, r.Err = resultSkipped, "cancelled before it started"
		return r
	}
	// Over NATS, the target's sidecar checks that the slots are still the
	// source's (the request names it).
	if a.bus == nil {
		if err := a.check(ctx, m); err != nil {
			r.Result, r.Err = resultStale, err.Error()
			a.line(bars, "%s: refused: %v", name, err)
			return r
		}
	}

	var mu sync.Mutex
	var last mover.Progress
	last.Phase = mover.PhasePreflight
	// The keys to copy: those planned, or as many as were copied once the
	// workload has added keys to the slots since the plan, so that a bar
	// never runs past its end and a line never says 1200/1000.
	total := m.Keys
	var bar *mpb.Bar
	if bars != nil {
		bar = bars.New(0, mpb.BarStyle(),
			mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				mu.Lock()
				defer mu.Unlock()
				return fmt.Sprintf("%-9s keys %d/%d  %.1f  %s  throttled %s", last.Phase, last.KeysCopied, total,
					decor.SizeB1024(last.BytesCopied), last.Elapsed.Truncate(100*time.Millisecond), last.Throttled.Truncate(100*time.Millisecond))
			}), decor.Name("  ETA "), decor.OnComplete(decor.AverageETA(decor.ET_STYLE_GO), "done")))
		bar.SetTotal(max(total, 1), false)
	} else {
		a.line(nil, "%s: slots %s (%d keys expected): started", name, m.Slots, m.Keys)
	}
	var lastLine time.Time
	var lastPhase mover.Phase
	progress := func(p mover.Progress) {
		mu.Lock()
		last = p
		grown := p.KeysCopied > total
		if grown {
			total = p.KeysCopied
		}
		keys := total
		mu.Unlock()
		if bar != nil {
			if grown {
				bar.SetTotal(keys, false)
			}
			bar.SetCurrent(p.KeysCopied)
			return
		}
		if p.Phase != lastPhase || time.Since(lastLine) >= 5*time.Second {
			lastPhase, lastLine = p.Phase, time.Now()
			a.line(nil, "%s: %s, keys %d/%d, %.1f, %s, throttled %s", name, p.Phase, p.KeysCopied, keys, decor.SizeB1024(p.BytesCopied),
				p.Elapsed.Truncate(100*time.Millisecond), p.Throttled.Truncate(100*time.Millisecond))
		}
	}
	var phase mover.Phase
	if a.bus != nil {
		phase = a.remote(ctx, &r, progress)
	} else {
		phase = a.local(ctx, &r, logger, progress)
	}
	// The line first: once the last bar ends, the bars print no more.
	if r.Err != "" {
		a.line(bars, "%s: %s: %s", name, r.Result, r.Err)
	} else {
		a.line(bars, "%s: %s: %d keys, pause %.1f ms, total %d ms, throttled %d ms", name, r.Result, r.Keys, r.Pause, r.Total, r.Throttled)
	}
	if bar != nil {
		mu.Lock()
		last.Phase, last.KeysCopied = phase, r.Keys
		total = max(total, r.Keys)
		mu.Unlock()
		if r.Result == mover.ResultMoved {
			bar.SetTotal(-1, true)
		} else {
			bar.Abort(false)
		}
	}
	return r
}

// local runs r's move here, and returns its last phase.
func (a *applier) local(ctx context.Context, r *applied, logger *slog.Logger, progress func(mover.Progress)) mover.Phase {
	m := r.Move
	set, _ := slots.Parse(m.Slots)
	src, _ := a.cf.conn(m.Source)
	tgt, _ := a.cf.conn(m.Target)
	opts := mover.Options{Source: src, Target: tgt, Slots: set, Logger: logger, Snapshot: a.snapshot, Progress: progress}
	if a.budget != nil {
		opts.Budget = *a.budget
	}
	sum, err := mover.Run(ctx, opts)
	r.Result, r.Keys, r.Total, r.Pause, r.Throttled, r.Repair = sum.Result, sum.KeysCopied, sum.TotalMS, sum.PauseMS, sum.ThrottledMS, sum.Repair
	if err != nil {
		r.Err = err.Error()
	}
	return sum.Phase
}

// remote asks r's target's sidecar to import the slots from r's source,
// follows the task until it ends, and returns its last phase. Cancelled,
// it cancels the task and waits for its end (a task past its source's
// release finishes).
func (a *applier) remote(ctx context.Context, r *applied, progress func(mover.Progress)) mover.Phase {
	m := r.Move
	req := natsapi.ImportRequest{Slots: m.Slots, Source: m.SourceID, Snapshot: a.snapshot}
	if a.budget != nil {
		req.Budget = a.budget.String()
	}
	tasks, err := a.bus.Import(ctx, m.TargetID, req)
	var refused *natsapi.Error
	// A sidecar at its tasks.max takes the move when one of its tasks ends.
	for deadline := time.Now().Add(time.Hour); errors.As(err, &refused) && refused.Code == "too_many_tasks" && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			r.Result, r.Err = resultSkipped, "cancelled while the target's sidecar was busy"
			return mover.PhasePreflight
		case <-time.After(500 * time.Millisecond):
		}
		tasks, err = a.bus.Import(ctx, m.TargetID, req)
	}
	switch {
	case errors.As(err, &refused) && (refused.Code == "stale" || refused.Code == "owned_here" || refused.Code == "unowned"):
		r.Result, r.Err = resultStale, "the plan is stale: "+refused.Message+"; plan again"
		return mover.PhasePreflight
	case err != nil:
		r.Result, r.Err = resultRefused, fmt.Sprintf("the sidecar of %s (%s): %v", m.Target, m.TargetID, err)
		return mover.PhasePreflight
	case len(tasks) != 1:
		r.Result, r.Err = resultRefused, fmt.Sprintf("the sidecar of %s started %d tasks for one source", m.Target, len(tasks))
		return mover.PhasePreflight
	}
	t := tasks[0]
	r.Task = t.ID
	follow := context.WithoutCancel(ctx) // to see the end of a cancelled task
	cancelled, failures := false, 0
	for deadline := time.Now().Add(24 * time.Hour); !t.Over() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			if !cancelled {
				cancelled = true
				// Refused when the task is past its source's release (it
				// finishes) or over: either way, its end is what follows.
				a.bus.Cancel(follow, m.TargetID, t.ID)
				deadline = time.Now().Add(shutdownGrace)
			}
		case <-time.After(250 * time.Millisecond):
		}
		got, err := a.bus.Status(follow, m.TargetID, t.ID)
		if err != nil || len(got) != 1 {
			// The task goes on without us; a sidecar gone for a minute is
			// reported, and `slotmover status` follows the task from there.
			if failures++; failures > 240 {
				r.Result, r.Err = resultLost, fmt.Sprintf("task %s on %s: no status for a minute (%v): it may still run (slotmover status %s --nats …)", t.ID, m.TargetID, err, t.ID)
				return mover.Phase(t.Phase)
			}
			continue
		}
		failures, t = 0, got[0]
		progress(mover.Progress{Phase: mover.Phase(t.Phase), KeysCopied: t.KeysCopied, BytesCopied: t.BytesCopied, Elapsed: time.Since(t.StartTime),
			Throttled: time.Duration(t.ThrottledMS) * time.Millisecond})
	}
	if !t.Over() {
		r.Result, r.Err = resultLost, fmt.Sprintf("task %s on %s still running", t.ID, m.TargetID)
		return mover.Phase(t.Phase)
	}
	r.Result, r.Keys, r.Pause, r.Throttled, r.Err = t.Result, t.KeysCopied, t.WritePauseMS, t.ThrottledMS, t.LastError
	r.Total = t.EndTime.Sub(t.StartTime).Milliseconds()
	return mover.Phase(t.Phase)
}

// line prints one progress line: above the bars on a terminal, else on
// stdout with the time.
func (a *applier) line(bars *mpb.Progress, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if bars != nil {
		fmt.Fprintln(bars, msg)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	fmt.Fprintf(a.out, "%s %s\n", time.Now().Format("15:04:05.000"), msg)
}

// appliedReport is apply --json's output.
type appliedReport struct {
	DryRun bool      `json:"dry_run"`
	Moved  int       `json:"moved"` // moves that moved (or passed the check, for a dry run)
	Moves  []applied `json:"moves"`
}

func printAppliedJSON(w io.Writer, results []applied, dryRun bool) {
	rep := appliedReport{DryRun: dryRun, Moves: results}
	for _, r := range results {
		if r.Result == mover.ResultMoved || r.Result == resultChecked {
			rep.Moved++
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(rep)
}

// printApplied writes the final table, then the errors of the moves that
// did not move.
func printApplied(w io.Writer, results []applied, dryRun bool) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if dryRun {
		fmt.Fprintln(tw, "move\tsource\ttarget\tslots\tcheck\tkeys expected\t")
	} else {
		fmt.Fprintln(tw, "move\tsource\ttarget\tslots\tresult\tkeys\ttotal ms\tpause ms\tthrottled ms\t")
	}
	moved := 0
	for _, r := range results {
		spec := r.Move.Slots
		if len(spec) > 30 {
			spec = spec[:27] + "..."
		}
		if dryRun {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t\n", r.N, r.Move.Source, r.Move.Target, spec, r.Result, r.Keys)
			continue
		}
		if r.Result == mover.ResultMoved {
			moved++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%.1f\t%d\t\n", r.N, r.Move.Source, r.Move.Target, spec, r.Result, r.Keys, r.Total, r.Pause, r.Throttled)
	}
	tw.Flush()
	for _, r := range results {
		if r.Err != "" {
			task := ""
			if r.Task != "" {
				task = ", task " + r.Task
			}
			fmt.Fprintf(w, "move %d (%s → %s, slots %s%s): %s: %s\n", r.N, r.Move.Source, r.Move.Target, r.Move.Slots, task, r.Result, r.Err)
		}
		if len(r.Repair) > 0 {
			fmt.Fprintf(w, "  to repair:\n    %s\n", strings.Join(r.Repair, "\n    "))
		}
	}
	switch {
	case dryRun:
		fmt.Fprintln(w, "dry run: nothing changed")
	case moved == len(results):
		fmt.Fprintf(w, "all %d moves moved\n", moved)
	default:
		fmt.Fprintf(w, "%d of %d moves moved\n", moved, len(results))
	}
}
