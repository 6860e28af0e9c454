package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// fixCmd mends what moves that stopped half-way (a crash, a kill -9, a lost
// network) left in the cluster, from the cluster's own state. Exit codes:
// 0 nothing left to do, 1 a repair failed, 2 refused (bad input, or a move
// is under way).
func fixCmd(args []string) int {
	fs := flag.NewFlagSet("fix", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	node := fs.String("node", "", "any master of the cluster, `HOST:PORT`")
	spec := fs.String("slots", "", "repair only these slots (default all)")
	dryRun := fs.Bool("dry-run", false, "only print what would be done")
	force := fs.Bool("force", false, "go on although connections of a move are open (it is gone, they hang)")
	batch := fs.Int("cleanup-batch", cutover.DefaultBatch, "keys removed per round trip")
	sleep := fs.Duration("cleanup-sleep", time.Millisecond, "pause between removal batches")
	if err := fs.Parse(args); err != nil {
		return exitRefused
	}
	seed, err := cf.conn(*node)
	if err == nil && *node == "" {
		err = errors.New("--node is required")
	}
	var only *slots.Set
	if err == nil && *spec != "" {
		only, err = slots.Parse(*spec)
	}
	log, lerr := cf.logger()
	if err = errors.Join(err, lerr); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	repairs, notes, err := mover.Fix(ctx, mover.FixOptions{
		Seed: seed, Slots: only, DryRun: *dryRun, Force: *force, Cleanup: cutover.Pace{Batch: *batch, Sleep: *sleep}, Logger: log,
	})
	verb := "done"
	if *dryRun {
		verb = "to do"
	}
	for _, r := range repairs {
		fmt.Printf("%s: %s\n", verb, r)
	}
	for _, n := range notes {
		fmt.Printf("note: %s\n", n)
	}
	var refused *mover.InputError
	switch {
	case errors.As(err, &refused):
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitRefused
	case err != nil:
		fmt.Fprintf(os.Stderr, "slotmover fix: %v\n", err)
		return exitFailed
	case len(repairs) == 0:
		fmt.Println("nothing to repair")
	}
	return exitMoved
}
