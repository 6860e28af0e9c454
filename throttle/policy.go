package throttle

import (
	"fmt"
	"slices"
	"time"
)

// Policy decides, from how long probes of each server a move touches take,
// whether the move may go on. It does no I/O and keeps no clock: the
// prober feeds it and asks it.
//
// A server is within budget while the p75 of its last recentProbes probes
// (a slow probe counted once for each probe interval it took) stays under
// its limit, max(MaxRise × its idle p99, idle p99 +
// minRise), and no probe took longer than MaxEvent in the last while: one
// that did holds the move for as long again (between coolDown and
// maxCoolDown), since a long event is seldom alone.
type Policy struct {
	budget Budget
	nodes  map[string]*node
	order  []string // the nodes in the order they were added, for stable reasons
}

type node struct {
	idle     time.Duration // p99 before the move; 0 until Baseline
	limit    time.Duration
	recent   [recentProbes]time.Duration
	n, next  int
	hotUntil time.Time
	hotTook  time.Duration
}

const (
	recentProbes = 8
	// minProbes is the fewest recent probes the p75 is judged on.
	minProbes = 4
	// coolDown and maxCoolDown bound the hold after a probe over MaxEvent.
	coolDown    = 50 * time.Millisecond
	maxCoolDown = 500 * time.Millisecond
)

// NewPolicy returns a policy for b.
func NewPolicy(b Budget) *Policy {
	return &Policy{budget: b.normal(), nodes: map[string]*node{}}
}

func (b Budget) normal() Budget {
	if b.Off {
		return b
	}
	return b.WithDefaults()
}

// Budget is the budget in force.
func (p *Policy) Budget() Budget { return p.budget }

// SetBudget changes the budget of a running move. A budget turned on
// judges by probes from then on: nobody probes while it is off, and those
// from before are stale.
func (p *Policy) SetBudget(b Budget) {
	wasOff := p.budget.Off
	p.budget = b.normal()
	for _, n := range p.nodes {
		n.limit = p.limitOf(n.idle)
		if wasOff && !b.Off {
			n.n, n.next, n.hotUntil = 0, 0, time.Time{}
		}
	}
}

func (p *Policy) node(name string) *node {
	n := p.nodes[name]
	if n == nil {
		n = &node{}
		p.nodes[name] = n
		p.order = append(p.order, name)
	}
	return n
}

// Baseline takes a server's probe times before the move.
func (p *Policy) Baseline(name string, took []time.Duration) {
	n := p.node(name)
	n.idle = percentile(took, 0.99)
	n.limit = p.limitOf(n.idle)
}

func (p *Policy) limitOf(idle time.Duration) time.Duration {
	b := p.budget.WithDefaults()
	return max(time.Duration(float64(idle)*b.MaxRise), idle+minRise)
}

// Observe takes how long one probe of a server took, at now.
func (p *Policy) Observe(name string, took time.Duration, now time.Time) {
	n := p.node(name)
	// A probe that waited spans the ticks no probe could be sent in: it
	// counts once for each, so that the p75 is over time, not over answers
	// (a server stalled most of the time answers fewer probes than it
	// misses; counted once, its stalls slipped under the p75 by phase).
	for range min(max(int(took/interval), 1), recentProbes) {
		n.recent[n.next] = took
		n.next = (n.next + 1) % recentProbes
		n.n = min(n.n+1, recentProbes)
	}
	if took > p.budget.WithDefaults().MaxEvent {
		n.hotUntil, n.hotTook = now.Add(min(max(took, coolDown), maxCoolDown)), took
	}
}

// Verdict says whether the move must hold at now, and why.
func (p *Policy) Verdict(now time.Time) (hold bool, why string) {
	if p.budget.Off {
		return false, ""
	}
	for _, name := range p.order {
		n := p.nodes[name]
		if now.Before(n.hotUntil) {
			return true, fmt.Sprintf("a probe of %s took %s (max event %s)", name, n.hotTook.Round(time.Microsecond), p.budget.MaxEvent)
		}
		if n.idle == 0 || n.n < minProbes {
			continue
		}
		if p75 := percentile(n.recent[:n.n], 0.75); p75 > n.limit {
			return true, fmt.Sprintf("probes of %s take %s (p75), over %s (%.3gx its %s before the move)",
				name, p75.Round(time.Microsecond), n.limit.Round(time.Microsecond), p.budget.MaxRise, n.idle.Round(time.Microsecond))
		}
	}
	return false, ""
}

// percentile is the q-th of ds by the nearest rank; 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}
