// Package throttle keeps a move inside its impact budget: a prober times
// probes of the servers the move touches, a policy (no I/O) decides from
// those times whether the move may go on, and a gate holds the
// move's work (reads on the source, writes to the target) while it may
// not, or while an operator paused it. It is gh-ost's throttler for a
// Redis move: the signal is what a client of the same servers would see.
package throttle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Budget is what a move may cost the servers it touches, as a client of
// theirs sees it in how long a probe takes.
type Budget struct {
	// Off lets the move run as fast as it can.
	Off bool
	// MaxEvent is the longest a probe may take: one that takes
	// longer (a long main-thread event, a server starved of CPU) holds the
	// move for a while.
	MaxEvent time.Duration
	// MaxRise bounds the probes' times during the move as a multiple of
	// those before it (their p99), with minRise of slack.
	MaxRise float64
}

// Defaults: a client's p99 at most twice what it was, and no event over
// 20 ms.
const (
	DefaultMaxEvent = 20 * time.Millisecond
	DefaultMaxRise  = 2.0
)

// minRise is a rise always within budget: on loopback an idle round trip
// is ~0.1 ms, and a ratio of it alone would hold the move on noise.
const minRise = time.Millisecond

// DefaultBudget is what a move gets unless told otherwise.
func DefaultBudget() Budget { return Budget{MaxEvent: DefaultMaxEvent, MaxRise: DefaultMaxRise} }

// WithDefaults fills the zero fields of b.
func (b Budget) WithDefaults() Budget {
	if b.MaxEvent <= 0 {
		b.MaxEvent = DefaultMaxEvent
	}
	if b.MaxRise <= 0 {
		b.MaxRise = DefaultMaxRise
	}
	return b
}

// String is the budget as ParseBudget reads it.
func (b Budget) String() string {
	if b.Off {
		return "off"
	}
	b = b.WithDefaults()
	return fmt.Sprintf("max-event=%s,max-rise=%s", b.MaxEvent, strconv.FormatFloat(b.MaxRise, 'g', -1, 64))
}

// ErrBadBudget is the cause of every budget ParseBudget refuses.
var ErrBadBudget = errors.New("bad budget")

// ParseBudget reads "off", "default" (or ""), or comma-separated
// max-event=<duration> and max-rise=<ratio>, the others at their defaults.
func ParseBudget(s string) (Budget, error) {
	switch s = strings.TrimSpace(s); s {
	case "off":
		return Budget{Off: true}, nil
	case "", "default", "on":
		return DefaultBudget(), nil
	}
	b := DefaultBudget()
	for part := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Budget{}, fmt.Errorf("%w %q: want off, default, or max-event=<duration>,max-rise=<ratio>", ErrBadBudget, s)
		}
		switch name {
		case "max-event":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return Budget{}, fmt.Errorf("%w: max-event %q is not a positive duration", ErrBadBudget, value)
			}
			b.MaxEvent = d
		case "max-rise":
			r, err := strconv.ParseFloat(value, 64)
			if err != nil || r < 1 {
				return Budget{}, fmt.Errorf("%w: max-rise %q is not a ratio of 1 or more", ErrBadBudget, value)
			}
			b.MaxRise = r
		default:
			return Budget{}, fmt.Errorf("%w: unknown %q (max-event, max-rise)", ErrBadBudget, name)
		}
	}
	return b, nil
}
