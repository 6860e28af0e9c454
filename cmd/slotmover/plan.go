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
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/slotmover/slotmover/internal/cli"
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
	extra, code, ok := parseFlags(fs, args)
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
	if refuseExtra("plan", extra, nodes, "words only as the nodes of --add or --drain") {
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
		if err := writePlan(out, p); err != nil {
			fmt.Fprintf(os.Stderr, "slotmover plan: %v\n", err)
			return exitFailed
		}
	}
	if jsonOut {
		printJSON(os.Stdout, p)
	} else {
		printPlan(os.Stdout, p)
		if out != "" {
			fmt.Fprintf(os.Stdout, "\nplan written to %s: slotmover apply %s\n", out, out)
		}
	}
	return exitMoved
}

// printPlan writes p as tables: the moves, then every master's weight
// before and after.
func printPlan(w io.Writer, p *planner.Plan) {
	what := string(p.Mode)
	if len(p.Nodes) > 0 {
		var names []string
		for _, id := range p.Nodes {
			names = append(names, addrOf(p, id))
		}
		what += " " + strings.Join(names, " ")
	}
	fmt.Fprintf(w, "plan: %s, by %s: %d moves\n\n", what, p.By, len(p.Moves))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tsource\ttarget\tslots\tslot count\tkeys\tbytes (est.)\tbig keys\t")
	for i, m := range p.Moves {
		spec := m.Slots
		if len(spec) > 40 {
			spec = spec[:37] + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t\n", i+1, m.Source, m.Target, spec, m.SlotCount, m.Keys, mib(m.Bytes), len(m.BigKeys))
	}
	tw.Flush()
	switch p.BytesFrom {
	case planner.BytesSampled:
		fmt.Fprintf(w, "bytes: each slot's keys times the mean MEMORY USAGE of up to %d of them\n", planner.DefaultSample)
	case planner.BytesDatasetShare:
		fmt.Fprintln(w, "bytes: the source's used_memory_dataset times the move's share of its keys")
	}
	printBigKeys(w, p)
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "master\tid\tslots before\tslots after\t%s before\t%s after\t\n", p.By, p.By)
	for i, b := range p.Before.Masters {
		a := p.After.Masters[i]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t\n", b.Addr, b.ID[:min(8, len(b.ID))], b.Slots, a.Slots, weight(p, b.Weight), weight(p, a.Weight))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nimbalance (heaviest / mean of the masters that share): %.3f before, %.3f after\n", p.Before.Imbalance, p.After.Imbalance)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// bigKeysShown bounds the big keys printed per move; --json has them all.
const bigKeysShown = 10

// printBigKeys lists each move's big keys, if any.
func printBigKeys(w io.Writer, p *planner.Plan) {
	header := false
	for i, m := range p.Moves {
		if len(m.BigKeys) == 0 {
			continue
		}
		if !header {
			header = true
			fmt.Fprintf(w, "\nbig keys (%s or more by MEMORY USAGE):\n", mib(p.BigKeyBytes))
		}
		for _, k := range m.BigKeys[:min(bigKeysShown, len(m.BigKeys))] {
			fmt.Fprintf(w, "  move %d: %q  %s  %s  slot %d\n", i+1, k.Key, k.Type, mib(k.Bytes), k.Slot)
		}
		if n := len(m.BigKeys) - bigKeysShown; n > 0 {
			fmt.Fprintf(w, "  move %d: and %d more (--json lists them all)\n", i+1, n)
		}
	}
}

func addrOf(p *planner.Plan, id string) string {
	for _, m := range p.Before.Masters {
		if m.ID == id {
			return m.Addr
		}
	}
	return id
}

func weight(p *planner.Plan, w int64) string {
	if p.By == planner.ByMemory {
		return mib(w)
	}
	return fmt.Sprint(w)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// writePlan writes p to path as JSON, the file slotmover apply reads.
func writePlan(path string, p *planner.Plan) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("plan file: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	return nil
}

// readPlan reads a plan file that slotmover plan wrote.
func readPlan(path string) (*planner.Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p planner.Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Format != planner.Format {
		return nil, fmt.Errorf("%s: plan format %d, this slotmover reads %d", path, p.Format, planner.Format)
	}
	if len(p.Moves) == 0 {
		return nil, errors.New(path + ": the plan has no moves")
	}
	return &p, nil
}
