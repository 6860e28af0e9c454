// Package chunk sizes the commands that carry a big key's elements, so
// that none holds a server's main thread longer than a bound: the writes
// that rebuild the key on the target by a cost model of each command (per
// element and per byte, measured on real servers), the scans that read it
// on the source by the round trips they take.
//
// A fixed element count is wrong both ways: 1,000 members of 16 bytes are
// a 0.8 ms ZADD (9 ms while the key's table doubles), 1,000 of 4 KB a
// 20 ms one; and a small count turns a sorted set of 200,000 small
// members into hundreds of round trips.
package chunk

import (
	"iter"
	"time"
)

// Cost is what a command costs a server's main thread per element it
// names and per byte of those elements, in nanoseconds.
type Cost struct {
	Element float64
	Byte    float64
}

// costs were measured on Redis 7.0.15 (2-core VM, jemalloc) from the
// slow log at slowlog-log-slower-than 0; docs/benchmarks.md has the
// tables. Per byte: the slope from 16-byte to 1 KB and 4 KB elements, as
// the median of 60-100 commands of 500 elements.
//
// Per element, for the writes that build a key on the target: the worst
// command seen while a key grows from nothing to 1M elements, over its
// elements. A hash, set or sorted set doubles its table as it grows, and
// the commands right after a doubling run about ten times the median
// (1,000 fields: 0.5 ms at the median, 8.6 ms at worst; 100 fields: 1.2 ms
// at worst), so the median would let those commands far past the bound.
//
// Per element, for the scans that read a key on the source: the median
// on keys of the size this is for (a hash of 1M fields, sets and sorted
// sets of 200k), the dearer of two runs; a scan does not grow the key.
// ZRANGE (a sorted set read in its order, by rank, WITHSCORES): the same
// on a sorted set of 200k 13-byte members, 500 a command (2,000: 190 ns
// each; ZSCAN 860 and 620 in those runs); its bytes cost as a scan's.
var costs = map[string]Cost{
	"HSET":   {Element: 9000, Byte: 5.5},
	"ZADD":   {Element: 9200, Byte: 5.2},
	"SADD":   {Element: 8600, Byte: 5.6},
	"RPUSH":  {Element: 1250, Byte: 5.0},
	"ZSCAN":  {Element: 920, Byte: 0.6},
	"ZRANGE": {Element: 250, Byte: 0.6},
	"HSCAN":  {Element: 1100, Byte: 0.4},
	"SSCAN":  {Element: 520, Byte: 0.7},
}

// unknown is the cost of a command the table lacks: the dearest of it.
var unknown = Cost{Element: 9200, Byte: 5.6}

// CostOf returns the cost of the named command (upper case).
func CostOf(command string) Cost {
	if c, ok := costs[command]; ok {
		return c
	}
	return unknown
}

// Defaults.
const (
	// DefaultTime leaves a busy server (whose commands run up to twice as
	// long as idle) under a 5 ms event. Where many servers share few
	// cores, a command's wall time is many times that: on a fleet
	// rebalance (30 servers on 2 cores), 2 ms let masters' longest events
	// reach 47-102 ms with the budget off, 1 ms 23-81 ms, and the
	// rebalance took 15.6-18.8 s against 18.9-23.6 s (docs/benchmarks.md).
	DefaultTime = 1 * time.Millisecond
	// DefaultElements caps a command when the cost model allows more:
	// beyond it a command saves nothing on a pipelined connection.
	DefaultElements = 1000
)

// Limit bounds the commands that carry elements: at most Elements of
// them, and no more than the cost model says take Time.
type Limit struct {
	Time     time.Duration
	Elements int
}

func (l Limit) withDefaults() Limit {
	if l.Time <= 0 {
		l.Time = DefaultTime
	}
	if l.Elements <= 0 {
		l.Elements = DefaultElements
	}
	return l
}

// Full reports whether a command holding elements elements of bytes bytes
// in all has reached the limit: the next element starts a new command.
func (l Limit) Full(command string, elements, bytes int) bool {
	l = l.withDefaults()
	c := CostOf(command)
	return elements >= l.Elements || c.Element*float64(elements)+c.Byte*float64(bytes) >= float64(l.Time.Nanoseconds())
}

// Split cuts n elements into runs of one command each, [start, end), by
// the bytes size(i) of element i. Every run holds one element at least.
func (l Limit) Split(command string, n int, size func(i int) int) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		start, bytes := 0, 0
		for i := range n {
			bytes += size(i)
			if !l.Full(command, i+1-start, bytes) && i+1 < n {
				continue
			}
			if !yield(start, i+1) {
				return
			}
			start, bytes = i+1, 0
		}
	}
}
