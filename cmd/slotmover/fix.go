package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/fix"
	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// fixCmd mends what moves that stopped half-way (a crash, a kill -9, a lost
// network) left in the cluster, from the cluster's own state, slot by slot,
// never removing keys that no healthy owner holds too. What it cannot judge
// safely it leaves alone and prints as a note. Its exit codes are in
// commands.
func fixCmd(args []string) int {
	fs := cli.NewFlagSet("fix")
	var cf connFlags
	var nice niceFlag
	cf.register(fs)
	nice.register(fs)
	node := fs.String("cluster", "", "any master of the cluster, `HOST:PORT`")
	cli.Rename(fs, map[string]string{"node": "cluster"}) // as plan and soak name it
	spec := fs.String("slots", "", "repair only these slots (default all)")
	dryRun := fs.Bool("dry-run", false, "only print what would be done")
	force := fs.Bool("force", false, "go on although connections of a move are open (it is gone, they hang)")
	batch := fs.Int("cleanup-batch", cutover.DefaultBatch, "keys removed per round trip")
	sleep := fs.Duration("cleanup-sleep", time.Millisecond, "pause between removal batches")
	replicaWait := fs.Duration("replica-wait", mover.DefaultReplicaWait, "before a cleanup, wait this long for the owner's replicas to hold the keys")
	heldBy := fs.String("held-by", "", "with --slots, `NODEID:RUNID`: that node took the slots over holding every key while its run_id was RUNID (a stopped move's target_id and target_run_id); while it still is, a slot of them it holds no key of was emptied, and copies elsewhere go")
	words, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("fix", words, 0, command.FlagsOnly) {
		return exitRefused
	}
	seed, err := cf.conn(*node)
	if err == nil && *node == "" {
		err = errors.New("--cluster is required")
	}
	var only *slots.Set
	if err == nil && *spec != "" {
		only, err = slots.Parse(*spec)
	}
	var held []fix.Held
	if err == nil && *heldBy != "" {
		id, run, ok := strings.Cut(*heldBy, ":")
		switch {
		case !ok || id == "" || run == "":
			err = fmt.Errorf("--held-by %q: want NODEID:RUNID", *heldBy)
		case only == nil:
			err = errors.New("--held-by needs --slots: the slots that node took over")
		default:
			held = []fix.Held{{Owner: id, RunID: run, Slots: only}}
		}
	}
	log, lerr := cf.Logger(os.Stderr)
	if err = errors.Join(err, lerr, nice.check()); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitRefused
	}
	if !*dryRun {
		nice.yield(log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	repairs, notes, err := fix.Run(ctx, fix.Options{
		Seed: seed, Slots: only, DryRun: *dryRun, Force: *force, Cleanup: cutover.Pace{Batch: *batch, Sleep: *sleep}, ReplicaWait: *replicaWait, Held: held, Logger: log,
	})
	var refused *mover.InputError
	verb := "done"
	switch {
	case errors.Is(err, fix.ErrConflict):
		verb = "not done (refused)"
	case *dryRun:
		verb = "to do"
	}
	for _, r := range repairs {
		fmt.Printf("%s: %s\n", verb, r)
	}
	for _, n := range notes {
		fmt.Printf("note: %s\n", n)
	}
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitRefused
	case err != nil:
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitFailed
	case len(notes) > 0 && !*dryRun:
		fmt.Println("not everything repaired: what the notes name is left to an operator")
		return exitStuck
	case len(repairs) == 0 && len(notes) > 0:
		fmt.Println("nothing repaired: what the notes name is left to an operator")
	case len(repairs) == 0:
		fmt.Println("nothing to repair")
	}
	return exitMoved
}
