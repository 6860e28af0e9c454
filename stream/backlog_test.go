package stream

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
)

// A source no replica ever attached to keeps no backlog, so no partial sync
// can continue its history. StartBacklog gives it one without a fork, even
// where the source's own settings would fork at once (a disk-based sync,
// or a diskless one with no delay), and puts those settings back. A link
// then continues the history from there, still without a fork, past the
// moment a delayed fork would have come.
func TestStartBacklogWithoutAFork(t *testing.T) {
	for _, settings := range [][2]string{{"no", "0"}, {"yes", "0"}, {"yes", "5"}} {
		t.Run("diskless="+settings[0]+",delay="+settings[1], func(t *testing.T) {
			t.Parallel()
			s := oneNodeCluster(t)
			ctx := context.Background()
			c := s.Client()
			defer c.Close()
			if err := c.ConfigSet(ctx, "repl-diskless-sync", settings[0]).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", settings[1]).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 1000 {
				c.Set(ctx, "k{a}"+string(rune('a'+i%26)), i, 0)
			}
			repl, err := info.Read(ctx, c, "replication")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ContinuePoint(repl); err != ErrNoBacklog {
				t.Fatalf("a fresh source: %v, want ErrNoBacklog", err)
			}
			before, after, err := StartBacklog(ctx, Config{Conn: cluster.Conn{Addr: s.Addr}})
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Fatalf("the source forked: total_forks %d -> %d", before, after)
			}
			got, err := c.ConfigGet(ctx, "repl-diskless-sync*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if got["repl-diskless-sync"] != settings[0] || got["repl-diskless-sync-delay"] != settings[1] {
				t.Fatalf("settings after: %v, want diskless %s, delay %s", got, settings[0], settings[1])
			}
			if repl, err = info.Read(ctx, c, "replication"); err != nil {
				t.Fatal(err)
			}
			from, err := ContinuePoint(repl)
			if err != nil {
				t.Fatalf("after StartBacklog: %v", err)
			}
			if err := c.Set(ctx, "after", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			l, keys := openLink(t, s, Config{From: from})
			if n, err := io.Copy(io.Discard, l.RDB()); n != 0 || err != nil {
				t.Fatalf("RDB of the partial sync: %d bytes, %v", n, err)
			}
			cmds, errc := readAll(l.Commands(keys))
			var set bool
			for _, cmd := range collectUntil(t, c, cmds, errc, l.Offset) {
				set = set || cmd.Name() == "SET"
			}
			if !set {
				t.Fatal("the link did not continue with the write made after the backlog began")
			}
			// Past the delay a waiting replica would have forked the source at.
			time.Sleep((backlogDelay + 1) * time.Second)
			if n, err := info.ReadInt(ctx, c, "stats", "total_forks"); err != nil || n != before {
				t.Fatalf("total_forks %d after the delay (%v), want %d", n, err, before)
			}
		})
	}
}
