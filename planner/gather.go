package planner

import (
	"context"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/slots"
)

// GatherOptions say what Gather reads.
type GatherOptions struct {
	By Weight // ByMemory also samples MEMORY USAGE
	// Sample is how many keys of a slot MEMORY USAGE is asked about (the
	// first ones CLUSTER GETKEYSINSLOT lists); the slot's bytes are their
	// mean times its keys. 0 for DefaultSample.
	Sample int
}

// DefaultSample is GatherOptions.Sample's default.
const DefaultSample = 16

// batch is how many slots one pipeline asks about.
const batch = 512

// Gather reads the state Make needs from the cluster seed belongs to: its
// nodes (seed's CLUSTER NODES), each master's own view of itself (its
// slots must match seed's view, and its migrating and importing marks are
// noted), the keys of every slot (CLUSTER COUNTKEYSINSLOT on its owner),
// each master's dataset bytes (INFO memory), and with ByMemory the bytes
// of every slot. Every other node is reached as seed is (same credentials
// and TLS).
func Gather(ctx context.Context, seed cluster.Conn, o GatherOptions) (*View, error) {
	if o.Sample <= 0 {
		o.Sample = DefaultSample
	}
	c := seed.Client()
	top, err := cluster.Load(ctx, c)
	c.Close()
	if err != nil {
		return nil, err
	}
	v := &View{Keys: make([]int64, slots.Count)}
	if o.By == ByMemory {
		v.Bytes = make([]int64, slots.Count)
	}
	for _, n := range top.Nodes {
		v.Nodes = append(v.Nodes, Node{ID: n.ID, Addr: n.Addr, Master: n.Is("master"), Failing: n.Failing(), Slots: n.Slots})
	}
	sort.Slice(v.Nodes, func(a, b int) bool { return v.Nodes[a].Addr < v.Nodes[b].Addr })
	for _, n := range top.Nodes {
		if !n.Is("master") || n.Failing() {
			continue
		}
		if err := gatherMaster(ctx, seed.With(n.Addr), n, v, o); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// gatherMaster reads one master's view of itself, its keys and bytes.
func gatherMaster(ctx context.Context, conn cluster.Conn, n *cluster.Node, v *View, o GatherOptions) error {
	var node *Node
	for i := range v.Nodes {
		if v.Nodes[i].ID == n.ID {
			node = &v.Nodes[i]
		}
	}
	c := conn.Client()
	defer c.Close()
	own, err := cluster.Load(ctx, c)
	if err != nil {
		return err
	}
	if own.Myself.ID != n.ID {
		return fmt.Errorf("%s answers as node %s, not %s: the cluster's view is out of date", n.Addr, own.Myself.ID, n.ID)
	}
	if own.Myself.Slots != n.Slots {
		return fmt.Errorf("%s owns slots %s by its own view, %s by the first node's: a move or failover is under way; try again", n.Addr, own.Myself.Slots.String(), n.Slots.String())
	}
	for s, id := range own.Myself.Migrating {
		v.Marks = append(v.Marks, fmt.Sprintf("slot %d is migrating on %s to %s", s, n.Addr, id))
	}
	for s, id := range own.Myself.Importing {
		v.Marks = append(v.Marks, fmt.Sprintf("slot %d is importing on %s from %s", s, n.Addr, id))
	}
	sort.Strings(v.Marks)
	mem, err := info.Read(ctx, c, "memory")
	if err != nil {
		return err
	}
	if node.Dataset, err = mem.Int("used_memory_dataset"); err != nil {
		return fmt.Errorf("%s: %w", n.Addr, err)
	}
	list := n.Slots.Slots()
	for i := 0; i < len(list); i += batch {
		part := list[i:min(i+batch, len(list))]
		counts, err := cluster.CountKeys(ctx, c, part)
		if err != nil {
			return err
		}
		for j, s := range part {
			v.Keys[s] = counts[j]
		}
		if v.Bytes != nil {
			if err := sampleBytes(ctx, c, part, v, o.Sample); err != nil {
				return err
			}
		}
	}
	return nil
}

// sampleBytes estimates the bytes of each slot of part from MEMORY USAGE
// of up to sample of its keys.
func sampleBytes(ctx context.Context, c *redis.Client, part []uint16, v *View, sample int) error {
	lists := make([]*redis.StringSliceCmd, len(part))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, s := range part {
			if v.Keys[s] > 0 {
				lists[j] = p.ClusterGetKeysInSlot(ctx, int(s), sample)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("CLUSTER GETKEYSINSLOT on %s: %w", c.Options().Addr, err)
	}
	usage := make([][]*redis.IntCmd, len(part))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j := range part {
			if lists[j] == nil {
				continue
			}
			for _, k := range lists[j].Val() {
				usage[j] = append(usage[j], p.MemoryUsage(ctx, k))
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return fmt.Errorf("MEMORY USAGE on %s: %w", c.Options().Addr, err)
	}
	for j, s := range part {
		var sum, seen int64
		for _, u := range usage[j] {
			b, err := u.Result()
			if err != nil {
				continue // gone since it was listed
			}
			sum += b
			seen++
		}
		if seen > 0 {
			v.Bytes[s] = sum * v.Keys[s] / seen
		}
	}
	return nil
}
