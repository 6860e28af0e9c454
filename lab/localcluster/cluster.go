package localcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

// Cluster is a set of masters, started and joined by StartCluster.
type Cluster struct {
	Nodes []*Server
	IDs   []string // node IDs, in the order of Nodes
}

// StartCluster starts one cluster-mode master per entry of specs, each owning
// the slots of its spec ("" for an empty master), joins them and waits until
// every node reports cluster_state:ok and knows every other node.
func StartCluster(ctx context.Context, dir string, specs []string, opts Options) (*Cluster, error) {
	opts.Cluster = true
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	for i, spec := range specs {
		s, id, err := startAlone(ctx, dir, opts, i+1)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		cl := s.Client()
		if spec != "" {
			var set *slots.Set
			if set, err = slots.Parse(spec); err == nil {
				err = cl.Do(ctx, addSlotsArgs(s.Bin, set)...).Err()
			}
		}
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("set up node %s: %w", s.Addr, err)
		}
		c.IDs = append(c.IDs, id)
	}
	first := c.Nodes[0].Client()
	for _, s := range c.Nodes[1:] {
		if err := first.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(s.Port)).Err(); err != nil {
			first.Close()
			return nil, fmt.Errorf("cluster meet %s: %w", s.Addr, err)
		}
	}
	first.Close()
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startAlone starts a cluster-mode server that knows no other node and
// gives it config epoch epoch (distinct epochs up front, so that the
// cluster does not have to resolve collisions), and returns it with its
// node ID. A node of another test's cluster that still knows the port from
// a server stopped there may reach the new one first (its epoch is then
// no longer 0): that server is stopped and another port tried.
func startAlone(ctx context.Context, dir string, opts Options, epoch int) (*Server, string, error) {
	for try := 1; ; try++ {
		s, err := StartServer(ctx, dir, opts)
		if err != nil {
			return nil, "", err
		}
		cl := s.Client()
		id, err := cl.ClusterMyID(ctx).Result()
		if err == nil {
			err = cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", epoch).Err()
		}
		cl.Close()
		if err == nil {
			return s, id, nil
		}
		s.Stop()
		if try == 3 || !strings.Contains(err.Error(), "epoch is already non-zero") && !strings.Contains(err.Error(), "know any other node") {
			return nil, "", fmt.Errorf("set up node %s: %w", s.Addr, err)
		}
	}
}

// addSlotsArgs is CLUSTER ADDSLOTSRANGE of set's ranges, or ADDSLOTS of
// every slot on servers (of binary bin) before 7.0, which lack ADDSLOTSRANGE.
func addSlotsArgs(bin string, set *slots.Set) []any {
	if v, err := VersionOf(bin); err == nil && !v.AtLeast(7, 0) {
		args := []any{"CLUSTER", "ADDSLOTS"}
		for _, s := range set.Slots() {
			args = append(args, s)
		}
		return args
	}
	args := []any{"CLUSTER", "ADDSLOTSRANGE"}
	for _, r := range set.Ranges() {
		args = append(args, r.Start, r.End)
	}
	return args
}

// WaitHealthy waits until every running node reports cluster_state:ok, knows
// every other node as connected, and all agree on the slot owners.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		why = c.unhealthy(ctx)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not healthy after %s: %s", timeout, why)
}

func (c *Cluster) unhealthy(ctx context.Context) string {
	var firstView string
	for _, s := range c.Nodes {
		if !s.Alive() {
			continue
		}
		cl := s.Client()
		info, err := cl.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("cluster_state not ok")
		}
		var nodes string
		if err == nil {
			nodes, err = cl.ClusterNodes(ctx).Result()
		}
		cl.Close()
		if err != nil {
			return fmt.Sprintf("%s: %v", s.Addr, err)
		}
		view, why := slotView(nodes, len(c.Nodes))
		if why != "" {
			return fmt.Sprintf("%s: %s", s.Addr, why)
		}
		if firstView == "" {
			firstView = view
		} else if view != firstView {
			return fmt.Sprintf("%s: disagrees on slot owners", s.Addr)
		}
	}
	return ""
}

// slotView reduces CLUSTER NODES to "id slots..." lines of masters, sorted by
// ID, and says what is not settled yet.
func slotView(nodes string, want int) (string, string) {
	lines := strings.Split(strings.TrimSpace(nodes), "\n")
	if len(lines) < want {
		return "", fmt.Sprintf("knows %d of %d nodes", len(lines), want)
	}
	var view []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 8 {
			return "", "short CLUSTER NODES line"
		}
		if strings.Contains(f[2], "handshake") || strings.Contains(f[2], "fail") || f[7] != "connected" {
			return "", fmt.Sprintf("node %s is %s/%s", f[0], f[2], f[7])
		}
		if strings.Contains(f[2], "master") {
			view = append(view, f[0]+" "+strings.Join(f[8:], " "))
		}
	}
	slices.Sort(view)
	return strings.Join(view, "\n"), ""
}

// Client returns a cluster client over every node; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, TLSConfig: c.Nodes[0].TLS, ReadTimeout: 10 * time.Second,
		DisableIdentity: true, MaintNotificationsConfig: noMaintNotifications})
}

// Stop stops every node by PID.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}
