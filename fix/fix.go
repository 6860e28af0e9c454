// Package fix finds what moves that stopped half-way (a crash, a kill)
// left in a cluster and mends it: it reads every master's own view and
// key counts, plans slot by slot with no I/O (PlanRepairs), and applies
// the repairs (Run): give-backs, claims, rollbacks and cleanups.
package fix

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// NodeState is what fix reads from one master.
type NodeState struct {
	Addr string
	// Top is the master's own view of the cluster: only a node's own line
	// carries its importing and migrating marks, and only its own line says
	// what it claims. Nil when the master could not be read (Err says why).
	Top *cluster.Topology
	Err error
	// Keys counts the keys the master holds per slot, owned or not (slots
	// without keys are left out).
	Keys map[uint16]int64
	// GuardedRelease says that the master, as a move's source, releases
	// slots only at an offset its target had reached (Valkey 8, see
	// cutover.Plan.SetSlotBlocks), and that a target importing them takes
	// them over by gossip once it no longer claims them.
	GuardedRelease bool
	// RunID is the master's run_id, new at every start.
	RunID string
	// HeldAll are slots whose every key the master is known to have held
	// since it last started (Options.Held, or a claim of this run of fix):
	// one of them it holds no key of was emptied by its clients, not lost,
	// so copies of its keys elsewhere are orphans all the same.
	HeldAll *slots.Set
}

// Held is evidence that Owner held every key of Slots when it took them
// over (a move's claim, which comes only after the target applied every
// write, or fix's own claim), while its run ID was RunID. It holds for as
// long as the owner's run ID is unchanged: a restart, the only way an owner
// loses keys behind its clients' backs (a stale RDB, no persistence),
// gives it a new one.
type Held struct {
	Owner string // node ID
	RunID string
	Slots *slots.Set
}

// RepairKind is what a repair does.
type RepairKind string

const (
	// RepairGiveBack: the source released the slots to a target that never
	// claimed them (a move stopped between release and claim). The target
	// may lack the source's last writes (those between the fence and the
	// release, when the write pause did not hold), while the source holds
	// every key of the slots as of the release: it refuses writes in slots
	// it does not own, and its orphans are only removed after a claim. So
	// the source takes the slots back (DELSLOTS where its view names
	// another owner, ADDSLOTS; no epoch bump: nobody else was told), then
	// the target is rolled back.
	RepairGiveBack RepairKind = "give-back"
	// RepairClaim: as a give-back, but the source's release was guarded
	// (NodeState.GuardedRelease): the target had applied every write the
	// source accepted in the slots before the source released them, and
	// would take them over by gossip anyway, which a give-back would race
	// (two owners: the loser deletes its keys). So the target claims them
	// (bumping its epoch), the source is told, and its keys are cleaned up.
	RepairClaim RepairKind = "claim"
	// RepairRollback: the node imports slots that their owner never
	// released (a move stopped before the switch, or a cleanup stopped with
	// its marks on). The node's keys of the slots go, then the marks.
	RepairRollback RepairKind = "rollback"
	// RepairCleanup: the node holds keys of slots it neither owns nor
	// imports, while a healthy master claims them and holds keys of them:
	// orphans of a move whose cleanup did not run. They go.
	RepairCleanup RepairKind = "cleanup"
)

// Repair is one step of fix, on one node.
type Repair struct {
	Kind   RepairKind
	NodeID string // where it runs: for a give-back, the source; for a claim, the target
	Addr   string
	Slots  *slots.Set
	// Owner is, for a rollback or a cleanup, the master that claims the
	// slots and holds their keys: the node's keys of them are copies or
	// orphans of its own.
	Owner string
	// Target and TargetAddr are, for a give-back, the node that imported
	// the slots and is rolled back once the source owns them again.
	Target, TargetAddr string
	// Source and SourceAddr are, for a claim, the node that released the
	// slots, told the new owner once the target claims them.
	Source, SourceAddr string
	Why                string
}

func (r Repair) String() string {
	switch r.Kind {
	case RepairGiveBack:
		return fmt.Sprintf("%s slots %s on %s, then rollback on %s: %s", r.Kind, r.Slots, r.Addr, r.TargetAddr, r.Why)
	case RepairClaim:
		return fmt.Sprintf("%s slots %s on %s, released by %s: %s", r.Kind, r.Slots, r.Addr, r.SourceAddr, r.Why)
	}
	return fmt.Sprintf("%s slots %s on %s: %s", r.Kind, r.Slots, r.Addr, r.Why)
}

