package mover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/slots"
)

// NodeState is what fix reads from one master: its own view of the cluster
// (only a node's own line carries its importing and migrating marks) and
// how many keys it holds in each slot it does not own.
type NodeState struct {
	Top   *cluster.Topology
	Stray map[uint16]int64
}

// RepairKind is what a repair does.
type RepairKind string

const (
	// RepairClaim: the source gave the slots to this node, which never
	// claimed them (a move stopped between release and claim). The node
	// has every key up to the fence, so the move is finished forward.
	RepairClaim RepairKind = "claim"
	// RepairRollback: the node imports slots that their owner never
	// released (a move stopped before the switch, or a cleanup stopped with
	// its marks on). The node's keys of the slots go, then the marks.
	RepairRollback RepairKind = "rollback"
	// RepairCleanup: the node holds keys of slots it neither owns nor
	// imports: orphans of a move whose cleanup did not run. They go.
	RepairCleanup RepairKind = "cleanup"
)

// Repair is one step of fix, on one node.
type Repair struct {
	Kind   RepairKind
	NodeID string
	Addr   string
	Slots  *slots.Set
	Owner  string // for a cleanup: the slots' owner, whose importing mark lets the node touch them
	Why    string
}

func (r Repair) String() string {
	return fmt.Sprintf("%s slots %s on %s: %s", r.Kind, r.Slots, r.Addr, r.Why)
}

// PlanRepairs reads the masters' states and says what moves stopped half-way
// left behind and how to finish or undo it, claims first. What it cannot
// judge (a legacy migration with MIGRATING marks, which redis-cli --cluster
// fix handles; a slot imported from a node that is not there) is returned
// as notes and left alone. It does no I/O.
func PlanRepairs(states map[string]*NodeState) (repairs []Repair, notes []string) {
	var claims, purges []Repair
	for _, id := range slices.Sorted(maps.Keys(states)) {
		n := states[id]
		me := n.Top.Myself
		claim, rollback := slots.NewSet(), slots.NewSet()
		cleanup := map[string]*slots.Set{} // owner → slots
		for _, s := range slices.Sorted(maps.Keys(me.Importing)) {
			from := me.Importing[s]
			src := states[from]
			switch {
			case src == nil:
				notes = append(notes, fmt.Sprintf("%s imports slot %d from %s, which is not a reachable master: left alone", me.Addr, s, from))
			case src.Top.Myself.Migrating[s] != "":
				notes = append(notes, fmt.Sprintf("slot %d is migrating from %s to %s the legacy way (MIGRATING/IMPORTING): left to redis-cli --cluster fix", s, src.Top.Myself.Addr, me.Addr))
			case src.Top.Myself.Slots.Contains(s):
				rollback.Add(s)
			case ownerID(src.Top, s) == me.ID:
				claim.Add(s)
			default:
				notes = append(notes, fmt.Sprintf("%s imports slot %d from %s, which gave it to %s: left alone", me.Addr, s, src.Top.Myself.Addr, ownerID(src.Top, s)))
			}
		}
		for _, s := range slices.Sorted(maps.Keys(n.Stray)) {
			if n.Stray[s] == 0 || me.Importing[s] != "" || me.Slots.Contains(s) {
				continue
			}
			owner := ownerID(n.Top, s)
			if owner == "" {
				notes = append(notes, fmt.Sprintf("%s holds %d keys of slot %d, which no master serves: left alone", me.Addr, n.Stray[s], s))
				continue
			}
			if cleanup[owner] == nil {
				cleanup[owner] = slots.NewSet()
			}
			cleanup[owner].Add(s)
		}
		if claim.Len() > 0 {
			claims = append(claims, Repair{Kind: RepairClaim, NodeID: id, Addr: me.Addr, Slots: claim,
				Why: "its source released them to it, and it holds every key up to the fence"})
		}
		if rollback.Len() > 0 {
			purges = append(purges, Repair{Kind: RepairRollback, NodeID: id, Addr: me.Addr, Slots: rollback,
				Why: "it imports them, but their owner never released them"})
		}
		for _, owner := range slices.Sorted(maps.Keys(cleanup)) {
			purges = append(purges, Repair{Kind: RepairCleanup, NodeID: id, Addr: me.Addr, Slots: cleanup[owner], Owner: owner,
				Why: "orphaned keys of slots that " + owner + " owns"})
		}
	}
	slices.SortStableFunc(purges, func(a, b Repair) int { return cmp.Compare(a.Addr, b.Addr) })
	return append(claims, purges...), notes
}

func ownerID(t *cluster.Topology, s uint16) string {
	if n := t.Owner(s); n != nil {
		return n.ID
	}
	return ""
}

