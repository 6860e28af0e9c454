package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// oneNodeCluster starts a cluster-mode master owning every slot.
func oneNodeCluster(t *testing.T, config ...string) *localcluster.Server {
	t.Helper()
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{Config: config})
	return c.Nodes[0]
}

func openLink(t *testing.T, s *localcluster.Server, cfg Config) (*Link, *KeyTable) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	defer c.Close()
	keys, err := LoadKeyTable(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = s.Addr
	cfg.SpoolDir = t.TempDir()
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, keys
}

// streamAfterRDB opens a link, reads the RDB to its end, and returns its
// command stream as readAll does.
func streamAfterRDB(t *testing.T, s *localcluster.Server) (<-chan *Command, <-chan error) {
	t.Helper()
	l, keys := openLink(t, s, Config{})
	if _, err := io.Copy(io.Discard, l.RDB()); err != nil {
		t.Fatal(err)
	}
	return readAll(l.Commands(keys))
}

// readAll drains the command stream into a channel until the link closes.
func readAll(r *CommandReader) (<-chan *Command, <-chan error) {
	out := make(chan *Command, 1024)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			cmd, err := r.Next()
			if err != nil {
				errc <- err
				return
			}
			out <- cmd
		}
	}()
	return out, errc
}

func masterOffset(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no master_repl_offset in INFO")
	return 0
}

// collectUntil reads commands until their offsets reach the source's
// master_repl_offset (read afresh each time, writes having stopped).
func collectUntil(t *testing.T, c *redis.Client, cmds <-chan *Command, errc <-chan error, prevEnd int64) []*Command {
	t.Helper()
	var got []*Command
	deadline := time.After(30 * time.Second)
	for {
		if want := masterOffset(t, c); prevEnd == want {
			return got
		} else if prevEnd > want {
			t.Fatalf("stream offset %d is past the master's %d", prevEnd, want)
		}
		select {
		case cmd := <-cmds:
			if cmd == nil {
				t.Fatalf("stream ended: %v", <-errc)
			}
			if cmd.Start != prevEnd {
				t.Fatalf("command %s starts at %d, previous ended at %d", cmd.Name(), cmd.Start, prevEnd)
			}
			prevEnd = cmd.End
			got = append(got, cmd)
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("stream stuck at offset %d, master at %d", prevEnd, masterOffset(t, c))
		}
	}
}

func TestStreamOrderAndOffsets(t *testing.T) {
	for _, diskless := range []string{"yes", "no"} {
		t.Run("diskless="+diskless, func(t *testing.T) {
			s := oneNodeCluster(t, "repl-diskless-sync "+diskless)
			ctx := context.Background()
			c := s.Client()
			defer c.Close()
			for i := 0; i < 1000; i++ {
				c.Set(ctx, fmt.Sprint("pre:", i), i, 0)
			}
			l, keys := openLink(t, s, Config{})

			// Writes while the snapshot is made and sent, then after it.
			const n = 3000
			writerDone := make(chan error, 1)
			go func() {
				for i := 0; i < n; i++ {
					var err error
					switch i % 3 {
					case 0:
						err = c.RPush(ctx, "seq{a}", i).Err()
					case 1:
						_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.RPush(ctx, "seq{a}", i)
							p.Incr(ctx, "count{a}")
							return nil
						})
					case 2:
						err = c.Set(ctx, fmt.Sprint("ttl:", i), i, time.Millisecond).Err()
					}
					if err != nil {
						writerDone <- err
						return
					}
				}
				writerDone <- nil
			}()
			rdb, err := io.Copy(io.Discard, l.RDB())
			if err != nil {
				t.Fatalf("read RDB: %v", err)
			}
			if st := l.Stats(); st.RDBBytes != rdb || st.Diskless != (diskless == "yes") {
				t.Fatalf("stats %+v after reading %d RDB bytes", st, rdb)
			}
			if err := <-writerDone; err != nil {
				t.Fatal(err)
			}
			cmds, errc := readAll(l.Commands(keys))
			got := collectUntil(t, c, cmds, errc, l.Offset)

			// The RPUSHes in the stream are a gapless, ordered tail of the sequence.
			var seq []int
			var kinds = map[string]int{}
			for _, cmd := range got {
				kinds[cmd.Name()]++
				for _, inner := range append([]Command{*cmd}, cmd.Tx...) {
					if inner.Args != nil && strings.EqualFold(string(inner.Args[0]), "RPUSH") {
						v, _ := strconv.Atoi(string(inner.Args[2]))
						seq = append(seq, v)
					}
				}
				if cmd.Tx != nil && (len(cmd.Tx) != 2 || cmd.Class != ClassKeyed) {
					t.Errorf("MULTI block %v: %d commands, class %v", cmd.Tx, len(cmd.Tx), cmd.Class)
				}
			}
			if len(seq) == 0 || seq[len(seq)-1] != n-2 {
				t.Fatalf("stream RPUSH tail %v, want it to end at %d", tail(seq), n-2)
			}
			for i := 1; i < len(seq); i++ {
				if seq[i] <= seq[i-1] || (seq[i]-seq[i-1] != 1 && seq[i]-seq[i-1] != 2) {
					t.Fatalf("RPUSH values out of order or missing: %d then %d", seq[i-1], seq[i])
				}
			}
			if kinds["MULTI"] == 0 || kinds["SET"] == 0 {
				t.Fatalf("stream lacks blocks or SETs: %v", kinds)
			}
		})
	}
}