// Plan is what fix found: the repairs, what it leaves alone and why (Notes),
// and the conflicts it refuses to touch (Refused, over RefusedSlots).
type Plan struct {
	Repairs      []Repair
	Notes        []string
	Refused      []string
	RefusedSlots *slots.Set
}

// PlanRepairs reads the masters' states and says, slot by slot, what moves
// stopped half-way left behind and how to undo it, without losing a write:
//
//   - A slot that its source released to a target that never claimed it is
//     given back to the source (the only node sure to hold every write),
//     if the source holds its keys (or the target holds none); claimed by
//     the target if the release was guarded (RepairClaim), if the target
//     holds its keys (or the source holds none).
//   - A slot imported from a healthy owner that claims it in its own view is
//     rolled back on the importer, if the owner holds keys of it (or the
//     importer holds none).
//   - Keys of a slot on a master that neither owns nor imports it are
//     cleaned up only if one healthy master claims the slot in its own view
//     and holds keys of it. A holder's own idea of the owner is never
//     enough, and a node that is unreachable or flagged fail or fail? by any
//     view is never trusted as an owner.
//
// Slots that two masters claim each in its own view, or that two masters
// import (a source restarted after its release marks the slots of its keys
// importing from the target, which imports them from it), are refused:
// Refused says who claims what and what to check. What it cannot judge safely (a legacy migration
// with MIGRATING marks, which redis-cli --cluster fix handles; a slot whose
// owner is down) is returned as notes and left alone, and so is every master
// that could not be read: its marks and keys are unknown. Only slots in only
// are looked at (all if nil). Give-backs come first. It does no I/O.
func PlanRepairs(states map[string]*NodeState, only *slots.Set) Plan {
	p := &planner{states: states, suspect: map[string]string{}, repairs: map[repairKey]*Repair{}}
	for _, id := range slices.Sorted(maps.Keys(states)) {
		if st := states[id]; st.Top == nil {
			p.suspect[id] = fmt.Sprintf("unreachable (%v)", st.Err)
			// Said even when no slot names it: its own marks and keys
			// (a target's import, orphans) were never seen, so "nothing
			// to repair" would not be true of it.
			p.unread = append(p.unread, fmt.Sprintf("%s could not be read (%v): its slots, marks and keys were not looked at, and it is trusted as the owner of none: run fix again once it is back", p.addr(id), st.Err))
		} else {
			p.ids = append(p.ids, id)
		}
	}
	for _, id := range p.ids {
		v := states[id].Top
		for _, n := range v.Nodes {
			if _, ok := p.suspect[n.ID]; !ok && n.Failing() {
				flag := "fail"
				if !n.Is("fail") {
					flag = "fail? (pfail)"
				}
				p.suspect[n.ID] = fmt.Sprintf("flagged %s by %s", flag, v.Myself.Addr)
			}
		}
	}
	for x := 0; x < slots.Count; x++ {
		if s := uint16(x); only == nil || only.Contains(s) {
			p.slot(s)
		}
	}
	return p.plan()
}

type repairKey struct {
	kind        RepairKind
	node, other string
}

type planner struct {
	states  map[string]*NodeState
	ids     []string          // the masters that were read, sorted
	suspect map[string]string // node ID → why it is not trusted as an owner
	unread  []string          // a note per master that could not be read
	repairs map[repairKey]*Repair
	notes   grouped
	refused grouped
	refSet  slots.Set
}

// grouped gathers per-slot messages into one per text, over the slots it
// concerns: "{slots}" in a text becomes "slot 5" or "slots 0-99,120",
// "{keys}" the sum of the keys given with each slot.
type grouped struct {
	order []string
	sets  map[string]*slots.Set
	keys  map[string]int64
}

func (g *grouped) add(s uint16, keys int64, text string) {
	if g.sets == nil {
		g.sets, g.keys = map[string]*slots.Set{}, map[string]int64{}
	}
	if g.sets[text] == nil {
		g.sets[text] = slots.NewSet()
		g.order = append(g.order, text)
	}
	g.sets[text].Add(s)
	g.keys[text] += keys
}

func (g *grouped) render() []string {
	var out []string
	for _, text := range g.order {
		set := g.sets[text]
		what := "slots " + set.String()
		if set.Len() == 1 {
			what = "slot " + set.String()
		}
		out = append(out, strings.NewReplacer("{slots}", what, "{keys}", fmt.Sprint(g.keys[text])).Replace(text))
	}
	return out
}

// addr names a node by its address, as any view knows it.
func (p *planner) addr(id string) string {
	if st := p.states[id]; st != nil && st.Addr != "" {
		return st.Addr
	}
	for _, st := range p.states {
		if st.Top != nil {
			if n := st.Top.ByID(id); n != nil && n.Addr != "" {
				return n.Addr
			}
		}
	}
	return id
}