// FixOptions configure Fix.
type FixOptions struct {
	Seed    Conn       // any master; the others are reached with the same credentials
	Slots   *slots.Set // only repairs of these slots; nil for all
	DryRun  bool       // plan and report only
	Force   bool       // go on although a move's connections are open
	Cleanup cutover.Pace
	Logger  *slog.Logger
}

// ErrMoveUnderWay refuses a fix while a move's named connections are open.
var ErrMoveUnderWay = errors.New("a move is under way")

// Fix finds what stopped moves left in the cluster and mends it: it reads
// every master, plans (PlanRepairs), and unless DryRun applies the repairs,
// then plans again to check that nothing is left. It returns the repairs
// applied (or planned) and the notes.
func Fix(ctx context.Context, o FixOptions) ([]Repair, []string, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	clients := map[string]*redis.Client{}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	states, err := readStates(ctx, o.Seed, clients, o.Force)
	if err != nil {
		return nil, nil, err
	}
	repairs, notes := PlanRepairs(states)
	repairs = only(repairs, o.Slots)
	if o.DryRun || len(repairs) == 0 {
		return repairs, notes, nil
	}
	for _, r := range repairs {
		log.Info("repair", "kind", r.Kind, "node", r.Addr, "slots", r.Slots.String(), "why", r.Why)
		c := clients[r.NodeID]
		switch r.Kind {
		case RepairClaim:
			err = cutover.Claim(ctx, c, r.NodeID, r.Slots)
		case RepairRollback:
			var n int64
			n, err = cutover.Rollback(ctx, c, r.Slots, o.Cleanup)
			log.Info("rolled back", "node", r.Addr, "keys_removed", n)
		case RepairCleanup:
			var n int64
			n, err = cutover.Cleanup(ctx, c, r.Owner, r.Slots, o.Cleanup)
			log.Info("cleaned up", "node", r.Addr, "keys_removed", n)
		}
		if err != nil {
			return repairs, notes, fmt.Errorf("%s: %w", r, err)
		}
	}
	if states, err = readStates(ctx, o.Seed, clients, true); err != nil {
		return repairs, notes, err
	}
	if left, _ := PlanRepairs(states); len(only(left, o.Slots)) > 0 {
		return repairs, notes, fmt.Errorf("after the repairs, still to do: %v", left)
	}
	return repairs, notes, nil
}

// only narrows the repairs to the slots of set (all if nil).
func only(repairs []Repair, set *slots.Set) []Repair {
	if set == nil {
		return repairs
	}
	var out []Repair
	for _, r := range repairs {
		in := slots.NewSet()
		for _, s := range r.Slots.Slots() {
			if set.Contains(s) {
				in.Add(s)
			}
		}
		if in.Len() > 0 {
			r.Slots = in
			out = append(out, r)
		}
	}
	return out
}

// readStates reads every master's own view and stray keys, opening a
// client per master in clients. Unless force, a connection named by a move
// (cluster.NamePrefix) on any master refuses the fix: that move is alive
// and its marks are not leftovers.
func readStates(ctx context.Context, seed Conn, clients map[string]*redis.Client, force bool) (map[string]*NodeState, error) {
	sc := seed.Client()
	top, err := cluster.Load(ctx, sc)
	sc.Close()
	if err != nil {
		return nil, &InputError{Err: err}
	}
	states := map[string]*NodeState{}
	var live []string
	for _, m := range top.Masters() {
		c := clients[m.ID]
		if c == nil {
			c = seed.With(m.Addr).Client()
			clients[m.ID] = c
		}
		own, err := cluster.Load(ctx, c)
		if err != nil {
			return nil, err
		}
		var notOwned []uint16
		for s := 0; s < slots.Count; s++ {
			if !own.Myself.Slots.Contains(uint16(s)) {
				notOwned = append(notOwned, uint16(s))
			}
		}
		counts, err := cluster.CountKeys(ctx, c, notOwned)
		if err != nil {
			return nil, err
		}
		st := &NodeState{Top: own, Stray: map[uint16]int64{}}
		for i, n := range counts {
			if n > 0 {
				st.Stray[notOwned[i]] = n
			}
		}
		states[m.ID] = st
		if !force {
			list, err := c.ClientList(ctx).Result()
			if err != nil {
				return nil, fmt.Errorf("CLIENT LIST on %s: %w", m.Addr, err)
			}
			for _, line := range strings.Split(list, "\n") {
				for _, field := range strings.Fields(line) {
					if name, ok := strings.CutPrefix(field, "name="+cluster.NamePrefix); ok {
						live = append(live, fmt.Sprintf("task %s on %s", name, m.Addr))
					}
				}
			}
		}
	}
	if len(live) > 0 {
		slices.Sort(live)
		live = slices.Compact(live)
		return nil, &InputError{Err: fmt.Errorf("%w (%s): wait for it, or stop it first (--force if it is gone and its connections hang)", ErrMoveUnderWay, strings.Join(live, ", "))}
	}
	return states, nil
}
