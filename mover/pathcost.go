package mover

import (
	"fmt"
	"time"

	"github.com/slotmover/slotmover/chunk"
)

// pathFacts is what auto reads of the source before it chooses a path:
// cheap to read, changing nothing.
type pathFacts struct {
	movingKeys   int64            // keys of the moving slots
	sourceKeys   int64            // keys the source holds in all (DBSIZE)
	sourceMemory int64            // the source's used_memory, bytes
	bigElements  map[string]int64 // elements of the moving slots' big keys, by type
	lastForkUS   int64            // the source's latest_fork_usec; 0 if it never forked
}

// movingBytes estimates the memory of the moving keys: their share of
// the source's keys, at the source's mean bytes a key.
func (f pathFacts) movingBytes() float64 {
	if f.sourceKeys == 0 {
		return 0
	}
	return float64(f.movingKeys) * float64(f.sourceMemory) / float64(f.sourceKeys)
}

// pathCost is a path's predicted move: its time, and the longest event
// it causes on the source's main thread.
type pathCost struct {
	Time  time.Duration
	Worst time.Duration
}

// PathPrediction is what the cost model predicted of a move by each
// path, for the summary beside what it took in fact (TotalMS).
type PathPrediction struct {
	KeysMS float64 `json:"keys_ms"`
	RDBMS  float64 `json:"rdb_ms"`
	ForkMS float64 `json:"fork_ms"` // the RDB path's fork: the longest event either path causes on the source
	// What it was predicted from.
	MovingKeys   int64            `json:"moving_keys"`
	SourceKeys   int64            `json:"source_keys"`
	SourceMemory int64            `json:"source_used_memory"`
	BigElements  map[string]int64 `json:"big_elements,omitempty"` // by type; counted only where the keys path was in the running
}

// decide is auto's choice from facts: the path, why, and what was
// predicted, for the summary.
func decide(f pathFacts) (path, why string, pred *PathPrediction) {
	keys, rdb := predictPaths(f)
	path, why = choosePath(keys, rdb)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return path, why, &PathPrediction{KeysMS: ms(keys.Time), RDBMS: ms(rdb.Time), ForkMS: ms(rdb.Worst),
		MovingKeys: f.movingKeys, SourceKeys: f.sourceKeys, SourceMemory: f.sourceMemory, BigElements: f.bigElements}
}

// The cost model of a move, fitted (least squares) to the totals of
// `slotmover-lab bench` runs on a 2-core VM (Redis 7.0.15; source, target and
// mover on the same two cores), every run verified; docs/benchmarks.md
// has them. A move's total: preflight, snapshot, catch-up, cutover and
// the source's cleanup.
//
// The keys path pays for what moves: per key (the survey, a round
// trip's share, DUMP, RESTORE, the cleanup's UNLINK) and per byte, and
// per element of a big key (scanned on the source, written back in
// chunks). 11 runs of 3k-333k keys of 64 B-4 KB: within 15% from 30k keys
// up; below that the fixed costs (tens of ms) dominate. A sorted set's
// element was refitted once sets were read in their order: 6 runs of a
// move of 136 keys, one a sorted set of 50k or 200k members (132-186 ms,
// 349-392 ms; 3,400 ns an element when they were scanned).
//
// The RDB path pays for the whole source, whatever share moves: its
// fork, serialization, transfer and a scan of every key, per byte of
// its memory; then per moving byte and big key's element. 11 runs of
// sources of 27-730 MB: within 25%.
var (
	keysCost = pathModel{
		perKey:        12500 * time.Nanosecond,
		perMovingByte: 4.6,
		perElem:       map[string]float64{"hash": 1700, "set": 1500, "zset": 2000},
	}
	rdbCost = pathModel{
		fixed:         55 * time.Millisecond,
		perSourceByte: 8.0,
		perMovingByte: 2.4,
		perElem:       map[string]float64{"hash": 3300, "set": 800, "zset": 1000},
	}
)

// The fork of a source that never forked (its page tables are copied),
// fitted to the latest_fork_usec of 7 sources of 27-730 MB.
const (
	forkFixed   = 3 * time.Millisecond
	forkPerByte = 0.033
)

// defaultPerElem is the dearest per-element cost, for a type the model
// lacks.
const defaultPerElem = 3400

// keysWorst is the longest event the keys path's calls are sized to.
const keysWorst = chunk.DefaultTime

type pathModel struct {
	fixed         time.Duration
	perKey        time.Duration      // a moving key
	perMovingByte float64            // ns a byte of the moving keys
	perSourceByte float64            // ns a byte of the source's memory
	perElem       map[string]float64 // ns an element of a moving big key
}

func (m pathModel) time(f pathFacts) time.Duration {
	ns := float64(m.fixed) + float64(m.perKey)*float64(f.movingKeys) +
		m.perMovingByte*f.movingBytes() + m.perSourceByte*float64(f.sourceMemory)
	for typ, n := range f.bigElements {
		per, ok := m.perElem[typ]
		if !ok {
			per = defaultPerElem
		}
		ns += per * float64(n)
	}
	return time.Duration(ns)
}

// predictPaths predicts the move by both paths from facts.
func predictPaths(f pathFacts) (keys, rdb pathCost) {
	fork := time.Duration(f.lastForkUS) * time.Microsecond
	if fork == 0 {
		fork = forkFixed + time.Duration(forkPerByte*float64(f.sourceMemory))
	}
	return pathCost{Time: keysCost.time(f), Worst: keysWorst}, pathCost{Time: rdbCost.time(f), Worst: fork}
}

// keysMargin is how much slower the keys path may be predicted than the
// RDB path and still be taken: it never forks the source, and a
// prediction is no measurement.
const keysMargin = 1.10

// choosePath is auto's choice between the predicted paths, and why.
func choosePath(keys, rdb pathCost) (path, reason string) {
	why := fmt.Sprintf("predicted keys %s, rdb %s with a fork of %s", round(keys.Time), round(rdb.Time), round(rdb.Worst))
	if float64(keys.Time) <= keysMargin*float64(rdb.Time) {
		return SnapshotKeys, why
	}
	return SnapshotRDB, why
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