func (p *planner) keys(id string, s uint16) int64 {
	if st := p.states[id]; st != nil {
		return st.Keys[s]
	}
	return 0
}

// backs reports whether owner id stands for every key of s: it holds some,
// or it is known to have held them all since it last started (HeldAll), so
// that an empty slot was emptied by its clients.
func (p *planner) backs(id string, s uint16) bool {
	st := p.states[id]
	return p.keys(id, s) > 0 || (st != nil && st.HeldAll != nil && st.HeldAll.Contains(s))
}

func (p *planner) repair(kind RepairKind, node, other string, s uint16, why string) {
	k := repairKey{kind, node, other}
	r := p.repairs[k]
	if r == nil {
		r = &Repair{Kind: kind, NodeID: node, Addr: p.addr(node), Slots: slots.NewSet(), Why: why}
		switch kind {
		case RepairGiveBack:
			r.Target, r.TargetAddr = other, p.addr(other)
		case RepairClaim:
			r.Source, r.SourceAddr = other, p.addr(other)
		default:
			r.Owner = other
		}
		p.repairs[k] = r
	}
	r.Slots.Add(s)
}

func (p *planner) refuse(s uint16, text string) {
	p.refused.add(s, 0, text)
	p.refSet.Add(s)
}

func (p *planner) slot(s uint16) {
	var claim, imp, mig []string
	for _, id := range p.ids {
		me := p.states[id].Top.Myself
		if me.Slots.Contains(s) {
			claim = append(claim, id)
		}
		if me.Importing[s] != "" {
			imp = append(imp, id)
		}
		if me.Migrating[s] != "" {
			mig = append(mig, id)
		}
	}
	switch {
	case len(claim) > 1:
		var who []string
		for _, id := range claim {
			who = append(who, fmt.Sprintf("%s (config epoch %d)", p.addr(id), p.states[id].Top.Myself.Epoch))
		}
		p.refuse(s, fmt.Sprintf("{slots}: claimed by %s, each in its own view. The cluster settles such a conflict by config epoch, and the loser deletes its keys of the slot: check which node has the writes clients made there (and save them) before anything else touches it", strings.Join(who, " and ")))
	case len(imp) == 2 && p.imports(imp[0], s) == imp[1] && p.imports(imp[1], s) == imp[0]:
		a, b := p.addr(imp[0]), p.addr(imp[1])
		p.refuse(s, fmt.Sprintf("{slots}: %s and %s import them from each other. A move's source that restarted after it released the slots marks the slots it holds keys of IMPORTING from the owner it knew, as the target did: each may hold writes the other lacks (the target its copy up to where the move stopped, the source what its persistence kept). Compare their keys of the slots, keep the node with the newest writes (CLUSTER SETSLOT <slot> STABLE and CLUSTER ADDSLOTS <slot> there; remove the other's keys of them, then SETSLOT STABLE on it), then run fix again", a, b))
	case len(imp) > 1:
		var who []string
		for _, id := range imp {
			who = append(who, fmt.Sprintf("%s (from %s)", p.addr(id), p.addr(p.imports(id, s))))
		}
		p.refuse(s, fmt.Sprintf("{slots}: imported by %s. Two moves of the same slots? Stop the one still running, or clear the stale mark (CLUSTER SETSLOT <slot> STABLE on the node whose import is stale, once its keys of the slots are known to be copies), then run fix again", strings.Join(who, " and ")))
	case len(mig) > 0:
		id := mig[0]
		p.notes.add(s, 0, fmt.Sprintf("{slots} migrating from %s to %s the legacy way (MIGRATING/IMPORTING): left to redis-cli --cluster fix", p.addr(id), p.addr(p.states[id].Top.Myself.Migrating[s])))
	case len(imp) == 1:
		p.imported(s, imp[0], claim)
	default:
		p.orphans(s, claim, "")
	}
}

// imports returns the node id imports s from, per its own view.
func (p *planner) imports(id string, s uint16) string {
	return p.states[id].Top.Myself.Importing[s]
}

