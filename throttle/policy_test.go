package throttle

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func idle(d time.Duration) []time.Duration {
	out := make([]time.Duration, idleProbes)
	for i := range out {
		out[i] = d
	}
	return out
}

type probe struct {
	node string
	took time.Duration
	at   time.Duration // after t0
}

// quick is n idle-like probes of s, one every 10 ms from from.
func quick(n int, from time.Duration) []probe {
	var out []probe
	for i := range n {
		out = append(out, probe{"s", 100 * time.Microsecond, from + time.Duration(i)*10*ms})
	}
	return out
}

func TestPolicy(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name   string
		budget Budget
		probes []probe
		at     time.Duration
		hold   string  // "" for go on, else a part of the reason
		then   *Budget // set after the probes
	}{
		{name: "idle-like probes go on", probes: []probe{{"s", 300 * time.Microsecond, 0}, {"s", 400 * time.Microsecond, 10 * ms}, {"s", 200 * time.Microsecond, 20 * ms}, {"s", 250 * time.Microsecond, 30 * ms}}, at: 30 * ms},
		{name: "a rise under the slack goes on", probes: []probe{{"s", ms, 0}, {"s", ms, 10 * ms}, {"s", ms, 20 * ms}, {"s", ms, 30 * ms}}, at: 30 * ms},
		{name: "a rise over the limit holds", probes: []probe{{"s", 2 * ms, 0}, {"s", 2 * ms, 10 * ms}, {"s", 2 * ms, 20 * ms}, {"s", 2 * ms, 30 * ms}}, at: 30 * ms, hold: "probes of s take 2ms (p75), over 1.2ms"},
		{name: "too few probes to judge", probes: []probe{{"s", 5 * ms, 0}, {"s", 5 * ms, 10 * ms}, {"s", 5 * ms, 20 * ms}}, at: 20 * ms},
		{name: "one slow probe among fast ones goes on", probes: []probe{{"s", 5 * ms, 0}, {"s", 100 * time.Microsecond, 10 * ms}, {"s", 100 * time.Microsecond, 20 * ms}, {"s", 100 * time.Microsecond, 30 * ms}}, at: 30 * ms},
		{name: "the target alone over budget holds", probes: []probe{{"s", 100 * time.Microsecond, 0}, {"t", 3 * ms, 0}, {"t", 3 * ms, 10 * ms}, {"t", 3 * ms, 20 * ms}, {"t", 3 * ms, 30 * ms}}, at: 30 * ms, hold: "probes of t"},
		{name: "a long event holds", probes: []probe{{"s", 30 * ms, 0}}, at: 40 * ms, hold: "a probe of s took 30ms (max event 20ms)"},
		{name: "a long event holds as long again", probes: []probe{{"s", 80 * ms, 0}}, at: 79 * ms, hold: "took 80ms"},
		{name: "and no longer once quick probes fill the window", probes: append([]probe{{"s", 80 * ms, 0}}, quick(6, 80*ms)...), at: 130 * ms},
		{name: "not before: it counts for the probes it kept out", probes: append([]probe{{"s", 80 * ms, 0}}, quick(5, 80*ms)...), at: 120 * ms, hold: "probes of s take 80ms (p75)"},
		{name: "a very long event holds for half a second", probes: []probe{{"s", 3 * time.Second, 0}}, at: 499 * ms, hold: "took 3s"},
		{name: "and no more", probes: append([]probe{{"s", 3 * time.Second, 0}}, quick(6, 450*ms)...), at: 500 * ms},
		{name: "a short long event holds for the cool-down", probes: []probe{{"s", 21 * ms, 0}}, at: 49 * ms, hold: "took 21ms"},
		{name: "a higher max event lets it go", budget: Budget{MaxEvent: 50 * ms}, probes: []probe{{"s", 30 * ms, 0}}, at: 10 * ms},
		{name: "a higher rise lets it go", budget: Budget{MaxRise: 25}, probes: []probe{{"s", 2 * ms, 0}, {"s", 2 * ms, 10 * ms}, {"s", 2 * ms, 20 * ms}, {"s", 2 * ms, 30 * ms}}, at: 30 * ms},
		{name: "off never holds", budget: Budget{Off: true}, probes: []probe{{"s", time.Second, 0}, {"s", time.Second, 10 * ms}, {"s", time.Second, 20 * ms}, {"s", time.Second, 30 * ms}}, at: 30 * ms},
		{name: "probes from before a budget turned on are stale", budget: Budget{Off: true}, then: &Budget{}, probes: []probe{
			{"s", 2 * ms, 0}, {"s", 2 * ms, 10 * ms}, {"s", 30 * ms, 20 * ms}, {"s", 2 * ms, 30 * ms}}, at: 30 * ms},
		{name: "a budget changed while on keeps its probes", then: &Budget{MaxRise: 3}, probes: []probe{
			{"s", 2 * ms, 0}, {"s", 2 * ms, 10 * ms}, {"s", 2 * ms, 20 * ms}, {"s", 2 * ms, 30 * ms}}, at: 30 * ms, hold: "probes of s take 2ms (p75), over 1.2ms"},
		{name: "a server stalled most of the time holds between its stalls", probes: []probe{
			{"s", 40 * ms, 0}, {"s", 100 * time.Microsecond, 1 * ms}, {"s", 100 * time.Microsecond, 5 * ms},
			{"s", 40 * ms, 60 * ms}, {"s", 100 * time.Microsecond, 61 * ms}, {"s", 100 * time.Microsecond, 65 * ms},
			{"s", 40 * ms, 120 * ms}, {"s", 100 * time.Microsecond, 121 * ms}, {"s", 100 * time.Microsecond, 125 * ms}}, at: 175 * ms, hold: "probes of s take 40ms (p75)"},
		{name: "old slow probes leave the window", probes: []probe{
			{"s", 5 * ms, 0}, {"s", 5 * ms, 10 * ms}, {"s", 5 * ms, 20 * ms}, {"s", 5 * ms, 30 * ms},
			{"s", 100 * time.Microsecond, 40 * ms}, {"s", 100 * time.Microsecond, 50 * ms}, {"s", 100 * time.Microsecond, 60 * ms},
			{"s", 100 * time.Microsecond, 70 * ms}, {"s", 100 * time.Microsecond, 80 * ms}, {"s", 100 * time.Microsecond, 90 * ms}}, at: 90 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(tc.budget)
			p.Baseline("s", idle(200*time.Microsecond))
			p.Baseline("t", idle(200*time.Microsecond))
			for _, pr := range tc.probes {
				p.Observe(pr.node, pr.took, t0.Add(pr.at))
			}
			if tc.then != nil {
				p.SetBudget(*tc.then)
			}
			hold, why := p.Verdict(t0.Add(tc.at))
			if hold != (tc.hold != "") || !strings.Contains(why, tc.hold) {
				t.Fatalf("hold %v (%q), want %v (%q)", hold, why, tc.hold != "", tc.hold)
			}
		})
	}
}

