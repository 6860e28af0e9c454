package soak

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// kind is what a key holds and which commands the workload sends it.
type kind uint8

const (
	kString   kind = iota // SET of versioned values
	kList                 // RPUSH of sequence numbers, order checked
	kHash                 // HSET of a few fields
	kSet                  // SADD, SREM
	kZset                 // ZADD, ZINCRBY
	kStream               // XADD with IDs 1-<n>
	kVolatile             // SET … PX, PEXPIRE, SET (persist), DEL
	kCounter              // INCR/INCRBY: the companion of every unit
	kBigList              // RPUSH in batches, never deleted
	kBigHash              // HSET of new fields in batches, never deleted

	rotatingKinds = 7 // units other than big ones take kinds 0..6 in turn
)

func (k kind) String() string {
	return [...]string{"string", "list", "hash", "set", "zset", "stream", "volatile", "counter", "big-list", "big-hash"}[k]
}

// Bounds that keep small collections small, so a full read stays cheap.
const (
	smallSeqMax   = 200 // a list or stream this long is deleted instead of grown
	hashFields    = 20
	setMembers    = 30
	zsetMembers   = 30
	bigBatch      = 20  // elements per write to a big key
	fullReadLimit = 256 // bigger sequences are read by their tail and size
)

// key is one key of the workload and its model. Exactly one worker owns it.
type key struct {
	name string
	kind kind
	str  *strModel
	ctr  *counterModel
	seq  *seqModel
	fld  *fieldModel
	ver  int64 // versions of written values

	flagged [numCategories]bool // a finding of that category was recorded
	hist    [histLen]histEntry  // the last operations, for the report of a finding
	nhist   int
}

// histLen is how many recent operations a key remembers.
const histLen = 6

// histEntry is one operation on a key, as the report shows it.
type histEntry struct {
	at     time.Time
	took   time.Duration
	what   string
	result string
}

func (k *key) remember(e histEntry) {
	k.hist[k.nhist%histLen] = e
	k.nhist++
}

// history lists the remembered operations, oldest first.
func (k *key) history() string {
	var parts []string
	for i := max(0, k.nhist-histLen); i < k.nhist; i++ {
		e := k.hist[i%histLen]
		parts = append(parts, fmt.Sprintf("%s %s -> %s (%s)", e.at.UTC().Format("15:04:05.000"), e.what, e.result, e.took.Round(10*time.Microsecond)))
	}
	return strings.Join(parts, "; ")
}

func newKey(name string, k kind) *key {
	x := &key{name: name, kind: k}
	switch k {
	case kString, kVolatile:
		x.str = newStrModel()
	case kCounter:
		x.ctr = &counterModel{}
	case kList, kStream, kBigList, kBigHash:
		x.seq = &seqModel{}
	default:
		x.fld = newFieldModel()
	}
	return x
}

// unit is a primary key and a counter under one hash tag, so that MULTI
// and EVAL can write both in one slot.
type unit struct {
	prim, ctr *key
}

// keySpace builds the units: keys/2 of them (at least one per worker), the
// first big of them big. Their hash tags are their numbers, so they spread
// over the slots; run keeps runs on one cluster apart.
func keySpace(run string, keys, big int) []*unit {
	n := max(keys/2, 1)
	units := make([]*unit, n)
	for u := range units {
		k := kind(u % rotatingKinds)
		if u < big {
			k = kBigList
			if u%2 == 1 {
				k = kBigHash
			}
		}
		prefix := fmt.Sprintf("soak:%s:{%d}:", run, u)
		units[u] = &unit{prim: newKey(prefix+"p", k), ctr: newKey(prefix+"c", kCounter)}
	}
	return units
}

// value returns a new version of a written value for k.
func (k *key) value(worker int) string {
	k.ver++
	return fmt.Sprintf("w%d:v%d", worker, k.ver)
}

func pickField(rng *rand.Rand, prefix string, n int) string {
	return fmt.Sprintf("%s%d", prefix, rng.IntN(n))
}

// distinctFields picks between 1 and max distinct fields.
func distinctFields(rng *rand.Rand, prefix string, n, most int) []string {
	want := 1 + rng.IntN(most)
	var fs []string
	for len(fs) < want {
		f := pickField(rng, prefix, n)
		dup := false
		for _, x := range fs {
			dup = dup || x == f
		}
		if !dup {
			fs = append(fs, f)
		}
	}
	return fs
}
