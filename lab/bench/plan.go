package bench

import (
	"fmt"
	"math"
	"sort"

	"github.com/slotmover/slotmover/slots"
)

// layout is the cluster every run starts from: three masters holding every
// slot, and an empty one (index targetNode) that receives the slots.
var layout = []string{"0-5460", "5461-10922", "10923-16383", ""}

const targetNode = 3

// share is the slots one source gives up.
type share struct {
	Source int // index into layout
	Slots  *slots.Set
}

// plan is what a workload moves: its shares and the reshard arguments that
// move the same slots.
type plan struct {
	Shares   []share
	NumSlots int // --cluster-slots
}

// union is every slot the plan moves.
func (p plan) union() *slots.Set {
	u := &slots.Set{}
	for _, sh := range p.Shares {
		for _, s := range sh.Slots.Slots() {
			u.Add(s)
		}
	}
	return u
}

// planFor returns the shares of a workload; small is the small workload's
// slots (Config.SmallSlots).
func planFor(workload, small string) (plan, error) {
	switch workload {
	case WorkloadSmall:
		n, err := smallSlots(small)
		if err != nil {
			return plan{}, err
		}
		return reshardPlan([]int{0}, n)
	case WorkloadSingle:
		return reshardPlan([]int{0}, 5461)
	case WorkloadScaleout:
		return reshardPlan([]int{0, 1, 2}, 4096)
	}
	return plan{}, fmt.Errorf("unknown workload %q", workload)
}

// reshardPlan computes which slots `redis-cli --cluster reshard` takes from
// each source for numSlots, the way redis-cli 7.0 does it
// (clusterManagerComputeReshardTable): sources by slot count, largest
// first; the first gives ceil(numSlots/total × its count), the others the
// floor of the same; each gives its lowest slots. slotmover is given the
// same slots, and each reshard run checks that they are what moved.
func reshardPlan(sources []int, numSlots int) (plan, error) {
	type src struct {
		idx int
		set *slots.Set
	}
	var list []src
	total := 0
	for _, i := range sources {
		set, err := slots.Parse(layout[i])
		if err != nil {
			return plan{}, fmt.Errorf("layout of node %d: %w", i, err)
		}
		list = append(list, src{i, set})
		total += set.Len()
	}
	// Ties keep the given order; the layout has none at the top.
	sort.SliceStable(list, func(a, b int) bool { return list[a].set.Len() > list[b].set.Len() })
	p := plan{NumSlots: numSlots}
	for k, s := range list {
		f := float64(numSlots) / float64(total) * float64(s.set.Len())
		n := int(math.Floor(f))
		if k == 0 {
			n = int(math.Ceil(f))
		}
		n = min(n, numSlots, s.set.Len())
		taken := &slots.Set{}
		for _, x := range s.set.Slots()[:n] {
			taken.Add(x)
		}
		p.Shares = append(p.Shares, share{Source: s.idx, Slots: taken})
	}
	sort.Slice(p.Shares, func(a, b int) bool { return p.Shares[a].Source < p.Shares[b].Source })
	return p, nil
}
