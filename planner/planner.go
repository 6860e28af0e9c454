// Package planner works out which slots to move where: from a cluster's
// state (its masters, their slots, the keys, and optionally the bytes, of
// every slot) it computes a plan of moves that adds empty masters, drains
// masters, or evens out the weight. Make does no I/O and is tested without
// servers; Gather reads the state it needs from a live cluster.
package planner

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/slotmover/slotmover/slots"
)

// Mode is what a plan does.
type Mode string

// Modes.
const (
	Add       Mode = "add"       // new empty masters take an even share
	Drain     Mode = "drain"     // the given masters give every slot away
	Rebalance Mode = "rebalance" // even out the weight of the masters that own slots
)

// Weight is what a slot weighs.
type Weight string

// Weights.
const (
	ByKeys   Weight = "keys"   // CLUSTER COUNTKEYSINSLOT
	ByMemory Weight = "memory" // bytes estimated from sampled MEMORY USAGE
)

// Format is the version of the plan file; Apply refuses others.
const Format = 1

// DefaultThreshold is how far above the mean (a fraction of it) the
// heaviest master may be for --rebalance to find nothing to do.
const DefaultThreshold = 0.02

// tolerance is how close (a fraction of its share) a master's weight must
// come to its share for the planner to stop moving slots to or from it.
const tolerance = 0.005

// ErrNothingToDo is returned when the cluster already is as asked.
var ErrNothingToDo = errors.New("nothing to do")

// Node is one node of the cluster.
type Node struct {
	ID      string
	Addr    string
	Master  bool // flagged master (a failing one too)
	Failing bool // flagged fail or fail?
	Slots   slots.Set
	// Dataset is a master's used_memory_dataset (INFO memory): what a
	// move's bytes are estimated from when the slots' are not read.
	Dataset int64
}

// BigKey is a key FindBigKeys found big.
type BigKey struct {
	Key   string `json:"key"`
	Slot  uint16 `json:"slot"`
	Bytes int64  `json:"bytes"` // MEMORY USAGE (sampled, for a collection)
	Type  string `json:"type"`
}

// View is a cluster's state, as Gather reads it.
type View struct {
	Nodes []Node
	Keys  []int64 // keys of each slot (slots.Count entries)
	// Bytes of each slot, estimated; nil when not read (needed for ByMemory).
	Bytes []int64
	// Marks describe slots that a master has migrating or importing: a
	// move under way or one that stopped half-way. Make refuses to plan
	// over them.
	Marks []string
}

// Request is what to plan.
type Request struct {
	Mode  Mode
	Nodes []string // for Add and Drain: node IDs or HOST:PORT
	By    Weight   // "" for ByKeys
	// MaxMoves bounds the number of moves (one source, one target each); 0 for no bound.
	MaxMoves int
	// Threshold: see DefaultThreshold; 0 takes it.
	Threshold float64
}

