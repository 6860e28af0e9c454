package mover

import (
	"strings"
	"testing"
	"time"
)

// TestChoosePath runs the model on the facts of bench runs it was fitted
// to, each with the path whose move was faster in fact (total times).
func TestChoosePath(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name  string
		facts pathFacts
		want  string
	}{
		{"1% of 333k keys of 512 B (keys 0.11 s, rdb 1.62 s)", pathFacts{movingKeys: 3363, sourceKeys: 333_333, sourceMemory: 246 * mb}, SnapshotKeys},
		{"10% of them (keys 0.69-0.71 s, rdb 1.68 s)", pathFacts{movingKeys: 33_247, sourceKeys: 333_333, sourceMemory: 246 * mb}, SnapshotKeys},
		{"33% of them (keys 2.09 s, rdb 2.31 s)", pathFacts{movingKeys: 109_955, sourceKeys: 333_333, sourceMemory: 246 * mb}, SnapshotKeys},
		{"all of them (keys 4.57-5.70 s, rdb 2.59-2.81 s)", pathFacts{movingKeys: 333_302, sourceKeys: 333_302, sourceMemory: 246 * mb}, SnapshotRDB},
		{"10% of 1M keys (keys 2.07 s, rdb 6.19 s)", pathFacts{movingKeys: 100_073, sourceKeys: 1_000_000, sourceMemory: 730 * mb}, SnapshotKeys},
		{"10% of 1M keys of 64 B (keys 1.44 s, rdb 2.54 s)", pathFacts{movingKeys: 100_073, sourceKeys: 1_000_000, sourceMemory: 171 * mb}, SnapshotKeys},
		{"10% of 67k keys of 4 KB (keys 0.49 s, rdb 3.07 s)", pathFacts{movingKeys: 6581, sourceKeys: 66_667, sourceMemory: 350 * mb}, SnapshotKeys},
		{"a sorted set of 500k members, read in its order (keys 0.88-0.93 s, rdb 1.05-1.16 s)", pathFacts{movingKeys: 3271, sourceKeys: 33_340, sourceMemory: 81 * mb, bigElements: map[string]int64{"zset": 500_000}}, SnapshotKeys},
		{"a hash of 500k fields (keys 0.82-0.94 s, rdb 2.17 s)", pathFacts{movingKeys: 3302, sourceKeys: 33_340, sourceMemory: 59 * mb, bigElements: map[string]int64{"hash": 500_000}}, SnapshotKeys},
		{"a set of 500k members (keys 0.78-0.79 s, rdb 0.91 s)", pathFacts{movingKeys: 3302, sourceKeys: 33_340, sourceMemory: 55 * mb, bigElements: map[string]int64{"set": 500_000}}, SnapshotKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, rdb := predictPaths(tc.facts)
			path, why := choosePath(keys, rdb)
			if path != tc.want {
				t.Errorf("took %s (%s), want %s", path, why, tc.want)
			}
			if !strings.HasPrefix(why, "predicted keys ") || !strings.Contains(why, "with a fork of") {
				t.Errorf("reason %q", why)
			}
		})
	}
}

func TestPredictPaths(t *testing.T) {
	const gb = 1 << 30
	f := pathFacts{movingKeys: 1000, sourceKeys: 100_000, sourceMemory: gb, bigElements: map[string]int64{"hash": 1000, "stream": 10}}
	moving := 1000 * float64(gb) / 100_000 // bytes: the moving keys' share at the mean size
	keys, rdb := predictPaths(f)
	wantKeys := 1000*keysCost.perKey + time.Duration(keysCost.perMovingByte*moving+1000*keysCost.perElem["hash"]+10*defaultPerElem)
	if keys.Time != wantKeys || keys.Worst != keysWorst {
		t.Errorf("keys %+v, want %s, worst %s", keys, wantKeys, keysWorst)
	}
	wantRDB := rdbCost.fixed + time.Duration(rdbCost.perSourceByte*gb+rdbCost.perMovingByte*moving+1000*rdbCost.perElem["hash"]+10*defaultPerElem)
	mem := float64(gb)
	wantFork := forkFixed + time.Duration(forkPerByte*mem)
	if rdb.Time != wantRDB || rdb.Worst != wantFork {
		t.Errorf("rdb %+v, want %s, worst %s", rdb, wantRDB, wantFork)
	}
	// A source that forked before: its own fork time.
	f.lastForkUS = 12_345
	if _, rdb := predictPaths(f); rdb.Worst != 12345*time.Microsecond {
		t.Errorf("a source that forked in 12.345 ms: predicted fork %s", rdb.Worst)
	}
	// An empty source: nothing to divide by.
	if keys, _ := predictPaths(pathFacts{}); keys.Time != 0 {
		t.Errorf("an empty source: keys path %s", keys.Time)
	}
}

func TestChoosePathPrefersNoFork(t *testing.T) {
	for _, tc := range []struct {
		keys, rdb time.Duration
		want      string
	}{
		{time.Second, time.Second, SnapshotKeys},
		{1099 * time.Millisecond, time.Second, SnapshotKeys},
		{1101 * time.Millisecond, time.Second, SnapshotRDB},
	} {
		if got, _ := choosePath(pathCost{Time: tc.keys}, pathCost{Time: tc.rdb}); got != tc.want {
			t.Errorf("keys %s, rdb %s: took %s, want %s", tc.keys, tc.rdb, got, tc.want)
		}
	}
}
