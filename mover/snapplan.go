package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/stream"
)

// Snapshot paths (Options.Snapshot).
const (
	// SnapshotAuto takes the keys path when the moving keys are a small
	// share of the source's and nothing rules it out, else the RDB.
	SnapshotAuto = "auto"
	// SnapshotRDB takes a full sync: the source forks and sends all its
	// keys; the chosen slots' are kept.
	SnapshotRDB = "rdb"
	// SnapshotKeys continues the source's replication history (no fork)
	// and reads only the chosen slots' keys, in short calls.
	SnapshotKeys = "keys"
)

// snapshotPlan is the snapshot path a move takes, and why.
type snapshotPlan struct {
	path          string
	reason        string
	groups        [][]uint16 // the keys path's listing calls
	sourceVersion int        // the RDB version of the source's DUMPs (keys path; 0 if none was seen)
	fieldTTLs     bool       // the source has hash-field expiries (HPEXPIRETIME, 7.4+)
	anySlot       bool       // a script may read keys of several slots (7.0+)
	known         *keySet    // the moving keys the survey found not big
	startBacklog  bool       // the source keeps no backlog yet: start one (stream.StartBacklog)
	prediction    *PathPrediction
}

// checkVersions takes the RDB path, or refuses, when the source's DUMPs
// are newer than the target can RESTORE: only the RDB path replays such
// keys as commands.
func (sp *snapshotPlan) checkVersions(asked bool, targetVersion int) error {
	if sp.path != SnapshotKeys || sp.sourceVersion <= targetVersion {
		return nil
	}
	reason := fmt.Sprintf("the source's RDB version %d is newer than the target's %d (its keys must be replayed as commands)", sp.sourceVersion, targetVersion)
	if asked {
		return fmt.Errorf("--snapshot keys cannot run: %s", reason)
	}
	*sp = snapshotPlan{path: SnapshotRDB, reason: reason, prediction: sp.prediction}
	return nil
}

