package mover

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
	"github.com/tidwall/redcon"
)

// An RDB version the scanner does not read is refused before anything
// changes, naming what to use instead, never at the snapshot's header.
func TestReadableVersion(t *testing.T) {
	for _, tc := range []struct {
		v      int
		refuse bool
	}{{0, false}, {9, false}, {rdbparse.MaxVersion, false}, {rdbparse.MaxVersion + 1, true}, {80, true}} {
		err := readableVersion(tc.v)
		if (err != nil) != tc.refuse {
			t.Errorf("RDB %d: %v, want refused %v", tc.v, err, tc.refuse)
		}
		if err != nil && !strings.Contains(err.Error(), "CLUSTER MIGRATION") {
			t.Errorf("RDB %d: %v does not name what to use instead", tc.v, err)
		}
	}
}

// dumpVersion reads the RDB version from a key of the moving slots, and 0
// where they hold none; it writes nothing.
func TestDumpVersion(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{})
	node := c.Nodes[0].Client()
	defer node.Close()
	set := slots.NewSet(slots.Range{Start: 1000, End: 1999})
	if v, err := dumpVersion(ctx, node, set); err != nil || v != 0 {
		t.Fatalf("no keys: version %d, %v; want 0", v, err)
	}
	key := tempKey(1500, "version", 0)
	if err := node.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := dumpVersion(ctx, node, set)
	if err != nil {
		t.Fatal(err)
	}
	dump, err := node.Dump(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := rdbparse.DumpVersion([]byte(dump)); v != want || v < 9 {
		t.Fatalf("version %d, want %d (its DUMP's)", v, want)
	}
	if n, err := node.DBSize(ctx).Result(); err != nil || n != 1 {
		t.Fatalf("DBSIZE %d after reading the version, want 1 (%v)", n, err)
	}

	// A big key first: the version comes from a small key's DUMP, and the
	// big one is never dumped (the slow log would show it).
	big := tempKey(1000, "version", 1)
	members := make([]redis.Z, 5000)
	for i := range members {
		members[i] = redis.Z{Score: float64(i), Member: i}
	}
	if err := node.ZAdd(ctx, big, members...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
	if err := node.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := dumpVersion(ctx, node, set); err != nil || v != versionOfDump(t, node, key) {
		t.Fatalf("with a big key first: version %d, %v", v, err)
	}
	logged, err := node.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logged {
		if len(l.Args) == 2 && strings.EqualFold(l.Args[0], "DUMP") && l.Args[1] == big {
			t.Errorf("the big key was dumped: %v", l.Args)
		}
	}
}

// versionOfDump is the RDB version of key's DUMP.
func versionOfDump(t *testing.T, c *redis.Client, key string) int {
	t.Helper()
	dump, err := c.Dump(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return rdbparse.DumpVersion([]byte(dump))
}

// Preflight finds a server's own atomic slot migration by COMMAND INFO:
// Redis 8.4's CLUSTER MIGRATION (TestServerWithBuiltInMigrationIsLeftToIt
// runs that build) and Valkey 9's CLUSTER MIGRATESLOTS. No Valkey 9 build
// is at hand, so a stand-in answers COMMAND INFO as Valkey 9 does: the
// command's entry for the subcommand it has, nil for one it lacks.
func TestBuiltInMigrationOfValkey9(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := redcon.NewServer(ln.Addr().String(), func(conn redcon.Conn, cmd redcon.Command) {
		if len(cmd.Args) == 3 && strings.EqualFold(string(cmd.Args[0]), "COMMAND") && strings.EqualFold(string(cmd.Args[1]), "INFO") {
			conn.WriteArray(1)
			if strings.EqualFold(string(cmd.Args[2]), "cluster|migrateslots") {
				// name, arity, flags, first key, last key, step, ACL
				// categories, tips, key specs, subcommands
				conn.WriteArray(10)
				conn.WriteBulkString("cluster|migrateslots")
				conn.WriteInt(-5)
				conn.WriteArray(0)
				conn.WriteInt(0)
				conn.WriteInt(0)
				conn.WriteInt(0)
				conn.WriteArray(0)
				conn.WriteArray(0)
				conn.WriteArray(0)
				conn.WriteArray(0)
				return
			}
			conn.WriteNull() // in an array: go-redis reads nil
			return
		}
		conn.WriteError("ERR unknown command")
	}, nil, nil)
	go srv.Serve(ln)
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	if got := builtInMigration(context.Background(), c); got != "CLUSTER MIGRATESLOTS" {
		t.Fatalf("builtInMigration: %q, want CLUSTER MIGRATESLOTS", got)
	}
}