// The limit follows the idle round trips and a budget changed mid-move.
func TestPolicyLimits(t *testing.T) {
	p := NewPolicy(Budget{})
	p.Baseline("s", append(idle(time.Millisecond), 4*ms)) // the p99 of 17 is the slowest
	if got := p.nodes["s"].limit; got != 8*ms {
		t.Fatalf("limit %s, want 8ms (2x the idle p99)", got)
	}
	p.SetBudget(Budget{MaxRise: 3})
	if got := p.nodes["s"].limit; got != 12*ms {
		t.Fatalf("limit %s after a budget change, want 12ms", got)
	}
	if b := p.Budget(); b.MaxEvent != DefaultMaxEvent || b.MaxRise != 3 {
		t.Fatalf("budget %+v: the unset field takes its default", b)
	}
}

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Budget
		err  string
	}{
		{in: "", want: DefaultBudget()},
		{in: "default", want: DefaultBudget()},
		{in: "off", want: Budget{Off: true}},
		{in: "max-event=50ms", want: Budget{MaxEvent: 50 * ms, MaxRise: DefaultMaxRise}},
		{in: "max-event=5ms, max-rise=1.5", want: Budget{MaxEvent: 5 * ms, MaxRise: 1.5}},
		{in: "max-rise=0.5", err: "not a ratio of 1 or more"},
		{in: "max-event=-1s", err: "not a positive duration"},
		{in: "fast", err: "want off, default"},
		{in: "max-lag=3", err: `unknown "max-lag"`},
	} {
		got, err := ParseBudget(tc.in)
		if tc.err != "" {
			if !errors.Is(err, ErrBadBudget) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBudget(%q): %v, want an ErrBadBudget saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseBudget(got.String()); err != nil || back != got {
			t.Errorf("ParseBudget(%q) = %+v, %v: String does not read back", got.String(), back, err)
		}
	}
}
