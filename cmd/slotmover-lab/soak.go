package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/lab/soak"
	"github.com/slotmover/slotmover/mover"
)

// soakCmd runs a checked workload on a cluster while moving slots, then
// verifies every key.
func soakCmd(args []string) int {
	fs := cli.NewFlagSet("soak")
	var c soak.Config
	fs.StringVar(&c.Addr, "cluster", "", "any node of the cluster, `HOST:PORT`")
	fs.DurationVar(&c.Duration, "duration", 0, "how long the workload runs (required); moves still running then get --move-grace to finish")
	fs.IntVar(&c.Rate, "rate", 2000, "operations a second over all workers (0: as fast as they go)")
	fs.Int64Var(&c.MaxOps, "max-ops", 0, "stop the workload after this many operations (0: derived from --rate and --duration)")
	fs.IntVar(&c.Moves, "moves", 0, "number of moves, spread evenly over the duration")
	fs.DurationVar(&c.MoveEvery, "move-every", 0, "start a move this often (default 5s unless --moves is given)")
	fs.IntVar(&c.SlotsPerMove, "slots-per-move", 64, "slots per move")
	fs.StringVar(&c.SlotPick, "slot-pick", soak.SlotsMixed, "which slots: run (contiguous), random, or mixed (in turn)")
	fs.StringVar(&c.Snapshot, "snapshot", "", "the moves' snapshot path: auto, rdb, keys, or alternate (auto for odd moves, rdb for even ones)")
	fs.StringVar(&c.Pick, "pick", soak.PickRandom, "source and target: random, round-robin between masters, or same-source (a move in flight lends its source to the next)")
	fs.IntVar(&c.ParallelMoves, "parallel-moves", 1, "moves in flight at once (never on the same slots)")
	fs.DurationVar(&c.MoveGrace, "move-grace", 2*time.Minute, "how long moves may still run after --duration before they are cancelled")
	fs.IntVar(&c.Keys, "keys", 20000, "tracked keys, spread over all slots")
	fs.IntVar(&c.BigKeys, "big-keys", 4, "of which keys that keep growing (lists and hashes)")
	fs.IntVar(&c.Workers, "workers", 8, "workload goroutines; each owns its share of the keys")
	fs.IntVar(&c.ReadRatio, "read-ratio", 10, "reads per write")
	fs.Float64Var(&c.HotShare, "hot-share", 0.2, "share of operations aimed at keys of the slots being moved, half of them writes (0 for none)")
	fs.DurationVar(&c.OpTimeout, "op-timeout", 5*time.Second, "read/write timeout of workload commands (keep it above the mover's pause budget)")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the random choices (0: a random one, printed in the report)")
	jsonOut := fs.Bool("json", false, "print the report as one JSON object on stdout")
	fs.StringVar(&c.Username, "user", "", "ACL user for Redis")
	var password cli.Secret
	password.Register(fs, "password", "Redis", "SLOTMOVER_PASSWORD")
	var lf command.LogFlags
	lf.Register(fs)
	crashEvery := fs.Int("crash-every", 0, "make every Nth move stop right after the source's release, as a crash there would, and have fix give it back to the source (0: never)")
	words, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("soak", words, 0, command.FlagsOnly) {
		return command.ExitRefused
	}
	var err error
	if c.Password, err = password.Get(); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab soak: %v\n", err)
		return command.ExitRefused
	}
	if c.Addr == "" || c.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "slotmover-lab soak: --cluster and --duration are required")
		return command.ExitRefused
	}
	if c.HotShare == 0 {
		c.HotShare = -1 // the library reads 0 as its default
	}

	if c.Logger, err = lf.Logger(os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab soak: %v\n", err)
		return command.ExitRefused
	}
	if *crashEvery > 0 {
		creds := mover.Conn{Username: c.Username, Password: c.Password}
		c.Mover = soak.CrashingMover(mover.Options{Source: creds, Target: creds, Logger: c.Logger}, *crashEvery)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab soak: %v\n", err)
		var ce *soak.ConfigError
		if errors.As(err, &ce) {
			return command.ExitRefused
		}
		return command.ExitFailed
	}
	if *jsonOut {
		if err := command.PrintJSON(os.Stdout, rep); err != nil {
			fmt.Fprintf(os.Stderr, "slotmover-lab soak: write the report: %v\n", err)
			return command.ExitFailed
		}
	} else {
		rep.WriteText(os.Stdout)
	}
	if !rep.Pass {
		return command.ExitFailed
	}
	return command.ExitDone
}