// imported plans a slot that exactly one master t imports.
func (p *planner) imported(s uint16, t string, claim []string) {
	f := p.imports(t, s)
	T, F := p.addr(t), p.addr(f)
	src := p.states[f]
	kt := p.keys(t, s)
	switch {
	case f == t:
		// A cleanup that stopped part way (cutover.Cleanup marks the
		// slots it purges importing from the node itself): its keys of
		// them are orphans, and the mark must go.
		if len(claim) != 1 || p.suspect[claim[0]] != "" {
			p.notes.add(s, kt, fmt.Sprintf("%s was cleaning up {slots} (they import from itself) but no healthy master holding their keys claims them: left alone", T))
			return
		}
		if O := p.addr(claim[0]); kt > 0 && !p.backs(claim[0], s) {
			p.notes.add(s, kt, fmt.Sprintf("%s was cleaning up {slots} (they import from itself) and holds {keys} keys of them, whose owner %s holds none and may have restarted since it took them over: left alone (did %s lose its data? check before removing them by hand)", T, O, O))
			return
		}
		kind := RepairCleanup
		if kt == 0 {
			kind = RepairRollback // only the mark is left
		}
		p.repair(kind, t, claim[0], s, "a cleanup of orphaned keys stopped part way: their owner is "+p.addr(claim[0]))
	case src == nil:
		p.notes.add(s, 0, fmt.Sprintf("%s imports {slots} from %s, which is not a master fix knows of: left alone", T, F))
	case p.suspect[f] != "":
		p.notes.add(s, 0, fmt.Sprintf("%s imports {slots} from %s, which is %s: left alone (run fix again once it is back)", T, F, p.suspect[f]))
	case len(claim) == 1 && claim[0] == f:
		if kt > 0 && p.keys(f, s) == 0 {
			p.notes.add(s, kt, fmt.Sprintf("%s holds {keys} keys of {slots}, which it imports from their owner %s, which holds none of them: left alone (did %s lose its data? check before removing them by hand)", T, F, F))
			return
		}
		p.repair(RepairRollback, t, f, s, "it imports them, but their owner "+F+" never released them")
		p.orphans(s, claim, t)
	case len(claim) == 1:
		p.notes.add(s, 0, fmt.Sprintf("%s imports {slots} from %s, but %s claims them: left alone", T, F, p.addr(claim[0])))
	default:
		// Nobody claims the slot: released by f, not claimed by t?
		if o := src.Top.AssignedTo(s); o != nil && o.ID != t {
			p.notes.add(s, 0, fmt.Sprintf("%s imports {slots} from %s, which gave them to %s in its own view: left alone", T, F, p.addr(o.ID)))
			return
		}
		// The other masters were never told (only a claim is followed by
		// the news): one that names another owner saw something else.
		for _, id := range p.ids {
			if id == f || id == t {
				continue
			}
			if o := p.states[id].Top.AssignedTo(s); o != nil && o.ID != f {
				p.notes.add(s, 0, fmt.Sprintf("%s released {slots} to %s, which never claimed them in its own view, but %s sees %s as their owner: left alone (was a claim made, and undone?)", F, T, p.addr(id), p.addr(o.ID)))
				return
			}
		}
		if src.GuardedRelease {
			if kf := p.keys(f, s); kf > 0 && kt == 0 {
				p.notes.add(s, kf, fmt.Sprintf("%s released {slots} to %s, which never claimed them, but %s holds none of their keys while %s holds {keys}: left alone (did %s lose its data? check before it takes them over by gossip)", F, T, T, F, T))
				return
			}
			p.repair(RepairClaim, t, f, s, "it imports them from "+F+", which released them once it had every write made to them (a guarded release): it takes them over")
			p.orphans(s, []string{t}, "")
			return
		}
		if kt > 0 && p.keys(f, s) == 0 {
			p.notes.add(s, kt, fmt.Sprintf("%s released {slots} to %s, which never claimed them, but %s holds none of their keys while %s holds {keys}: left alone (did %s lose its data? check before giving them back by hand)", F, T, F, T, F))
			return
		}
		p.repair(RepairGiveBack, f, t, s, "it released them to "+T+", which never claimed them: it holds every write made to them, the target may not")
		p.orphans(s, []string{f}, t) // copies elsewhere, once f owns the slot again
	}
}

