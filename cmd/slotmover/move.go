package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// moveFlags are the flags of move.
type moveFlags struct {
	connFlags
	nice     niceFlag
	opts     mover.Options
	slotSpec string
	jsonOut  bool
}

func (f *moveFlags) register(fs *pflag.FlagSet) {
	o := &f.opts
	fs.StringVar(&o.Source.Addr, "source", "", "source master `HOST:PORT`")
	fs.StringVar(&o.Target.Addr, "target", "", "target master `HOST:PORT`")
	fs.StringVar(&f.slotSpec, "slots", "", "slots to move: comma-separated slots and ranges, e.g. 0-5460 or 100-200,3000")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON summary on stdout at the end")
	fs.StringVar(&o.TaskID, "task-id", "", "task ID for logs (default random)")
	fs.Int64Var(&o.MaxLag, "max-lag", mover.DefaultMaxLag, "start a cutover when the target trails the source by fewer `bytes` of stream")
	fs.DurationVar(&o.PauseBudget, "pause-budget", mover.DefaultPauseBudget, "CLIENT PAUSE timeout on the source: the longest writers can be held")
	fs.DurationVar(&o.FenceTimeout, "fence-timeout", mover.DefaultFenceTimeout, "give up a cutover attempt (and unpause) if the target has not caught up by then")
	fs.IntVar(&o.MaxAttempts, "max-attempts", mover.DefaultMaxAttempts, "cutover attempts before rolling back")
	fs.DurationVar(&o.MaxCatchUp, "max-catch-up", mover.DefaultMaxCatchUp, "fail (and roll back) a move whose target has not come close enough for a cutover after this long")
	fs.DurationVar(&o.ReplicaWait, "replica-wait", mover.DefaultReplicaWait, "after the switch, wait this long at most for the target's replicas to hold every moved key before the source's copies are removed")
	fs.IntVar(&o.Window, "window", mover.DefaultWindow, "unanswered commands in flight to the target")
	fs.Uint64Var(&o.BigKeyElements, "big-key-elements", mover.DefaultBigKeyElements, "replay collections with at least this many elements as chunked commands")
	fs.BoolVar(&o.ReplyPerKey, "reply-per-key", false, "check the target's reply to every snapshot command instead of turning replies off and proving from its error counts that none failed (slower)")
	fs.IntVar(&o.Chunk, "chunk", mover.DefaultChunk, "elements per command when replaying a big key, at most")
	fs.DurationVar(&o.ChunkTime, "chunk-time", mover.DefaultChunkTime, "the longest a big key's scan on the source or write on the target may hold that server, by a cost model measured per element and byte")
	fs.IntVar(&o.Cleanup.Batch, "cleanup-batch", cutover.DefaultBatch, "orphaned keys removed from the source per round trip")
	fs.DurationVar(&o.Cleanup.Sleep, "cleanup-sleep", time.Millisecond, "pause between cleanup batches")
	fs.StringVar(&o.SpoolDir, "spool-dir", "", "directory for stream spool files (default the system temp dir)")
	fs.Int64Var(&o.MaxSpool, "max-spool", mover.DefaultMaxSpool, "roll back when the source's data not yet applied on the target passes this many `bytes`, in memory and spool files (negative: no bound)")
	fs.BoolVar(&o.AllowEviction, "allow-eviction", false, "move even when the slots' keys look too big for the target's maxmemory (a move still rolls back if the target evicts a key)")
	fs.StringVar(&o.Snapshot, "snapshot", mover.SnapshotAuto, "how the keys are first copied: `auto`, rdb (a full sync: the source forks) or keys (no fork: only the chosen slots' keys are read; a source without a replication backlog starts one, without a fork)")
	fs.Func("budget", "what the move may cost the source and the target, as a probe sees it: `default` (no probe over 20ms, p75 within 2x its idle p99 + 1ms), off, or max-event=DURATION,max-rise=RATIO; the copy and cleanup hold while over it", func(v string) (err error) {
		o.Budget, err = throttle.ParseBudget(v)
		return err
	})
	fs.BoolVar(&o.KeepSourceConfig, "keep-source-config", false, "do not turn off the source's repl-diskless-sync-delay and rdbcompression for the sync")
	f.nice.register(fs)
	f.connFlags.register(fs)
}

