// Package writecheck is the write checker of the tests, the demo and the
// bench: clients increment named counters and note each outcome in a
// Tally; read back, every counter must hold at least the increments the
// servers acknowledged and at most those plus the ones answered by an
// error, which may have landed or not.
package writecheck

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Tally keeps, per counter, the increments acknowledged and those whose
// outcome is unknown. It is safe for concurrent use. Counters are numbered
// from 0; those checked are the first n and any noted beyond.
type Tally struct {
	name func(i int) string

	mu             sync.Mutex
	acked, unknown []int64
}

// NewTally returns a tally of the counters named name(0), name(1), …,
// n of them at least.
func NewTally(n int, name func(i int) string) *Tally {
	return &Tally{name: name, acked: make([]int64, n), unknown: make([]int64, n)}
}

// Note records the outcome of one increment of counter i: acknowledged
// when err is nil, else unknown (a caller that knows an error reply
// changed nothing, as a refusal, need not note it).
func (t *Tally) Note(i int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.acked) <= i {
		t.acked, t.unknown = append(t.acked, 0), append(t.unknown, 0)
	}
	if err == nil {
		t.acked[i]++
	} else {
		t.unknown[i]++
	}
}

// Verdict is what the counters held when read back.
type Verdict struct {
	Acked int64    // increments acknowledged
	Lost  int64    // of those, missing from the counters
	Extra int64    // increments the counters hold that were never sent
	Wrong []string // the counters that lost or gained, with their values
}

// Check reads every counter noted so far through c; the writers must have
// stopped. A counter that cannot be read is an error, not a loss.
func (t *Tally) Check(ctx context.Context, c redis.Cmdable) (Verdict, error) {
	t.mu.Lock()
	acked, unknown := append([]int64(nil), t.acked...), append([]int64(nil), t.unknown...)
	t.mu.Unlock()
	var v Verdict
	const batch = 1000
	for start := 0; start < len(acked); start += batch {
		p := c.Pipeline()
		gets := make([]*redis.StringCmd, 0, batch)
		for i := start; i < min(start+batch, len(acked)); i++ {
			gets = append(gets, p.Get(ctx, t.name(i)))
		}
		p.Exec(ctx) // each GET's error is read below: redis.Nil is a counter never written
		for k, get := range gets {
			i := start + k
			n, err := get.Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return v, fmt.Errorf("read %s: %w", t.name(i), err)
			}
			v.Acked += acked[i]
			lost, extra := max(acked[i]-n, 0), max(n-acked[i]-unknown[i], 0)
			if lost+extra > 0 {
				v.Lost, v.Extra = v.Lost+lost, v.Extra+extra
				v.Wrong = append(v.Wrong, fmt.Sprintf("%s = %d, acknowledged %d (+%d unknown)", t.name(i), n, acked[i], unknown[i]))
			}
		}
	}
	return v, nil
}
