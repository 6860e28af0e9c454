package planview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/slotmover/slotmover/planner"
)

// PrintPlan writes p as tables: the moves, then every master's weight
// before and after.
func PrintPlan(w io.Writer, p *planner.Plan) {
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
