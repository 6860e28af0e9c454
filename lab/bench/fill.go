package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
)

// KeyName is the name of the i-th filled key. Every run fills the same
// names with the same values, so every method moves identical data.
func KeyName(i int) string { return "bench:" + strconv.Itoa(i) }

// owners maps each slot to the index of its master in a layout.
type owners [slots.Count]int

func ownersOf(layout []string) (*owners, error) {
	o := &owners{}
	for i, spec := range layout {
		if spec == "" {
			continue // an empty master
		}
		set, err := slots.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("layout of node %d: %w", i, err)
		}
		for _, s := range set.Slots() {
			o[s] = i
		}
	}
	return o, nil
}

const (
	fillBatch   = 1000 // commands per pipeline round trip
	fillWorkers = 4    // goroutines; each writes to every node
	elements    = 8    // elements per collection with Types
)

// values hands out value bytes: slices of one random buffer, so that
// values do not compress (as real data mostly does not) yet cost nothing
// to make. The same seed every run keeps the data identical.
type values struct {
	buf  []byte
	size int
}

func newValues(size int) *values {
	r := rand.New(rand.NewPCG(0x5107, 0xbe7c))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	buf := make([]byte, max(1<<20, 4*size))
	for i := range buf {
		buf[i] = alphabet[r.IntN(len(alphabet))]
	}
	return &values{buf: buf, size: size}
}

// get returns n bytes for key i, part j; slices of a shared read-only buffer.
func (v *values) get(i, j, n int) []byte {
	off := (i*7919 + j*104729) % (len(v.buf) - n)
	return v.buf[off : off+n]
}

// fill writes cfg.Keys keys through per-node clients, each key straight to
// its owner in layout (c's), pipelined, from several goroutines.
func fill(ctx context.Context, c *localcluster.Cluster, layout []string, cfg *Config) error {
	own, err := ownersOf(layout)
	if err != nil {
		return err
	}
	vals := newValues(cfg.ValueSize)
	nodes := make([]*redis.Client, len(layout))
	for i := range nodes {
		nodes[i] = c.Nodes[i].Client()
		defer nodes[i].Close()
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, fillWorkers)
	for w := 0; w < fillWorkers; w++ {
		go func() { errs <- fillPart(gctx, nodes, own, vals, w, cfg) }()
	}
	var first error
	for w := 0; w < fillWorkers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel() // the other workers stop at their next round trip
		}
	}
	return first
}

// fillPart writes every fillWorkers-th key from w on, each to its owner.
func fillPart(ctx context.Context, nodes []*redis.Client, own *owners, vals *values, w int, cfg *Config) error {
	pipes := make([]redis.Pipeliner, len(nodes))
	for i, n := range nodes {
		pipes[i] = n.Pipeline()
	}
	flush := func(p redis.Pipeliner) error {
		if p.Len() == 0 {
			return nil
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
		return nil
	}
	for i := w; i < cfg.Keys; i += fillWorkers {
		key := KeyName(i)
		p := pipes[own[slots.ForString(key)]]
		queue(ctx, p, vals, key, i, cfg)
		if p.Len() >= fillBatch {
			if err := flush(p); err != nil {
				return err
			}
		}
	}
	for _, p := range pipes {
		if err := flush(p); err != nil {
			return err
		}
	}
	return nil
}

// queue adds the command that writes key i: a string, or with Types one of
// six kinds of about the same size in turn.
func queue(ctx context.Context, p redis.Pipeliner, v *values, key string, i int, cfg *Config) {
	kind := 0
	if cfg.Types {
		kind = i % 6
	}
	part := max(1, v.size/elements)
	args := func(withField bool) []any {
		var out []any
		for j := 0; j < elements; j++ {
			if withField {
				out = append(out, "f"+strconv.Itoa(j))
			}
			out = append(out, v.get(i, j, part))
		}
		return out
	}
	switch kind {
	case 0:
		p.Set(ctx, key, v.get(i, 0, v.size), 0)
	case 1:
		p.HSet(ctx, key, args(true)...)
	case 2:
		p.RPush(ctx, key, args(false)...)
	case 3:
		p.SAdd(ctx, key, args(false)...)
	case 4:
		zs := make([]redis.Z, elements)
		for j := range zs {
			zs[j] = redis.Z{Score: float64(i%1000) + float64(j)/8, Member: v.get(i, j, part)}
		}
		p.ZAdd(ctx, key, zs...)
	case 5:
		p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "1-1", Values: args(true)})
	}
}

// fillBig writes, through a cluster client, every type and encoding with a
// few big keys under a hash tag in the lowest slots of each source, which
// both workloads move.
func fillBig(ctx context.Context, c *localcluster.Cluster, cfg *Config) error {
	cc := c.Client()
	defer cc.Close()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for src := 0; src < 3; src++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set, err := slots.Parse(layout[src])
			if err == nil {
				first := set.Slots()[0]
				tag := tagIn(first, first+100, src)
				_, err = localcluster.FillEveryType(ctx, cc, tag, localcluster.FillOptions{Small: 1, BigElements: cfg.BigElements, BigTypes: cfg.BigTypes, Seed: uint64(src)})
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("big keys on node %d: %w", src, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// tagIn returns a hash tag whose slot is in [lo, hi).
func tagIn(lo, hi uint16, n int) string {
	for i := 0; i < 1_000_000; i++ {
		tag := fmt.Sprintf("big%d-%d", n, i)
		if s := slots.ForString(tag); s >= lo && s < hi {
			return "{" + tag + "}"
		}
	}
	return fmt.Sprintf("{big%d}", n) // unreachable for a range of 100 slots
}

// countKeys returns how many keys node holds in set (CLUSTER COUNTKEYSINSLOT, pipelined).
func countKeys(ctx context.Context, node *redis.Client, set *slots.Set) (int64, error) {
	var total int64
	all := set.Slots()
	for start := 0; start < len(all); start += fillBatch {
		p := node.Pipeline()
		cmds := make([]*redis.IntCmd, 0, fillBatch)
		for _, s := range all[start:min(start+fillBatch, len(all))] {
			cmds = append(cmds, p.ClusterCountKeysInSlot(ctx, int(s)))
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, fmt.Errorf("CLUSTER COUNTKEYSINSLOT on %s: %w", node.Options().Addr, err)
		}
		for _, c := range cmds {
			total += c.Val()
		}
	}
	return total, nil
}