// resolve checks the flags and completes the options; errors are bad input.
func (f *moveFlags) resolve() error {
	o := &f.opts
	if o.Source.Addr == "" || o.Target.Addr == "" || f.slotSpec == "" {
		return errors.New("--source, --target and --slots are required")
	}
	if err := f.nice.check(); err != nil {
		return err
	}
	set, err := slots.Parse(f.slotSpec)
	if err != nil {
		return err
	}
	o.Slots = set
	for _, c := range []*mover.Conn{&o.Source, &o.Target} {
		if *c, err = f.conn(c.Addr); err != nil {
			return err
		}
	}
	o.Logger, err = f.Logger(os.Stderr)
	return err
}

func moveCmd(args []string) int {
	fs := cli.NewFlagSet("move")
	var f moveFlags
	f.register(fs)
	words, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("move", words, 0, command.FlagsOnly) {
		return exitRefused
	}
	if err := f.resolve(); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover move: %v\n", err)
		return exitRefused
	}
	f.nice.yield(f.opts.Logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runMove(ctx, &f, os.Stdout, os.Stderr)
}

// runMove runs the move and prints its outcome; it returns the exit code.
func runMove(ctx context.Context, f *moveFlags, stdout, stderr io.Writer) int {
	var show *moveProgress
	if command.IsTerminal(stderr) {
		show = newMoveProgress(ctx, stderr)
		f.opts.Progress = show.update
		f.opts.Logger, _ = f.Logger(show.bars) // checked in resolve; the lines go above the bar
	}
	sum, err := mover.Run(ctx, f.opts)
	if show != nil {
		show.end(sum.Result == mover.ResultMoved)
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.Encode(sum)
	} else {
		fmt.Fprintf(stdout, "%s: slots %s from %s to %s: %d keys (%d big), %d delta commands, pause %.1f ms, total %d ms (%d ms held over budget %s)\n",
			sum.Result, sum.Slots, sum.Source, sum.Target, sum.KeysCopied, sum.BigKeys, sum.DeltaCommands, sum.PauseMS, sum.TotalMS, sum.ThrottledMS, sum.Budget)
		if sum.Snapshot != "" {
			fmt.Fprintf(stdout, "snapshot: %s (%s)\n", sum.Snapshot, sum.SnapshotReason)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "slotmover move: %s: %v\n", sum.Result, err)
		if len(sum.Repair) > 0 {
			fmt.Fprintf(stderr, "to repair:\n  %s\n", strings.Join(sum.Repair, "\n  "))
		}
	}
	switch sum.Result {
	case mover.ResultMoved:
		return exitMoved
	case mover.ResultRefused:
		return exitRefused
	case mover.ResultStuck:
		return exitStuck
	default:
		return exitFailed
	}
}

// moveProgress shows a move's progress on a terminal: a spinner and one
// line of counts under the log, on the progress library apply's bars use.
type moveProgress struct {
	bars *mpb.Progress
	bar  *mpb.Bar
	mu   sync.Mutex
	last mover.Progress
}

func newMoveProgress(ctx context.Context, w io.Writer) *moveProgress {
	m := &moveProgress{bars: mpb.NewWithContext(ctx, mpb.WithOutput(w), mpb.WithRefreshRate(250*time.Millisecond))}
	m.bar = m.bars.New(0, mpb.SpinnerStyle(), mpb.BarWidth(1), mpb.BarFillerClearOnComplete(), mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		return progressLine(m.last)
	})))
	return m
}

func (m *moveProgress) update(p mover.Progress) {
	m.mu.Lock()
	m.last = p
	m.mu.Unlock()
	m.bar.SetCurrent(p.KeysCopied)
}

// end leaves the last line on the terminal and waits for it to be drawn.
func (m *moveProgress) end(moved bool) {
	if moved {
		m.bar.SetTotal(-1, true)
	} else {
		m.bar.Abort(false)
	}
	m.bars.Wait()
}

// progressLine is what a move's progress shows: its phase, the copy, the
// stream, and what held it.
func progressLine(p mover.Progress) string {
	lag := "-"
	if p.Lag >= 0 {
		lag = fmt.Sprintf("%dB", p.Lag)
	}
	rate := float64(p.KeysCopied) / max(p.Elapsed.Seconds(), 0.001)
	held := ""
	if len(p.Holding) > 0 {
		held = "  held: " + strings.Join(p.Holding, "; ")
	}
	return fmt.Sprintf("%-9s keys %d  %.1f  %.0f keys/s  big %d  delta %d  lag %s  %s  throttled %s%s",
		p.Phase, p.KeysCopied, decor.SizeB1024(p.BytesCopied), rate, p.BigKeys, p.DeltaCommands, lag, p.Elapsed.Truncate(100*time.Millisecond),
		p.Throttled.Truncate(100*time.Millisecond), held)
}
