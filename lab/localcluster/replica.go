package localcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slotmover/slotmover/internal/info"
)

// Replicate makes r, a cluster-mode server of no cluster yet, a replica
// of c.Nodes[of], and waits (20 s at most) until its link to the master
// is up. The master starts the first sync at once, not after its
// repl-diskless-sync-delay (5 s by default), which is set back afterwards.
func (c *Cluster) Replicate(ctx context.Context, r *Server, of int) (err error) {
	rc := r.Client()
	defer rc.Close()
	master := c.Nodes[of].Client()
	defer master.Close()
	delay, err := master.ConfigGet(ctx, "repl-diskless-sync-delay").Result()
	if err != nil {
		return err
	}
	if err := master.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, master.ConfigSet(context.WithoutCancel(ctx), "repl-diskless-sync-delay", delay["repl-diskless-sync-delay"]).Err())
	}()
	if err := rc.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(c.Nodes[of].Port)).Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := rc.ClusterReplicate(ctx, c.IDs[of]).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		f, err := info.Read(ctx, rc, "replication")
		if err == nil && f["master_link_status"] == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the link of replica %s to its master never came up: %v %v", r.Addr, f, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
