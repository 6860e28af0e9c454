package localcluster

import (
	"context"
	"maps"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Redirects counts the redirect and retry replies (MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN) a cluster client's node clients get: the client follows
// them without showing them to its caller.
type Redirects struct {
	mu     sync.Mutex
	counts map[string]int64
}

// Counts returns the counts so far, by reply.
func (r *Redirects) Counts() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

func (r *Redirects) note(err error) {
	if err == nil {
		return
	}
	kind, _, _ := strings.Cut(err.Error(), " ")
	switch kind {
	case "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN":
		r.mu.Lock()
		r.counts[kind]++
		r.mu.Unlock()
	}
}

// RedirectCountingClient is a cluster client over c whose node clients
// count the redirect replies they get.
func RedirectCountingClient(c *Cluster) (*redis.ClusterClient, *Redirects) {
	base := c.Client()
	opts := *base.Options()
	base.Close()
	// As Jedis and Lettuce by default (go-redis: 3): a command that reaches
	// the source between its release and the target's claim is sent back
	// and forth between the two until the claim lands (docs/operations.md, Cutover).
	opts.MaxRedirects = 5
	cc := redis.NewClusterClient(&opts)
	return cc, CountRedirects(cc)
}

// CountRedirects counts the redirect replies cc's node clients get. Call
// it before cc's first command: node clients are made as they are needed.
func CountRedirects(cc *redis.ClusterClient) *Redirects {
	seen := &Redirects{counts: map[string]int64{}}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(redirectHook{seen}) })
	return seen
}

type redirectHook struct{ r *Redirects }

func (h redirectHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redirectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.r.note(err)
		return err
	}
}

func (h redirectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.r.note(c.Err())
		}
		return err
	}
}