// Plan is a list of moves, with the cluster's balance before and after.
type Plan struct {
	Format  int      `json:"format"`
	Mode    Mode     `json:"mode"`
	By      Weight   `json:"by"`
	Nodes   []string `json:"nodes,omitempty"`   // the nodes named, as IDs
	Cluster string   `json:"cluster,omitempty"` // the node the state was read from (set by the caller)
	Created string   `json:"created,omitempty"` // when (set by the caller)
	Moves   []Move   `json:"moves"`
	Before  Balance  `json:"before"`
	After   Balance  `json:"after"` // expected
	// BytesFrom says how the moves' bytes are estimated: BytesSampled or
	// BytesDatasetShare.
	BytesFrom string `json:"bytes_from"`
	// BigKeyBytes is the size from which FindBigKeys listed a key as big
	// (0 when it did not look).
	BigKeyBytes int64 `json:"big_key_bytes,omitempty"`
	// Partial is set when --max-moves stopped the plan short of its goal.
	Partial bool     `json:"partial,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Move is one move of a plan: slots from one source to one target.
type Move struct {
	Source    string   `json:"source"` // HOST:PORT
	SourceID  string   `json:"source_id"`
	Target    string   `json:"target"`
	TargetID  string   `json:"target_id"`
	Slots     string   `json:"slots"` // a spec slots.Parse reads: "0-1364,5000"
	SlotCount int      `json:"slot_count"`
	Keys      int64    `json:"keys"`  // expected, from the key counts
	Bytes     int64    `json:"bytes"` // expected, estimated as Plan.BytesFrom says
	BigKeys   []BigKey `json:"big_keys,omitempty"`
}

// How a plan's bytes are estimated.
const (
	// BytesSampled: each slot's keys times the mean MEMORY USAGE of those
	// sampled (ByMemory).
	BytesSampled = "memory_usage_sample"
	// BytesDatasetShare: the source's used_memory_dataset times the move's
	// share of its keys (ByKeys, which reads no key's size), as a move's
	// preflight estimates the room the target needs.
	BytesDatasetShare = "dataset_share"
)

// Balance is the weight of every master, and the imbalance of the masters
// that share the weight once the plan is done (the owners of slots and the
// added masters; without the drained ones): the heaviest one's weight over
// their mean.
type Balance struct {
	Masters   []MasterWeight `json:"masters"`
	Mean      float64        `json:"mean"`
	Imbalance float64        `json:"imbalance"` // max/mean, 1 when even
}

// MasterWeight is one master's share.
type MasterWeight struct {
	ID     string `json:"id"`
	Addr   string `json:"addr"`
	Slots  int    `json:"slots"`
	Keys   int64  `json:"keys"`
	Bytes  int64  `json:"bytes,omitempty"`
	Weight int64  `json:"weight"` // keys or bytes, as the plan is by
}

// Make computes a plan for req from the state v. It does no I/O. Every
// error it returns is bad input (or ErrNothingToDo, wrapped).
func Make(v *View, req Request) (*Plan, error) {
	if req.By == "" {
		req.By = ByKeys
	}
	if req.Threshold <= 0 {
		req.Threshold = DefaultThreshold
	}
	if req.MaxMoves < 0 {
		return nil, fmt.Errorf("max moves %d: must be 0 (no bound) or more", req.MaxMoves)
	}
	if len(v.Keys) != slots.Count {
		return nil, fmt.Errorf("the state has key counts of %d slots, not %d", len(v.Keys), slots.Count)
	}
	switch req.By {
	case ByKeys:
	case ByMemory:
		if len(v.Bytes) != slots.Count {
			return nil, errors.New("weighing by memory needs the bytes of every slot")
		}
	default:
		return nil, fmt.Errorf("unknown weight %q: keys or memory", req.By)
	}
	if len(v.Marks) > 0 {
		return nil, fmt.Errorf("slots are being moved (or a move stopped half-way; slotmover fix repairs that): %s", strings.Join(v.Marks[:min(3, len(v.Marks))], "; "))
	}

	// The masters, and what each slot weighs.
	var masters []int // indexes into v.Nodes
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if !n.Master {
			continue
		}
		if n.Failing && n.Slots.Len() > 0 {
			return nil, fmt.Errorf("master %s (%s) is failing: its slots cannot move; plan once the cluster is healthy", n.Addr, n.ID)
		}
		if !n.Failing {
			masters = append(masters, i)
		}
	}
	p := &Plan{Format: Format, Mode: req.Mode, By: req.By}
	w := make([]int64, slots.Count)
	var total int64
	for _, i := range masters {
		for _, s := range v.Nodes[i].Slots.Slots() {
			w[s] = weigh(v, req.By, s)
			total += w[s]
		}
	}
	if total == 0 {
		// An empty cluster: share the slots instead.
		for _, i := range masters {
			for _, s := range v.Nodes[i].Slots.Slots() {
				w[s] = 1
				total++
			}
		}
		p.Notes = append(p.Notes, fmt.Sprintf("the cluster holds no %s: slots are shared by their number", req.By))
	}
	if total == 0 {
		return nil, errors.New("no master owns slots")
	}

	named, err := resolve(v, req.Nodes)
	if err != nil {
		return nil, err
	}
	for _, i := range named {
		p.Nodes = append(p.Nodes, v.Nodes[i].ID)
	}
	var share, drained []int // who ends up sharing the weight; who gives everything
	switch req.Mode {
	case Add:
		if len(named) == 0 {
			return nil, errors.New("--add needs at least one node")
		}
		for _, i := range named {
			if n := v.Nodes[i].Slots.Len(); n > 0 {
				return nil, fmt.Errorf("--add %s: it already owns %d slots (--add takes empty masters; --rebalance evens out the ones that own slots)", v.Nodes[i].Addr, n)
			}
		}
		share = append(owners(v, masters), named...)
	case Drain:
		if len(named) == 0 {
			return nil, errors.New("--drain needs at least one node")
		}
		for _, i := range named {
			if v.Nodes[i].Slots.Len() == 0 {
				return nil, fmt.Errorf("--drain %s: it owns no slots: %w", v.Nodes[i].Addr, ErrNothingToDo)
			}
		}
		drained = named
		for _, i := range owners(v, masters) {
			if !slices.Contains(named, i) {
				share = append(share, i)
			}
		}
		if len(share) == 0 {
			return nil, errors.New("--drain would leave no master owning slots: add an empty master (--add) first")
		}
	case Rebalance:
		if len(named) > 0 {
			return nil, errors.New("--rebalance takes no nodes")
		}
		share = owners(v, masters)
	default:
		return nil, fmt.Errorf("unknown mode %q", req.Mode)
	}

	// Current weights and shares.
	cur := map[int]int64{}
	sourceKeys := map[int]int64{} // each master's keys before the plan
	have := map[int]*slots.Set{}
	for _, i := range masters {
		set := v.Nodes[i].Slots
		have[i] = &set
		for _, s := range set.Slots() {
			cur[i] += w[s]
			sourceKeys[i] += v.Keys[s]
		}
	}
	goal := map[int]float64{}
	for _, i := range share {
		goal[i] = float64(total) / float64(len(share))
	}
	mean := float64(total) / float64(len(share))
	tol := tolerance * mean
	p.Before = balance(v, masters, have, w, share)
	if req.Mode == Rebalance && (len(share) < 2 || p.Before.Imbalance <= 1+req.Threshold) {
		return nil, fmt.Errorf("the masters are balanced (imbalance %.3f, threshold %.3f): %w", p.Before.Imbalance, 1+req.Threshold, ErrNothingToDo)
	}

	// Roles are fixed up front: a donor never receives and a recipient
	// never gives, so every move takes slots its source owns now, and the
	// moves of a plan do not depend on each other.
	var donors, recipients []int
	if req.Mode == Drain {
		donors = drained
	}
	for _, i := range share {
		switch d := float64(cur[i]) - goal[i]; {
		case d > tol && req.Mode != Drain:
			donors = append(donors, i)
		case d < -tol:
			recipients = append(recipients, i)
		}
	}
	surplus := func(i int) float64 { return float64(cur[i]) - goal[i] } // goal 0 for the drained
	type pair struct{ from, to int }
	var order []pair
	moving := map[pair]*slots.Set{}
	blocked := map[pair]bool{}
	budget := func() bool { return req.MaxMoves == 0 || len(order) < req.MaxMoves }
	take := func(pr pair, r slots.Range) {
		set := moving[pr]
		if set == nil {
			set = &slots.Set{}
			moving[pr] = set
			order = append(order, pr)
		}
		have[pr.from] = without(have[pr.from], r)
		set.AddRange(r)
		have[pr.to].AddRange(r)
		for x := int(r.Start); x <= int(r.End); x++ {
			cur[pr.from] -= w[x]
			cur[pr.to] += w[x]
		}
	}
	// Take from the heaviest, give to the lightest, a contiguous run at a
	// time, until everyone is within tol of its share (or stuck there).
	for iter := 0; iter < 4*slots.Count; iter++ {
		best, amount := pair{-1, -1}, 0.0
		if budget() {
			ds := sortedBy(donors, surplus, true)
			rs := sortedBy(recipients, surplus, false)
		found:
			for _, d := range ds {
				for _, r := range rs {
					pr := pair{d, r}
					if surplus(d) > tol && -surplus(r) > tol && !blocked[pr] {
						best, amount = pr, min(surplus(d), -surplus(r))
						break found
					}
				}
			}
		}
		if best.from < 0 {
			// No new pair (or no budget left): keep filling the existing ones.
			for _, pr := range order {
				if a := min(surplus(pr.from), -surplus(pr.to)); a > tol && !blocked[pr] && a > amount {
					best, amount = pr, a
				}
			}
		}
		if best.from < 0 {
			break
		}
		r, rw, ok := pickRun(have[best.from], w, amount)
		if !ok || float64(rw) >= 2*amount {
			blocked[best] = true // nothing of the donor's would bring them closer
			continue
		}
		take(best, r)
	}
	// A drained master gives what is left (empty slots, slots too heavy
	// to even out exactly) to the master next to them in its moves, or
	// to the lightest.
	for _, d := range drained {
		for _, r := range have[d].Ranges() {
			to := -1
			for _, pr := range order {
				if pr.from == d && (moving[pr].Contains(r.Start-1) || (r.End < slots.Count-1 && moving[pr].Contains(r.End+1))) {
					to = pr.to
					break
				}
			}
			if to < 0 && budget() {
				to = sortedBy(share, surplus, false)[0]
			}
			if to < 0 {
				for _, pr := range sortedPairs(order, func(pr pair) float64 { return surplus(pr.to) }) {
					if pr.from == d {
						to = pr.to
						break
					}
				}
			}
			if to < 0 {
				continue
			}
			take(pair{d, to}, r)
		}
		if n := have[d].Len(); n > 0 {
			p.Partial = true
			p.Notes = append(p.Notes, fmt.Sprintf("%s keeps %d slots: more moves than --max-moves %d would be needed", v.Nodes[d].Addr, n, req.MaxMoves))
		}
	}

	p.BytesFrom = BytesSampled
	if v.Bytes == nil {
		p.BytesFrom = BytesDatasetShare
	}
	for _, pr := range order {
		set := moving[pr]
		m := Move{
			Source: v.Nodes[pr.from].Addr, SourceID: v.Nodes[pr.from].ID,
			Target: v.Nodes[pr.to].Addr, TargetID: v.Nodes[pr.to].ID,
			Slots: set.String(), SlotCount: set.Len(),
		}
		for _, s := range set.Slots() {
			m.Keys += v.Keys[s]
			if v.Bytes != nil {
				m.Bytes += v.Bytes[s]
			}
		}
		if v.Bytes == nil && sourceKeys[pr.from] > 0 {
			// In floating point: a dataset's bytes times a key count can overflow int64.
			m.Bytes = int64(math.Round(float64(v.Nodes[pr.from].Dataset) * float64(m.Keys) / float64(sourceKeys[pr.from])))
		}
		p.Moves = append(p.Moves, m)
	}
	p.After = balance(v, masters, have, w, share)
	if req.Mode != Drain && req.MaxMoves > 0 && len(order) == req.MaxMoves && p.After.Imbalance > 1+req.Threshold {
		p.Partial = true
		p.Notes = append(p.Notes, fmt.Sprintf("--max-moves %d stops the plan short of an even share", req.MaxMoves))
	}
	if len(p.Moves) == 0 {
		var heaviest int64
		for _, d := range donors {
			for _, s := range have[d].Slots() {
				heaviest = max(heaviest, w[s])
			}
		}
		return nil, fmt.Errorf("no slot would bring the masters closer to an even share (a share is %.0f %s; the heaviest slot that could move weighs %d: keys under few hash tags cannot be spread): %w", mean, req.By, heaviest, ErrNothingToDo)
	}
	return p, nil
}

// weigh is slot s's weight.
func weigh(v *View, by Weight, s uint16) int64 {
	if by == ByMemory {
		return v.Bytes[s]
	}
	return v.Keys[s]
}

// resolve finds each named node (ID or HOST:PORT), which must be a master.
func resolve(v *View, names []string) ([]int, error) {
	var out []int
	for _, name := range names {
		found := -1
		for i, n := range v.Nodes {
			if n.ID == name || n.Addr == name {
				found = i
				break
			}
		}
		if found < 0 {
			var known []string
			for _, n := range v.Nodes {
				if n.Master {
					known = append(known, n.Addr+" ("+n.ID[:min(8, len(n.ID))]+"…)")
				}
			}
			return nil, fmt.Errorf("unknown node %q: not in the cluster (its masters: %s)", name, strings.Join(known, ", "))
		}
		n := v.Nodes[found]
		if !n.Master {
			return nil, fmt.Errorf("node %s (%s) is not a master", n.Addr, n.ID)
		}
		if n.Failing {
			return nil, fmt.Errorf("node %s (%s) is failing", n.Addr, n.ID)
		}
		if !slices.Contains(out, found) {
			out = append(out, found)
		}
	}
	return out, nil
}

// owners are the masters that own slots.
func owners(v *View, masters []int) []int {
	var out []int
	for _, i := range masters {
		if v.Nodes[i].Slots.Len() > 0 {
			out = append(out, i)
		}
	}
	return out
}

// pickRun returns the contiguous run of set's slots whose weight comes
// closest to amount, taken from one end of one of set's ranges, so that
// the source keeps contiguous ranges too. Runs that weigh nothing are
// skipped; ok is false when every run does.
func pickRun(set *slots.Set, w []int64, amount float64) (slots.Range, int64, bool) {
	var best slots.Range
	var bestW int64
	bestScore := math.Inf(1)
	consider := func(r slots.Range, rw int64) {
		if rw <= 0 {
			return
		}
		score := math.Abs(float64(rw) - amount)
		if score < bestScore || (score == bestScore && r.End-r.Start < best.End-best.Start) {
			best, bestW, bestScore = r, rw, score
		}
	}
	for _, rg := range set.Ranges() {
		n := int(rg.End-rg.Start) + 1
		// Prefixes: the run [Start, Start+k-1] weighs pre[k].
		pre := make([]int64, n+1)
		for k := 1; k <= n; k++ {
			pre[k] = pre[k-1] + w[int(rg.Start)+k-1]
		}
		k := sort.Search(n+1, func(k int) bool { return float64(pre[k]) >= amount })
		for _, c := range []int{k - 1, k} {
			if c >= 1 && c <= n {
				consider(slots.Range{Start: rg.Start, End: rg.Start + uint16(c-1)}, pre[c])
			}
		}
		// Suffixes: the run [End-k+1, End] weighs pre[n]-pre[n-k].
		k = sort.Search(n+1, func(k int) bool { return float64(pre[n]-pre[n-k]) >= amount })
		for _, c := range []int{k - 1, k} {
			if c >= 1 && c <= n {
				consider(slots.Range{Start: rg.End - uint16(c-1), End: rg.End}, pre[n]-pre[n-c])
			}
		}
	}
	return best, bestW, !math.IsInf(bestScore, 1)
}

// without returns set less the slots of cut.
func without(set *slots.Set, cut slots.Range) *slots.Set {
	out := &slots.Set{}
	for _, s := range set.Slots() {
		if s < cut.Start || s > cut.End {
			out.Add(s)
		}
	}
	return out
}

// sortedBy returns ids ordered by key, descending or ascending; ties keep
// their order.
func sortedBy(ids []int, key func(int) float64, desc bool) []int {
	out := slices.Clone(ids)
	sort.SliceStable(out, func(a, b int) bool {
		if desc {
			return key(out[a]) > key(out[b])
		}
		return key(out[a]) < key(out[b])
	})
	return out
}

func sortedPairs[P any](ps []P, key func(P) float64) []P {
	out := slices.Clone(ps)
	sort.SliceStable(out, func(a, b int) bool { return key(out[a]) < key(out[b]) })
	return out
}

// balance is every master's weight with the slots of have, and the
// imbalance among share.
func balance(v *View, masters []int, have map[int]*slots.Set, w []int64, share []int) Balance {
	var b Balance
	var sum, heaviest int64
	for _, i := range masters {
		set := have[i]
		m := MasterWeight{ID: v.Nodes[i].ID, Addr: v.Nodes[i].Addr, Slots: set.Len()}
		for _, s := range set.Slots() {
			m.Keys += v.Keys[s]
			if v.Bytes != nil {
				m.Bytes += v.Bytes[s]
			}
			m.Weight += w[s]
		}
		b.Masters = append(b.Masters, m)
		if slices.Contains(share, i) {
			sum += m.Weight
			heaviest = max(heaviest, m.Weight)
		}
	}
	if sum > 0 {
		b.Mean = float64(sum) / float64(len(share))
		b.Imbalance = float64(heaviest) / b.Mean
	}
	return b
}