// orphans plans the keys of s held by masters that do not own it (but
// skip, which imports it): they are removed only if one healthy master
// claims it in its own view (or will, once given back) and holds keys of it.
func (p *planner) orphans(s uint16, claim []string, skip string) {
	for _, h := range p.ids {
		k := p.keys(h, s)
		if k == 0 || h == skip || slices.Contains(claim, h) {
			continue
		}
		H := p.addr(h)
		if len(claim) == 0 {
			seen, hint := "unassigned in its view", ""
			if o := p.states[h].Top.AssignedTo(s); o != nil {
				O := p.addr(o.ID)
				seen = "in its view owned by " + O + ", which does not claim them"
				if why := p.suspect[o.ID]; why != "" {
					seen = "in its view owned by " + O + ", which is " + why
					hint = fmt.Sprintf(" (if a move to %s stopped before its claim, these keys are the complete copy: bring %s back and run fix again, or give the slots back to %s by hand)", O, O, H)
				}
			}
			p.notes.add(s, k, fmt.Sprintf("%s holds {keys} keys of {slots}, which no reachable master claims in its own view (%s): left alone%s", H, seen, hint))
			continue
		}
		o := claim[0]
		O := p.addr(o)
		switch {
		case p.suspect[o] != "":
			p.notes.add(s, k, fmt.Sprintf("%s holds {keys} keys of {slots}, whose owner %s is %s: left alone", H, O, p.suspect[o]))
		case !p.backs(o, s):
			p.notes.add(s, k, fmt.Sprintf("%s holds {keys} keys of {slots}, whose owner %s holds none of their keys and may have restarted since it took them over: left alone (did %s lose its data? check before removing them by hand)", H, O, O))
		default:
			p.repair(RepairCleanup, h, o, s, "orphaned keys of slots that "+O+" owns and holds keys of (or held all of since it last started)")
		}
	}
}

func (p *planner) plan() Plan {
	rank := map[RepairKind]int{RepairGiveBack: 0, RepairClaim: 0, RepairRollback: 1, RepairCleanup: 2}
	var out []Repair
	for _, r := range p.repairs {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Repair) int {
		// Give-backs and claims first: they put the slots back in service.
		if rank[a.Kind] == 0 || rank[b.Kind] == 0 {
			if c := cmp.Compare(rank[a.Kind], rank[b.Kind]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(rank[a.Kind], rank[b.Kind]),
			cmp.Compare(a.Owner+a.Target+a.Source, b.Owner+b.Target+b.Source))
	})
	refSet := p.refSet
	return Plan{Repairs: out, Notes: append(p.unread, p.notes.render()...), Refused: p.refused.render(), RefusedSlots: &refSet}
}

// Options configure Run.
type Options struct {
	Seed    cluster.Conn // any master; the others are reached with the same credentials
	Slots   *slots.Set   // only repairs of these slots; nil for all
	DryRun  bool         // plan and report only
	Force   bool         // go on although a move's connections are open
	Cleanup cutover.Pace
	// ReplicaWait bounds the wait for the owner's replicas before a
	// cleanup removes copies (mover.DefaultReplicaWait if zero).
	ReplicaWait time.Duration
	// Held is what a move's record knows of its target: without it, an
	// owner holding no key of a slot might have lost them (see Held), and
	// copies elsewhere are left alone with a note.
	Held   []Held
	Logger *slog.Logger
}

// ErrMoveUnderWay refuses a fix while a move's named connections are open.
var ErrMoveUnderWay = errors.New("a move is under way")

// ErrConflict refuses a fix that found slots claimed or imported by two masters.
var ErrConflict = errors.New("conflicting claims")

