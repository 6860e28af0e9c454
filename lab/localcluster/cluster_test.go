package localcluster_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"

	"github.com/slotmover/slotmover/slots"
)

func TestClusterForms(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	for i := 0; i < 200; i++ {
		if err := cc.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Each key must sit on the master that owns its slot, per our own slot math.
	var owner []*slots.Set
	for _, spec := range []string{"0-5460", "5461-10922", "10923-16383"} {
		set, err := slots.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		owner = append(owner, set)
	}
	for n, s := range c.Nodes[:3] {
		cl := s.Client()
		keys, err := cl.Keys(ctx, "*").Result()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !owner[n].Contains(slots.ForString(k)) {
				t.Errorf("key %q on node %d, outside its slots", k, n)
			}
			cl := s.Client()
			got, _ := cl.ClusterKeySlot(ctx, k).Result()
			cl.Close()
			if uint16(got) != slots.ForString(k) {
				t.Errorf("slot of %q: redis %d, ours %d", k, got, slots.ForString(k))
			}
		}
	}
	pids := []int{}
	for _, s := range c.Nodes {
		pids = append(pids, s.PID)
	}
	c.Stop()
	for i, s := range c.Nodes {
		if s.Alive() {
			t.Errorf("node pid %d still alive after Stop", pids[i])
		}
	}
}

// KeepBacklog leaves every node with a backlog and no replica.
func TestKeepBacklog(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383"}, localcluster.Options{})
	if err := c.KeepBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Nodes {
		cl := s.Client()
		repl, err := info.Read(ctx, cl, "replication")
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		if repl["repl_backlog_active"] != "1" || repl["connected_slaves"] != "0" {
			t.Fatalf("%s: backlog active %q, replicas %q; want 1 and 0", s.Addr, repl["repl_backlog_active"], repl["connected_slaves"])
		}
	}
}
