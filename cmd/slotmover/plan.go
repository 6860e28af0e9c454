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

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/internal/planview"
	"github.com/slotmover/slotmover/planner"
)

// nodeList is a flag that takes node IDs or HOST:PORTs, comma-separated
// or repeated.
type nodeList []string

func (l *nodeList) String() string { return strings.Join(*l, ",") }

func (l *nodeList) Type() string { return "nodes" }

func (l *nodeList) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*l = append(*l, n)
		}
	}
	return nil
}

func planCmd(args []string) int {
	fs := cli.NewFlagSet("plan")
	var cf connFlags
	var seed, by, out string
	var add, drain nodeList
	var rebalance, jsonOut bool
	var maxMoves int
	var bigKeyBytes int64
	fs.StringVar(&seed, "cluster", "", "any node of the cluster, `HOST:PORT`")
	fs.Var(&add, "add", "empty masters (already in the cluster) that take an even share: `NODE`s (ID or HOST:PORT), comma-separated or one per word")
	fs.Var(&drain, "drain", "masters that give away every slot: `NODE`s (ID or HOST:PORT)")
	fs.BoolVar(&rebalance, "rebalance", false, "even out the weight of the masters that own slots")
	fs.StringVar(&by, "by", string(planner.ByKeys), "weigh slots by `keys` (CLUSTER COUNTKEYSINSLOT) or memory (MEMORY USAGE of sampled keys)")
	fs.IntVar(&maxMoves, "max-moves", 0, "at most this many moves (one source, one target each); 0 for no bound")
	fs.Int64Var(&bigKeyBytes, "big-key-bytes", planner.DefaultBigKeyBytes, "list the moving keys of at least this many `bytes` (MEMORY USAGE) as big keys")
	fs.BoolVar(&jsonOut, "json", false, "print the plan as JSON instead of a table")
	fs.StringVarP(&out, "output", "o", "", "write the plan (JSON) to this `file`, for slotmover apply")
	cf.register(fs)
	extra, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "slotmover plan: "+format+"\n", a...)
		return exitRefused
	}
	// The words beside the flags are nodes of --add or --drain, if given.
	nodes := 0
	if fs.Changed("add") || fs.Changed("drain") {
		nodes = len(extra)
	}
	if prog.RefuseExtra("plan", extra, nodes, "words only as the nodes of --add or --drain") {
		return exitRefused
	}
	req := planner.Request{By: planner.Weight(by), MaxMoves: maxMoves}
	modes := 0
	if len(add) > 0 || fs.Changed("add") {
		modes++
		req.Mode, req.Nodes = planner.Add, append(add, extra...)
	}
	if len(drain) > 0 || fs.Changed("drain") {
		modes++
		req.Mode, req.Nodes = planner.Drain, append(drain, extra...)
	}
	if rebalance {
		modes++
		req.Mode = planner.Rebalance
	}
	switch {
	case seed == "":
		return bad("--cluster is required")
	case modes != 1:
		return bad("give one of --add NODE…, --drain NODE… or --rebalance")
	case req.By != planner.ByKeys && req.By != planner.ByMemory:
		return bad("--by %q: keys or memory", by)
	case maxMoves < 0:
		return bad("--max-moves %d: 0 (no bound) or more", maxMoves)
	case bigKeyBytes < 1:
		return bad("--big-key-bytes %d: 1 or more", bigKeyBytes)
	}
	conn, err := cf.conn(seed)
	if err != nil {
		return bad("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	p, err := planner.Build(ctx, conn, req, planner.BigKeyOptions{Bytes: bigKeyBytes})
	if errors.Is(err, planner.ErrRead) {
		fmt.Fprintf(os.Stderr, "slotmover plan: %v\n", err)
		return exitFailed
	}
	if err != nil {
		return bad("%v", err)
	}
	if out != "" {
		if err := planner.WriteFile(out, p); err != nil {
			fmt.Fprintf(os.Stderr, "slotmover plan: %v\n", err)
			return exitFailed
		}
	}
	if jsonOut {
		command.PrintJSON(os.Stdout, p)
	} else {
		planview.PrintPlan(os.Stdout, p)
		if out != "" {
			fmt.Fprintf(os.Stdout, "\nplan written to %s: slotmover apply %s\n", out, out)
		}
	}
	return exitMoved
}
