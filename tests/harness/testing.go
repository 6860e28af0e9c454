// Package harness binds lab/localcluster to package testing: servers
// and clusters that a test starts are stopped at its cleanup, and a server
// that crashed during a failed test has its log reported.
package harness

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
)

// ServerT starts a standalone server for a test and stops it at cleanup.
func ServerT(t testing.TB, opts localcluster.Options) *localcluster.Server {
	t.Helper()
	s, err := localcluster.StartServer(context.Background(), t.TempDir(), opts)
	if errors.Is(err, localcluster.ErrNoTLS) {
		t.Skipf("skipped: %s: %v", localcluster.ServerBin, localcluster.ErrNoTLS)
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { reportDeath(t, s); s.Stop() })
	return s
}

// ClusterT starts a cluster for a test (see localcluster.StartCluster) and
// stops it at cleanup.
func ClusterT(t testing.TB, specs []string, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	c, err := localcluster.StartCluster(context.Background(), t.TempDir(), specs, opts)
	if errors.Is(err, localcluster.ErrNoTLS) {
		t.Skipf("skipped: %s: %v", localcluster.ServerBin, localcluster.ErrNoTLS)
	}
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		for _, s := range c.Nodes {
			reportDeath(t, s)
		}
		c.Stop()
	})
	return c
}

// reportDeath logs, for a failed test, how a server that nobody stopped ended.
func reportDeath(t testing.TB, s *localcluster.Server) {
	if !t.Failed() {
		return
	}
	if died := s.Died(); died != "" {
		t.Log(died)
	}
}

// SyncBuffer is a log destination safe for the goroutines of the code
// under test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CopyKeys copies keys from one node to another as a move's copy does:
// DUMP, then ASKING and RESTORE with the key's TTL (the target has their
// slots importing).
func CopyKeys(t testing.TB, ctx context.Context, from, to *redis.Client, keys []string) {
	t.Helper()
	for _, k := range keys {
		dump, err := from.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s on %s: %v", k, from.Options().Addr, err)
		}
		ttl := max(from.PTTL(ctx, k).Val(), 0)
		if _, err := to.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Restore(ctx, k, ttl, dump)
			return nil
		}); err != nil {
			t.Fatalf("RESTORE %s on %s: %v", k, to.Options().Addr, err)
		}
	}
}
