package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/planview"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/rollout"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

func applyCmd(args []string) int {
	fs := cli.NewFlagSet("apply")
	var cf connFlags
	var parallel int
	var dryRun, asJSON bool
	var snapshot, budget string
	var nice niceFlag
	fs.IntVar(&parallel, "parallel", 1, "run at most `N` moves at a time (never two from the same source)")
	fs.BoolVar(&dryRun, "dry-run", false, "check every move against the cluster and print what would run; change nothing")
	fs.BoolVar(&asJSON, "json", false, "print the outcome as one JSON object on stdout (progress goes to stderr)")
	fs.StringVar(&snapshot, "snapshot", "", "how each move first copies the keys: `auto`, rdb or keys (see slotmover move --help); over NATS, unset keeps each sidecar's setting")
	fs.StringVar(&budget, "budget", "", "each move's impact budget: `default`, off, or max-event=DURATION,max-rise=RATIO (see slotmover move --help); over NATS, unset keeps each sidecar's setting")
	nice.register(fs)
	var d daemonFlags
	fs.StringVar(&d.natsURL, "nats", "", "send each move to its target's sidecar over NATS at this `URL`, instead of running it here")
	fs.StringVar(&d.config, "config", "", "over NATS, connect as the sidecar of this YAML `file` does (servers, credentials, TLS, subject prefix)")
	fs.StringVar(&d.prefix, "nats-subject-prefix", "slotmover", "over NATS: the sidecars' subject prefix")
	cli.Rename(fs, map[string]string{"nats-config": "config", "subject-prefix": "nats-subject-prefix"})
	cf.register(fs)
	pos, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("apply", pos, 1, "one plan file") {
		return exitRefused
	}
	if len(pos) == 0 {
		fmt.Fprintln(os.Stderr, "slotmover apply: give the plan file ('slotmover plan … -o plan.json' writes one)")
		return exitRefused
	}
	path := pos[0]
	if parallel < 1 {
		fmt.Fprintf(os.Stderr, "slotmover apply: --parallel %d: 1 or more\n", parallel)
		return exitRefused
	}
	if err := nice.check(); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
		return exitRefused
	}
	b, err := throttle.ParseBudget(budget)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: --budget: %v\n", err)
		return exitRefused
	}
	p, err := planner.ReadFile(path)
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
	if err := cf.LogFlags.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := io.Writer(os.Stdout)
	if asJSON {
		out = os.Stderr
	}
	r := &rollout.Runner{Plan: p, Parallel: parallel, Budgeted: budget == "" || !b.Off,
		Check: func(ctx context.Context, m planner.Move) error { return rollout.Check(ctx, cf.conn, m) }}
	var results []rollout.Outcome
	if dryRun {
		results = r.DryRun(ctx)
	} else {
		ui := planview.New(ctx, out)
		r.Watch = ui.Watch
		logger := ui.Logger(&cf.LogFlags)
		r.Mover = rollout.Local{Conn: cf.conn, Snapshot: snapshot, Budget: b,
			Logger: func(n int) *slog.Logger { return logger.With("move", n) }}
		if d.natsURL != "" || d.config != "" {
			bus, err := d.bus("slotmover apply")
			if err != nil {
				fmt.Fprintf(os.Stderr, "slotmover apply: %v\n", err)
				return exitRefused
			}
			defer bus.NC.Close()
			sidecars := rollout.Sidecars{Bus: bus, Snapshot: snapshot}
			if budget != "" {
				sidecars.Budget = &b
			}
			// The target's sidecar checks that the slots are still the
			// source's (the request names it).
			r.Mover, r.Check = sidecars, nil
		} else {
			nice.yield(logger)
		}
		results = r.Run(ctx)
		ui.Wait()
	}
	if asJSON {
		planview.PrintJSON(os.Stdout, results, dryRun)
	} else {
		planview.Print(os.Stdout, results, dryRun)
	}
	for _, o := range results {
		if !o.Moved() {
			return exitFailed
		}
	}
	return exitMoved
}