// Run finds what stopped moves left in the cluster and mends it: it reads
// every master, plans (PlanRepairs), and unless DryRun applies the repairs,
// then plans again to check that nothing is left. It returns the repairs
// made (those planned, with DryRun or a refusal; on an error, those made
// before it) and the notes. Conflicting claims in the slots
// looked at refuse the whole fix (an *InputError wrapping ErrConflict)
// before anything is changed.
func Run(ctx context.Context, o Options) ([]Repair, []string, error) {
	if o.ReplicaWait <= 0 {
		o.ReplicaWait = mover.DefaultReplicaWait
	}
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
	held := slices.Clone(o.Held)
	vouch(states, held)
	plan := PlanRepairs(states, o.Slots)
	if len(plan.Refused) > 0 {
		return plan.Repairs, plan.Notes, &mover.InputError{Err: refusal(plan, o.Slots)}
	}
	repairs, notes := plan.Repairs, plan.Notes
	if o.DryRun || len(repairs) == 0 {
		return repairs, notes, nil
	}
	var done []Repair
	for _, r := range repairs {
		log.Info("repair", "kind", r.Kind, "node", r.Addr, "slots", r.Slots.String(), "why", r.Why)
		c := clients[r.NodeID]
		var n int64
		switch r.Kind {
		case RepairGiveBack:
			if err = giveBack(ctx, c, clients[r.Target], r); err == nil {
				n, err = cutover.Rollback(ctx, clients[r.Target], r.Slots, o.Cleanup)
				log.Info("given back", "source", r.Addr, "target", r.TargetAddr, "target_keys_removed", n)
			}
		case RepairClaim:
			var runID string
			if runID, err = claim(ctx, c, clients[r.Source], r); err == nil {
				log.Info("claimed", "target", r.Addr, "source", r.SourceAddr)
				// The claim found the target holding every key the
				// source holds: a slot its clients empty before the
				// cleanup below is no reason to keep the source's copies.
				held = append(held, Held{Owner: r.NodeID, RunID: runID, Slots: r.Slots})
				// The other masters are told too, as a move's switch
				// tells them: not needed (the claim's epoch wins by
				// gossip), but clients asking them see the owner at once.
				for id, o := range clients {
					if id == r.NodeID || id == r.Source {
						continue
					}
					if terr := cutover.SetSlots(ctx, o, r.Slots.Slots(), "NODE", r.NodeID); terr != nil {
						log.Warn("a master not told of the claim; it learns it by gossip", "master", o.Options().Addr, "error", terr)
					}
				}
			}
		case RepairRollback:
			if err = backed(ctx, c, clients[r.Owner], r, held); err == nil {
				n, err = cutover.Rollback(ctx, c, r.Slots, o.Cleanup)
				log.Info("rolled back", "node", r.Addr, "keys_removed", n)
			}
		case RepairCleanup:
			// As a move's cleanup: the copies go only once the owner's
			// replicas hold the keys, or a failover to one that trails
			// would lose them.
			if err = backed(ctx, c, clients[r.Owner], r, held); err == nil {
				if _, err = cutover.WaitReplicas(ctx, clients[r.Owner], o.ReplicaWait); err != nil {
					err = fmt.Errorf("the owner's replicas do not have the keys yet, the copies stay: %w", err)
					break
				}
				n, err = cutover.Cleanup(ctx, c, r.Owner, r.Slots, o.Cleanup)
				log.Info("cleaned up", "node", r.Addr, "keys_removed", n)
			}
		}
		if err != nil {
			return done, notes, fmt.Errorf("%s: %w (the repairs after it were not made: run fix again)", r, err)
		}
		done = append(done, r)
	}
	if states, err = readStates(ctx, o.Seed, clients, true); err != nil {
		return done, notes, err
	}
	vouch(states, held)
	if left := PlanRepairs(states, o.Slots); len(left.Repairs)+len(left.Refused) > 0 {
		return done, notes, fmt.Errorf("after the repairs, still to do: %v %v", left.Repairs, left.Refused)
	}
	return done, notes, nil
}

// refusal says which slots are refused and why, and how to repair the others.
func refusal(plan Plan, scope *slots.Set) error {
	msg := fmt.Sprintf("nothing changed:\n  %s", strings.Join(plan.Refused, "\n  "))
	rest := slots.NewSet()
	for x := 0; x < slots.Count; x++ {
		s := uint16(x)
		if (scope == nil || scope.Contains(s)) && !plan.RefusedSlots.Contains(s) {
			rest.Add(s)
		}
	}
	if len(plan.Repairs) > 0 {
		msg += fmt.Sprintf("\nto repair the other slots now: slotmover fix --slots %s", rest)
	}
	return fmt.Errorf("%w, %s", ErrConflict, msg)
}

// giveBack makes the source own r.Slots again (MULTI; CLUSTER DELSLOTS of
// those its view gives to another node; CLUSTER ADDSLOTS; EXEC), after
// checking that the target still imports them from it without a claim and
// that the source holds keys wherever the target does.
func giveBack(ctx context.Context, source, target *redis.Client, r Repair) error {
	tv, err := cluster.Load(ctx, target)
	if err != nil {
		return err
	}
	for _, s := range r.Slots.Slots() {
		if tv.Myself.Slots.Contains(s) || tv.Myself.Importing[s] != r.NodeID {
			return fmt.Errorf("%w: %s no longer imports slot %d from %s without claiming it: run fix again", errChanged, r.TargetAddr, s, r.Addr)
		}
	}
	if err := keysBacked(ctx, target, source, r.Slots, nil); err != nil {
		return err
	}
	sv, err := cluster.Load(ctx, source)
	if err != nil {
		return err
	}
	var unassign, add []uint16
	for _, s := range r.Slots.Slots() {
		if sv.Myself.Slots.Contains(s) {
			continue
		}
		add = append(add, s)
		if sv.AssignedTo(s) != nil {
			unassign = append(unassign, s)
		}
	}
	if len(add) > 0 {
		cmds, err := source.TxPipelined(ctx, func(pl redis.Pipeliner) error {
			if len(unassign) > 0 {
				pl.Do(ctx, cluster.SlotsCommand("DELSLOTS", unassign)...)
			}
			pl.Do(ctx, cluster.SlotsCommand("ADDSLOTS", add)...)
			return nil
		})
		if err != nil {
			for _, c := range cmds {
				if c.Err() != nil {
					return fmt.Errorf("%s on %s: %w", c.Name(), r.Addr, c.Err())
				}
			}
			return fmt.Errorf("give back on %s: %w", r.Addr, err)
		}
	}
	if sv, err = cluster.Load(ctx, source); err != nil {
		return err
	}
	for _, s := range r.Slots.Slots() {
		if !sv.Myself.Slots.Contains(s) {
			return fmt.Errorf("%s does not own slot %d after ADDSLOTS", r.Addr, s)
		}
	}
	return nil
}

