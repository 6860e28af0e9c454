package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	t.Cleanup(func() { reportDeath(t, s); s.Stop() })
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
	t.Cleanup(func() {
		for _, s := range c.Nodes {
			reportDeath(t, s)
		}
		c.Stop()
	})
	return c
}

// reportDeath logs, for a failed test, how a server that nobody stopped
// ended (a crash, an OOM kill) and the end of its log, which goes away
// with the test's temporary folder.
func reportDeath(t testing.TB, s *Server) {
	if !t.Failed() || s.Alive() || s.stopRequested.Load() {
		return
	}
	t.Logf("server %s (pid %d) exited during the test (%v); its log:\n%s", s.Addr, s.PID, s.cmd.ProcessState, s.crashExcerpt())
}

// crashExcerpt is the start of the server's bug report (the assertion or
// signal and the stack trace) if its log has one, else the log's last lines.
func (s *Server) crashExcerpt() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.Contains(l, "BUG REPORT START") {
			continue
		}
		var out []string
		for _, l := range lines[i:] {
			if strings.Contains(l, "argv[") || strings.TrimSpace(l) == "" {
				continue
			}
			if out = append(out, l); len(out) == 40 {
				break
			}
		}
		return strings.Join(out, "\n")
	}
	return strings.ReplaceAll(s.LogTail(40), " | ", "\n")
}
