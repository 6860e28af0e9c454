// Package cluster reads a Redis Cluster's own view of itself: nodes, roles,
// slot owners and the migrating/importing marks of half-done moves.
package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

// Node is one line of CLUSTER NODES.
type Node struct {
	ID        string
	Addr      string // host:port for clients
	Flags     []string
	MasterID  string // for a replica, its master's ID
	Epoch     int64
	Connected bool
	Slots     slots.Set
	// Migrating and Importing map a slot to the other node's ID. Redis shows
	// them only in the line of the node that answers (myself).
	Migrating map[uint16]string
	Importing map[uint16]string
}

// Is reports whether the node carries flag ("master", "myself", "fail", ...).
func (n *Node) Is(flag string) bool {
	for _, f := range n.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// Master reports whether the node is a master that is not failing.
func (n *Node) Master() bool { return n.Is("master") && !n.Is("fail") }

// Topology is the cluster as one node sees it.
type Topology struct {
	Nodes  []*Node
	Myself *Node
}

// Load asks c for CLUSTER NODES.
func Load(ctx context.Context, c *redis.Client) (*Topology, error) {
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.Options().Addr, err)
	}
	t, err := Parse(text)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.Options().Addr, err)
	}
	return t, nil
}

// Parse reads the text of CLUSTER NODES.
func Parse(text string) (*Topology, error) {
	t := &Topology{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		n := &Node{
			ID:        f[0],
			Flags:     strings.Split(f[2], ","),
			Connected: f[7] == "connected",
			Migrating: map[uint16]string{},
			Importing: map[uint16]string{},
		}
		// ip:port@cport[,hostname]
		addr, _, _ := strings.Cut(f[1], "@")
		n.Addr = addr
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		n.Epoch, _ = strconv.ParseInt(f[6], 10, 64)
		for _, s := range f[8:] {
			if err := n.addSlotField(s); err != nil {
				return nil, fmt.Errorf("node %s: %w", n.ID, err)
			}
		}
		if n.Is("myself") {
			t.Myself = n
		}
		t.Nodes = append(t.Nodes, n)
	}
	if t.Myself == nil {
		return nil, fmt.Errorf("no node flagged myself")
	}
	return t, nil
}

func (n *Node) addSlotField(s string) error {
	if strings.HasPrefix(s, "[") {
		// [slot->-id] migrating to id, [slot-<-id] importing from id.
		body := strings.Trim(s, "[]")
		if slot, id, ok := strings.Cut(body, "->-"); ok {
			x, err := strconv.Atoi(slot)
			if err != nil {
				return fmt.Errorf("bad slot field %q", s)
			}
			n.Migrating[uint16(x)] = id
			return nil
		}
		if slot, id, ok := strings.Cut(body, "-<-"); ok {
			x, err := strconv.Atoi(slot)
			if err != nil {
				return fmt.Errorf("bad slot field %q", s)
			}
			n.Importing[uint16(x)] = id
			return nil
		}
		return fmt.Errorf("bad slot field %q", s)
	}
	// A field at a time, straight into the node's set: a map fragmented by
	// many moves has thousands of fields, and CLUSTER NODES is read inside
	// the cutover's write pause.
	r, err := slots.ParseRange(s)
	if err != nil {
		return fmt.Errorf("bad slot field %q: %w", s, err)
	}
	n.Slots.AddRange(r)
	return nil
}

// ByID returns the node with that ID, or nil.
func (t *Topology) ByID(id string) *Node {
	for _, n := range t.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Owner returns the master that serves slot, or nil.
func (t *Topology) Owner(slot uint16) *Node {
	for _, n := range t.Nodes {
		if n.Is("master") && n.Slots.Contains(slot) {
			return n
		}
	}
	return nil
}

// Failing reports whether the node is flagged fail, or fail? (pfail: this
// view has not heard from it within the node timeout).
func (n *Node) Failing() bool { return n.Is("fail") || n.Is("fail?") }

// AssignedTo returns the node whose line lists slot, whatever its flags
// (Owner skips nodes not flagged master), or nil for a slot unassigned in
// this view. The node may be failed: callers that act on the answer check.
func (t *Topology) AssignedTo(slot uint16) *Node {
	for _, n := range t.Nodes {
		if n.Slots.Contains(slot) {
			return n
		}
	}
	return nil
}

// Masters returns every node flagged master and not failing.
func (t *Topology) Masters() []*Node {
	var out []*Node
	for _, n := range t.Nodes {
		if n.Master() {
			out = append(out, n)
		}
	}
	return out
}

// CountKeys returns how many keys c holds in each of the slots, in one round trip.
func CountKeys(ctx context.Context, c *redis.Client, of []uint16) ([]int64, error) {
	cmds := make([]*redis.IntCmd, len(of))
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range of {
			cmds[i] = p.ClusterCountKeysInSlot(ctx, int(s))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("CLUSTER COUNTKEYSINSLOT on %s: %w", c.Options().Addr, err)
	}
	counts := make([]int64, len(of))
	for i, c := range cmds {
		counts[i] = c.Val()
	}
	return counts, nil
}

// SlotsCommand is CLUSTER <sub> followed by every slot of list, as the
// arguments of one command (ADDSLOTS, DELSLOTS: lists, which Redis 6.2 has,
// where the RANGE forms are 7.0+).
func SlotsCommand(sub string, list []uint16) []any {
	args := make([]any, 0, 2+len(list))
	args = append(args, "CLUSTER", sub)
	for _, s := range list {
		args = append(args, s)
	}
	return args
}