// vouch sets each master's HeldAll from the evidence whose run ID is still
// the master's.
func vouch(states map[string]*NodeState, held []Held) {
	for _, h := range held {
		st := states[h.Owner]
		if st == nil || st.RunID == "" || st.RunID != h.RunID {
			continue
		}
		if st.HeldAll == nil {
			st.HeldAll = slots.NewSet()
		}
		for _, r := range h.Slots.Ranges() {
			st.HeldAll.AddRange(r)
		}
	}
}

// runID reads a node's run_id.
func runID(ctx context.Context, c *redis.Client) (string, error) {
	f, err := info.Read(ctx, c, "server")
	if err != nil {
		return "", err
	}
	if f["run_id"] == "" {
		return "", fmt.Errorf("%s reports no run_id", c.Options().Addr)
	}
	return f["run_id"], nil
}

// claim makes the target own r.Slots, after checking that it still imports
// them from the source, that the source does not claim them, and that the
// target holds keys wherever the source does; then tells the source, which
// must know the owner before its keys of the slots are cleaned up. It
// returns the target's run ID, read before the check of its keys.
func claim(ctx context.Context, target, source *redis.Client, r Repair) (string, error) {
	if source == nil {
		return "", fmt.Errorf("no connection to the source %s", r.SourceAddr)
	}
	id, err := runID(ctx, target)
	if err != nil {
		return "", err
	}
	tv, err := cluster.Load(ctx, target)
	if err != nil {
		return "", err
	}
	sv, err := cluster.Load(ctx, source)
	if err != nil {
		return "", err
	}
	all := r.Slots.Slots()
	for _, s := range all {
		if !tv.Myself.Slots.Contains(s) && tv.Myself.Importing[s] != r.Source {
			return "", fmt.Errorf("%w: %s neither owns slot %d nor imports it from %s: run fix again", errChanged, r.Addr, s, r.SourceAddr)
		}
		if sv.Myself.Slots.Contains(s) {
			return "", fmt.Errorf("%w: %s claims slot %d again: run fix again", errChanged, r.SourceAddr, s)
		}
	}
	if err := keysBacked(ctx, source, target, r.Slots, nil); err != nil {
		return "", err
	}
	if err := cutover.Claim(ctx, target, r.NodeID, r.Slots, true); err != nil {
		return "", err
	}
	return id, cutover.SetSlots(ctx, source, all, "NODE", r.NodeID)
}

var errChanged = errors.New("the cluster changed since the plan")

// backed checks, right before a rollback or a cleanup removes a node's keys,
// that the owner still claims every slot in its own view and holds keys of
// each slot the node holds keys of, unless held shows that it held every
// key of the slot since it last started.
func backed(ctx context.Context, node, owner *redis.Client, r Repair, held []Held) error {
	if owner == nil {
		return fmt.Errorf("no connection to the owner %s", r.Owner)
	}
	ov, err := cluster.Load(ctx, owner)
	if err != nil {
		return err
	}
	for _, s := range r.Slots.Slots() {
		if !ov.Myself.Slots.Contains(s) {
			return fmt.Errorf("%w: %s no longer claims slot %d: run fix again", errChanged, owner.Options().Addr, s)
		}
	}
	var emptied *slots.Set
	if slices.ContainsFunc(held, func(h Held) bool { return h.Owner == r.Owner }) {
		id, err := runID(ctx, owner)
		if err != nil {
			return err
		}
		states := map[string]*NodeState{r.Owner: {RunID: id}}
		vouch(states, held)
		emptied = states[r.Owner].HeldAll
	}
	return keysBacked(ctx, node, owner, r.Slots, emptied)
}