func tail(s []int) []int {
	if len(s) > 5 {
		return s[len(s)-5:]
	}
	return s
}

// A consumer that does not read for seconds must not get the link dropped
// by a tight client-output-buffer-limit while the source is written to.
func TestSlowConsumerKeepsLink(t *testing.T) {
	s := oneNodeCluster(t, "client-output-buffer-limit replica 1mb 512kb 2")
	ctx := context.Background()
	c := s.Client()
	defer c.Close()
	value := strings.Repeat("v", 1024)
	p := c.Pipeline()
	for i := 0; i < 20000; i++ {
		p.Set(ctx, fmt.Sprint("pre:", i), value, 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	l, keys := openLink(t, s, Config{SpoolMemory: 1 << 20})
	// The master holds back the command stream until the transfer ends, so
	// writes during the transfer would hit the limit with any replica. Once
	// the RDB is in the spool (unread), the stream flows to us.
	select {
	case <-l.RDBDone():
	case <-time.After(30 * time.Second):
		t.Fatal("RDB not received")
	}
	c.Set(ctx, "first", "write", 0)
	for start := time.Now(); l.Stats().StreamBytes == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("command stream never started")
		}
	}

	// About 16 MB of writes while nobody reads the link.
	big := strings.Repeat("w", 4096)
	const writes = 4000
	for i := 0; i < writes; i += 200 {
		p := c.Pipeline()
		for j := i; j < i+200; j++ {
			p.Set(ctx, fmt.Sprint("w:", j), big, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // past the limit's 2 s soft window
	if _, err := io.Copy(io.Discard, l.RDB()); err != nil {
		t.Fatalf("read RDB: %v", err)
	}
	cmds, errc := readAll(l.Commands(keys))
	got := collectUntil(t, c, cmds, errc, l.Offset)
	sets := 0
	for _, cmd := range got {
		if cmd.Name() == "SET" && strings.HasPrefix(string(cmd.Args[1]), "w:") {
			sets++
		}
	}
	if sets != writes {
		t.Fatalf("stream carried %d of %d writes", sets, writes)
	}
	if st := l.Stats(); st.Spilled == 0 {
		t.Fatalf("nothing went through the spool file: %+v", st)
	}
	info, _ := c.Info(ctx, "replication").Result()
	if !strings.Contains(info, "connected_slaves:1") {
		t.Fatalf("source dropped the link: %s", info)
	}
}

// A dropped link is an error the consumer sees, not a hang.
func TestDroppedLinkIsAnError(t *testing.T) {
	s := oneNodeCluster(t)
	ctx := context.Background()
	c := s.Client()
	defer c.Close()
	cmds, errc := streamAfterRDB(t, s)
	c.Set(ctx, "k", "v", 0)
	if err := c.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case cmd := <-cmds:
			if cmd != nil {
				continue
			}
			err := <-errc
			if err == nil || errors.Is(err, ErrClosed) {
				t.Fatalf("stream ended with %v, want the drop", err)
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("consumer still blocked 10 s after the link was killed")
		}
	}
}

// The source's 5 s repl-diskless-sync-delay and its rdbcompression are
// turned off for the sync and restored once the snapshot has arrived.
func TestSourceTunedForTheSync(t *testing.T) {
	s := oneNodeCluster(t, "repl-diskless-sync-delay 5", "rdbcompression yes")
	ctx := context.Background()
	c := s.Client()
	defer c.Close()
	// 20 MB of values that LZF would shrink to almost nothing.
	value := strings.Repeat("a", 1024)
	p := c.Pipeline()
	for i := 0; i < 20000; i++ {
		p.Set(ctx, fmt.Sprint("k:", i), value, 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	l, _ := openLink(t, s, Config{})
	during, _ := c.ConfigGet(ctx, "repl-diskless-sync-delay").Result()
	n, err := io.Copy(io.Discard, l.RDB())
	if err != nil {
		t.Fatal(err)
	}
	if n < 20000*1024 {
		t.Fatalf("RDB of %d bytes: compressed, so rdbcompression was on during the sync", n)
	}
	if during["repl-diskless-sync-delay"] != "0" {
		t.Fatalf("repl-diskless-sync-delay during the sync: %v", during)
	}
	// Restoring happens right after the RDB's end reaches the spool.
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, _ := c.ConfigGet(ctx, "*").Result()
		if after["repl-diskless-sync-delay"] == "5" && after["rdbcompression"] == "yes" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("settings not restored: delay %s, rdbcompression %s", after["repl-diskless-sync-delay"], after["rdbcompression"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadSourceIsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Open(ctx, Config{Conn: cluster.Conn{Addr: "127.0.0.1:1"}}); err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	s := harness.ServerT(t, localcluster.Options{Config: []string{"requirepass secret"}})
	if _, err := Open(ctx, Config{Conn: cluster.Conn{Addr: s.Addr, Password: "wrong"}}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Open with a wrong password: %v", err)
	}
	l, err := Open(ctx, Config{Conn: cluster.Conn{Addr: s.Addr, Password: "secret"}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	defer l.Close()
	if _, err := io.Copy(io.Discard, l.RDB()); err != nil {
		t.Fatalf("read RDB with the right password: %v", err)
	}
}

// WAIT on the source never counts the link, even for writes its consumer
// has taken: it is no replica a write survives on. The master still sees it
// as an online replica that acknowledges (the control), so the count of 0
// is the ACK's offset, not a link the master has dropped.
func TestWaitNeverCountsTheLink(t *testing.T) {
	s := oneNodeCluster(t)
	ctx := context.Background()
	c := s.Client()
	defer c.Close()
	cmds, errc := streamAfterRDB(t, s)
	taken := make(chan string, 16)
	go func() {
		for cmd := range cmds {
			if len(cmd.Args) >= 3 && strings.EqualFold(string(cmd.Args[0]), "SET") {
				taken <- string(cmd.Args[2])
			}
		}
	}()
	for i := range 3 {
		v := strconv.Itoa(i)
		if err := c.Set(ctx, "k", v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-taken:
			if got != v {
				t.Fatalf("the consumer took SET k %s, want %s", got, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the consumer never took SET k %s (stream error: %v)", v, nonBlocking(errc))
		}
		// Past the periodic ACK, so a link acknowledging what it took
		// would be counted.
		n, err := c.Wait(ctx, 1, 1200*time.Millisecond).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("WAIT counted %d replicas for a write only the link holds, want 0", n)
		}
	}
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(repl, "connected_slaves:1") || !strings.Contains(repl, "state=online") {
		t.Fatalf("the master does not see the link as an online replica:\n%s", repl)
	}
}

func nonBlocking(errc <-chan error) error {
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// A link that continues the source's history gets no RDB and exactly the
// writes made after its point, in order, without a fork on the source.
func TestPartialSyncContinuesTheHistory(t *testing.T) {
	s := oneNodeCluster(t)
	ctx := context.Background()
	c := s.Client()
	defer c.Close()
	repl, err := info.Read(ctx, c, "replication")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ContinuePoint(repl); !errors.Is(err, ErrNoBacklog) {
		t.Fatalf("a source no replica has attached to: %v, want ErrNoBacklog", err)
	}
	// A full sync makes the source keep a backlog.
	first, _ := openLink(t, s, Config{})
	if _, err := io.Copy(io.Discard, first.RDB()); err != nil {
		t.Fatal(err)
	}
	first.Close()
	for i := 0; i < 50; i++ {
		c.RPush(ctx, "seq{a}", i)
	}
	if repl, err = info.Read(ctx, c, "replication"); err != nil {
		t.Fatal(err)
	}
	from, err := ContinuePoint(repl)
	if err != nil {
		t.Fatal(err)
	}
	forks := func() int64 {
		n, err := info.ReadInt(ctx, c, "stats", "total_forks")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	forksBefore := forks()
	for i := 50; i < 100; i++ {
		c.RPush(ctx, "seq{a}", i)
	}
	l, keys := openLink(t, s, Config{From: from})
	if l.Offset != from.Offset || l.ReplID != from.ReplID {
		t.Fatalf("link at %s %d, want %s %d", l.ReplID, l.Offset, from.ReplID, from.Offset)
	}
	if n, err := io.Copy(io.Discard, l.RDB()); n != 0 || err != nil {
		t.Fatalf("RDB of a partial sync: %d bytes, %v", n, err)
	}
	for i := 100; i < 150; i++ {
		c.RPush(ctx, "seq{a}", i)
	}
	cmds, errc := readAll(l.Commands(keys))
	var seq []int
	for _, cmd := range collectUntil(t, c, cmds, errc, l.Offset) {
		if cmd.Name() == "RPUSH" {
			v, _ := strconv.Atoi(string(cmd.Args[2]))
			seq = append(seq, v)
		}
	}
	if len(seq) != 100 || seq[0] != 50 || seq[99] != 149 {
		t.Fatalf("stream RPUSHes %v…%v (%d), want 50…149", seq[:min(3, len(seq))], tail(seq), len(seq))
	}
	for i := range seq {
		if seq[i] != 50+i {
			t.Fatalf("RPUSH %d at place %d", seq[i], i)
		}
	}
	if n := forks(); n != forksBefore {
		t.Fatalf("the source forked %d times for a partial sync", n-forksBefore)
	}
	// The keys path DUMPs every key it reads: compression stays off while
	// the link is open, and is restored when it closes. It has no full
	// sync to hurry: repl-diskless-sync-delay stays as it was. A full sync
	// meanwhile turns that off for its snapshot only.
	wantSettings(t, c, "during a partial sync", "5", "no")
	full, _ := openLink(t, s, Config{})
	wantSettings(t, c, "during a full sync beside a partial one", "0", "no")
	if _, err := io.Copy(io.Discard, full.RDB()); err != nil {
		t.Fatal(err)
	}
	full.Close()
	wantSettings(t, c, "after the full sync's link closed, the partial one open", "5", "no")
	l.Close()
	wantSettings(t, c, "after both links closed", "5", "yes")

	// A point the source does not hold is refused, not turned into a full sync.
	bad := *from
	bad.ReplID = strings.Repeat("0", 40)
	_, err = Open(ctx, Config{Conn: cluster.Conn{Addr: s.Addr}, From: &bad})
	if !errors.Is(err, ErrNoContinue) {
		t.Fatalf("a point of another history: %v, want ErrNoContinue", err)
	}
}

// wantSettings fails unless the source's repl-diskless-sync-delay and
// rdbcompression are delay and compression.
func wantSettings(t *testing.T, c *redis.Client, when, delay, compression string) {
	t.Helper()
	got, err := c.ConfigGet(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["repl-diskless-sync-delay"] != delay || got["rdbcompression"] != compression {
		t.Fatalf("%s: repl-diskless-sync-delay %q, rdbcompression %q; want %q, %q",
			when, got["repl-diskless-sync-delay"], got["rdbcompression"], delay, compression)
	}
}