// planSnapshot chooses the snapshot path from the source's state, changing
// nothing. A keys path asked for that cannot run is refused.
func planSnapshot(ctx context.Context, o Options, p *participants) (snapshotPlan, error) {
	switch o.Snapshot {
	case SnapshotAuto, SnapshotRDB, SnapshotKeys:
	default:
		return snapshotPlan{}, refuse("unknown snapshot path %q: want auto, rdb or keys", o.Snapshot)
	}
	if o.Snapshot == SnapshotRDB {
		return snapshotPlan{path: SnapshotRDB, reason: "asked for"}, nil
	}
	asked := o.Snapshot == SnapshotKeys
	rdb := func(format string, args ...any) (snapshotPlan, error) {
		reason := fmt.Sprintf(format, args...)
		if asked {
			return snapshotPlan{}, refuse("--snapshot keys cannot run: %s", reason)
		}
		return snapshotPlan{path: SnapshotRDB, reason: reason}, nil
	}
	// The reads (scripts and transactions) run these as the user; a user
	// who may not run them, or the chunks' commands on the target, takes
	// the RDB.
	key := tempKey(o.Slots.Slots()[0], "probe", 0)
	var probes []probe
	for _, cmd := range []string{"TYPE", "STRLEN", "HLEN", "LLEN", "SCARD", "ZCARD", "XLEN"} {
		probes = append(probes, probe{cmd, key})
	}
	for _, t := range slotread.ScanTypes {
		probes = append(probes, probe{slotread.ScanCommand[t], key, 0})
	}
	if err := checkPermissions(ctx, p.source, "source", probes, nil); err != nil {
		return rdb("%v", err)
	}
	// Hash fields have expiries of their own from 7.4: a chunked read
	// must copy them.
	// FUNCTION came with script flags (allow-cross-slot-keys), in 7.0.
	has, err := p.source.Do(ctx, "COMMAND", "INFO", "HPEXPIRETIME", "FUNCTION").Slice()
	if err != nil || len(has) != 2 {
		return rdb("COMMAND INFO on the source: %v", err)
	}
	fieldTTLs, anySlot := has[0] != nil, has[1] != nil
	// A big key read in chunks gets its TTL (or none) last.
	chunkProbes := []probe{{"PERSIST", key}}
	if fieldTTLs {
		chunkProbes = append(chunkProbes, probe{"HPEXPIREAT", key, 0, "FIELDS", 1, "f"})
	}
	if err := checkPermissions(ctx, p.target, "target", chunkProbes, nil); err != nil {
		return rdb("%v", err)
	}
	repl, err := info.Read(ctx, p.source, "replication")
	if err != nil {
		return snapshotPlan{}, err
	}
	// A source without a backlog gets one at the snapshot's start, with no
	// fork (stream.StartBacklog): the preflight changes nothing.
	_, err = stream.ContinuePoint(repl)
	startBacklog := errors.Is(err, stream.ErrNoBacklog)
	if err != nil && !startBacklog {
		return snapshotPlan{}, fmt.Errorf("source %s: %w", o.Source.Addr, err)
	}
	set := o.Slots.Slots()
	counts, err := cluster.CountKeys(ctx, p.source, set)
	if err != nil {
		return snapshotPlan{}, err
	}
	total, err := p.source.DBSize(ctx).Result()
	if err != nil {
		return snapshotPlan{}, fmt.Errorf("DBSIZE on %s: %w", o.Source.Addr, err)
	}
	var moving int64
	for i, n := range counts {
		moving += n
		if n > listKeysPerCall {
			return rdb("slot %d holds %d keys, more than one short call may list (%d)", set[i], n, listKeysPerCall)
		}
	}
	share := 0.0
	if total > 0 {
		share = float64(moving) / float64(total)
	}
	facts, err := readPathFacts(ctx, p, moving, total)
	if err != nil {
		return snapshotPlan{}, err
	}
	// The survey is a third of the keys path's cost: a path predicted
	// slower without big keys is not surveyed for them (a whole shard
	// would spend seconds on it). Big hashes and sets could tip it back,
	// rarely: they cost the RDB path at most twice as much an element.
	if path, why, pred := decide(facts); !asked && path == SnapshotRDB {
		plan, err := rdb("the move takes %.1f%% of the source's keys; %s", 100*share, why)
		plan.prediction = pred
		return plan, err
	}
	var version int
	known := newKeySet()
	for _, g := range groupSlots(set, counts, surveyKeysPerCall) {
		var sv slotread.Survey
		err := cluster.WhileDown(ctx, func() (err error) {
			sv, err = slotread.SurveySlots(ctx, p.source, g, int64(o.BigKeyElements))
			return err
		})
		if err != nil {
			return snapshotPlan{}, err
		}
		for _, b := range sv.Big {
			if !slices.Contains(slotread.ScanTypes, b.Type) {
				return rdb("key %q is a %s of %d elements, too big to read in one short call (big hashes, sets and sorted sets are read in chunks)", b.Name, b.Type, b.Units)
			}
			facts.bigElements[b.Type] += b.Units
		}
		version = max(version, rdbparse.DumpVersion(sv.Sample))
		for _, k := range sv.Small {
			known.add(k.Name, k.Units)
		}
	}
	path, why, pred := decide(facts)
	reason := fmt.Sprintf("the move takes %.1f%% of the source's keys; %s", 100*share, why)
	if asked {
		reason = "asked for; " + reason
	} else if path == SnapshotRDB {
		plan, err := rdb("%s", reason)
		plan.prediction = pred
		return plan, err
	}
	return snapshotPlan{path: SnapshotKeys, reason: reason, groups: groupSlots(set, counts, listKeysPerGroup),
		sourceVersion: version, fieldTTLs: fieldTTLs, anySlot: anySlot, known: known, startBacklog: startBacklog,
		prediction: pred}, nil
}

// readPathFacts reads what the cost model needs of the source.
func readPathFacts(ctx context.Context, p *participants, moving, total int64) (pathFacts, error) {
	f := pathFacts{movingKeys: moving, sourceKeys: total, bigElements: map[string]int64{}}
	var err error
	if f.sourceMemory, err = info.ReadInt(ctx, p.source, "memory", "used_memory"); err != nil {
		return f, err
	}
	if f.lastForkUS, err = info.ReadInt(ctx, p.source, "stats", "latest_fork_usec"); err != nil {
		return f, err
	}
	return f, nil
}

// surveyKeysPerCall bounds the keys a survey call looks at: it reads the
// type and length of each (about 1.5 µs a key on an idle 7.0.15, 3-4 µs
// on a busy 2-core VM, where 600 keys held the source for 2-7 ms), so
// that a call holds the source for about a millisecond.
const surveyKeysPerCall = 300

// groupSlots cuts slots (with their key counts) into runs of at most
// perCall keys, a slot alone when it holds more.
func groupSlots(set []uint16, counts []int64, perCall int64) [][]uint16 {
	var groups [][]uint16
	var cur []uint16
	var n int64
	for i, s := range set {
		if len(cur) > 0 && n+counts[i] > perCall {
			groups = append(groups, cur)
			cur, n = nil, 0
		}
		cur = append(cur, s)
		n += counts[i]
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups
}