// keysBacked fails if holder has keys of a slot of set of which backer has
// none, but for the slots of emptied (nil for none).
func keysBacked(ctx context.Context, holder, backer *redis.Client, set, emptied *slots.Set) error {
	all := set.Slots()
	h, err := cluster.CountKeys(ctx, holder, all)
	if err != nil {
		return err
	}
	top, err := cluster.Load(ctx, holder)
	if err != nil {
		return err
	}
	if err := discountLocks(ctx, holder, top.Myself.Importing, all, h); err != nil {
		return err
	}
	b, err := cluster.CountKeys(ctx, backer, all)
	if err != nil {
		return err
	}
	for i, s := range all {
		if h[i] > 0 && b[i] == 0 && (emptied == nil || !emptied.Contains(s)) {
			return fmt.Errorf("%w: %s holds %d keys of slot %d and %s none: run fix again", errChanged, holder.Options().Addr, h[i], s, backer.Options().Addr)
		}
	}
	return nil
}

// discountLocks takes a stopped move's lock (mover.LockKey, Valkey 8) out
// of a node's key counts of the slots it imports (counts[i] is of list[i]):
// it is no key of theirs, and a rollback removes it with the copies.
func discountLocks(ctx context.Context, c *redis.Client, imports map[uint16]string, list []uint16, counts []int64) error {
	var at []int
	for i, s := range list {
		if _, ok := imports[s]; ok && counts[i] > 0 {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	exists := make([]*redis.IntCmd, len(at))
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range at {
			p.Do(ctx, "ASKING")
			exists[j] = p.Exists(ctx, mover.LockKey(list[i]))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("look for moves' locks on %s: %w", c.Options().Addr, err)
	}
	for j, i := range at {
		counts[i] -= exists[j].Val()
	}
	return nil
}

// readTimeout bounds the reading of one master: one that does not answer
// is unreachable, and fix trusts nothing it would have said.
const readTimeout = 10 * time.Second

// readStates reads every master's own view and key counts, opening a
// client per master in clients. The masters are those of the seed's view
// and of every view read from them, failed or not: one that cannot be read
// is kept with its error, and never trusted as an owner. Unless force, a
// connection named by a move (cluster.NamePrefix) on any master refuses the
// fix: that move is alive and its marks are not leftovers.
func readStates(ctx context.Context, seed cluster.Conn, clients map[string]*redis.Client, force bool) (map[string]*NodeState, error) {
	sc := seed.Client()
	top, err := cluster.Load(ctx, sc)
	sc.Close()
	if err != nil {
		return nil, &mover.InputError{Err: err}
	}
	states := map[string]*NodeState{}
	var live []string
	queue := slices.Clone(top.Nodes)
	seen := map[string]bool{}
	all := make([]uint16, slots.Count)
	for i := range all {
		all[i] = uint16(i)
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if seen[m.ID] || !m.Is("master") {
			continue
		}
		seen[m.ID] = true
		st := &NodeState{Addr: m.Addr}
		states[m.ID] = st
		if m.Addr == "" || strings.HasPrefix(m.Addr, ":") {
			st.Err = errors.New("no address known")
			continue
		}
		c := clients[m.ID]
		if c == nil {
			c = seed.With(m.Addr).Client()
			clients[m.ID] = c
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		own, err := cluster.Load(rctx, c)
		var counts []int64
		if err == nil && own.Myself.ID != m.ID {
			err = fmt.Errorf("%s answers as node %s", m.Addr, own.Myself.ID)
		}
		if err == nil && !own.Myself.Is("master") {
			cancel()
			delete(states, m.ID) // a replica by now (failed over)
			continue
		}
		if err == nil {
			counts, err = cluster.CountKeys(rctx, c, all)
		}
		if err == nil {
			st.GuardedRelease, err = cutover.SetSlotBlocks(rctx, c)
		}
		if err == nil {
			st.RunID, err = runID(rctx, c)
		}
		if err == nil {
			err = discountLocks(rctx, c, own.Myself.Importing, all, counts)
		}
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			st.Err = err
			continue
		}
		st.Top, st.Keys = own, map[uint16]int64{}
		for i, n := range counts {
			if n > 0 {
				st.Keys[uint16(i)] = n
			}
		}
		queue = append(queue, own.Nodes...)
		if !force {
			tasks, err := cluster.MoveTasks(ctx, c)
			if err != nil {
				return nil, err
			}
			for _, name := range tasks {
				live = append(live, fmt.Sprintf("task %s on %s", name, m.Addr))
			}
		}
	}
	if len(live) > 0 {
		slices.Sort(live)
		live = slices.Compact(live)
		return nil, &mover.InputError{Err: fmt.Errorf("%w (%s): wait for it, or stop it first (--force if it is gone and its connections hang)", ErrMoveUnderWay, strings.Join(live, ", "))}
	}
	return states, nil
}
