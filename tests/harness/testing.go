package harness

import (
	"context"
	"errors"
	"testing"
)

// Server starts a standalone server for a test and stops it at cleanup.
func ServerT(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := StartServer(context.Background(), t.TempDir(), opts)
	if errors.Is(err, ErrNoTLS) {
		t.Skipf("skipped: %s: %v", ServerBin, ErrNoTLS)
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// ClusterT starts a cluster for a test (see StartCluster) and stops it at cleanup.
func ClusterT(t testing.TB, specs []string, opts Options) *Cluster {
	t.Helper()
	c, err := StartCluster(context.Background(), t.TempDir(), specs, opts)
	if errors.Is(err, ErrNoTLS) {
		t.Skipf("skipped: %s: %v", ServerBin, ErrNoTLS)
	}
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}
