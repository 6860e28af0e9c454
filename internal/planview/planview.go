// Package planview shows a plan's moves as they run (a bar each on a
// terminal, else lines) and their results as a table or JSON: apply's
// output, and the demo's.
package planview

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/rollout"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// UI shows the running moves of a plan: a bar each on a terminal, else a line
// at each phase and every 5 s, with the time.
type UI struct {
	out  io.Writer
	bars *mpb.Progress // nil off a terminal
	mu   sync.Mutex    // serializes plain lines
}

// New returns the view of moves that run until ctx ends, written to out.
func New(ctx context.Context, out io.Writer) *UI {
	ui := &UI{out: out}
	if command.IsTerminal(out) {
		ui.bars = mpb.NewWithContext(ctx, mpb.WithOutput(out), mpb.WithRefreshRate(250*time.Millisecond))
	}
	return ui
}

// Logger logs above the bars, or on stderr.
func (ui *UI) Logger(f *command.LogFlags) *slog.Logger {
	w := io.Writer(os.Stderr)
	if ui.bars != nil {
		w = ui.bars
	}
	l, _ := f.Logger(w) // checked before the moves start
	return l
}

// Wait returns once the bars are drawn for the last time.
func (ui *UI) Wait() {
	if ui.bars != nil {
		ui.bars.Wait()
	}
}

// line prints one progress line: above the bars on a terminal, else with
// the time.
func (ui *UI) line(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if ui.bars != nil {
		fmt.Fprintln(ui.bars, msg)
		return
	}
	ui.mu.Lock()
	defer ui.mu.Unlock()
	fmt.Fprintf(ui.out, "%s %s\n", time.Now().Format("15:04:05.000"), msg)
}

// moveView follows one move.
type moveView struct {
	ui   *UI
	name string
	bar  *mpb.Bar

	mu   sync.Mutex
	last mover.Progress
	// The keys to copy: those planned, or as many as were copied once the
	// workload has added keys to the slots since the plan, so that a bar
	// never runs past its end and a line never says 1200/1000.
	total     int64
	lastLine  time.Time
	lastPhase mover.Phase
}

// Watch is a rollout.Runner's Watch: it follows move o.
func (ui *UI) Watch(o rollout.Outcome) rollout.Watcher {
	m := o.Move
	v := &moveView{ui: ui, name: label(o.N, m), total: m.Keys}
	v.last.Phase = mover.PhasePreflight
	if ui.bars == nil {
		ui.line("%s: slots %s (%d keys expected): started", v.name, m.Slots, m.Keys)
		return v
	}
	v.bar = ui.bars.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(decor.Name(v.name, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			v.mu.Lock()
			defer v.mu.Unlock()
			p := v.last
			return fmt.Sprintf("%-9s keys %d/%d  %.1f  %s  throttled %s", p.Phase, p.KeysCopied, v.total,
				decor.SizeB1024(p.BytesCopied), p.Elapsed.Truncate(100*time.Millisecond), p.Throttled.Truncate(100*time.Millisecond))
		}), decor.Name("  ETA "), decor.OnComplete(decor.AverageETA(decor.ET_STYLE_GO), "done")))
	v.bar.SetTotal(max(v.total, 1), false)
	return v
}

func (v *moveView) Progress(p mover.Progress) {
	v.mu.Lock()
	v.last = p
	grown := p.KeysCopied > v.total
	if grown {
		v.total = p.KeysCopied
	}
	keys := v.total
	due := p.Phase != v.lastPhase || time.Since(v.lastLine) >= 5*time.Second
	if due {
		v.lastPhase, v.lastLine = p.Phase, time.Now()
	}
	v.mu.Unlock()
	if v.bar != nil {
		if grown {
			v.bar.SetTotal(keys, false)
		}
		v.bar.SetCurrent(p.KeysCopied)
		return
	}
	if due {
		v.ui.line("%s: %s, keys %d/%d, %.1f, %s, throttled %s", v.name, p.Phase, p.KeysCopied, keys, decor.SizeB1024(p.BytesCopied),
			p.Elapsed.Truncate(100*time.Millisecond), p.Throttled.Truncate(100*time.Millisecond))
	}
}

func (v *moveView) End(o rollout.Outcome, phase mover.Phase) {
	// The line first: once the last bar ends, the bars print no more.
	if o.Err != "" {
		v.ui.line("%s: %s: %s", v.name, o.Result, o.Err)
	} else {
		v.ui.line("%s: %s: %d keys, pause %.1f ms, total %d ms, throttled %d ms", v.name, o.Result, o.Keys, o.Pause, o.Total, o.Throttled)
	}
	if v.bar == nil {
		return
	}
	v.mu.Lock()
	v.last.Phase, v.last.KeysCopied = phase, o.Keys
	v.total = max(v.total, o.Keys)
	v.mu.Unlock()
	if o.Result == mover.ResultMoved {
		v.bar.SetTotal(-1, true)
	} else {
		v.bar.Abort(false)
	}
}

// label names move n for progress lines and bars.
func label(n int, m planner.Move) string {
	return fmt.Sprintf("#%d %s→%s", n, m.Source, m.Target)
}

// appliedReport is apply --json's output.
type appliedReport struct {
	DryRun bool              `json:"dry_run"`
	Moved  int               `json:"moved"` // moves that moved (or passed the check, for a dry run)
	Moves  []rollout.Outcome `json:"moves"`
}

// PrintJSON writes apply --json's report.
func PrintJSON(w io.Writer, results []rollout.Outcome, dryRun bool) {
	rep := appliedReport{DryRun: dryRun, Moves: results}
	for _, o := range results {
		if o.Moved() {
			rep.Moved++
		}
	}
	command.PrintJSON(w, rep)
}

// Print writes the final table, then the errors of the moves that
// did not move.
func Print(w io.Writer, results []rollout.Outcome, dryRun bool) {
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
