// Package tests holds slotmover's integration tests: real redis-server
// processes in cluster mode, started on free loopback ports by the harness.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/slotmover/slotmover/chunk"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/tests/harness"
)

type copied struct {
	key      string
	expireAt int64
	elements uint64
	entry    rdbparse.Entry // Key and Payload owned here
}

// The snapshot part of a move, on both RDB transfer forms: the keys the
// scanner emits for a slot range are exactly those CLUSTER GETKEYSINSLOT
// lists; every payload RESTOREd elsewhere is the same value with the same
// expiry; every big key decoded and replayed as commands is the same value.
func TestSnapshotFilteredBySlot(t *testing.T) {
	for _, diskless := range []string{"yes", "no"} {
		t.Run("diskless="+diskless, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			src := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{Config: []string{"repl-diskless-sync " + diskless}}).Nodes[0]
			sc := src.Client()
			defer sc.Close()
			var all []string
			for i := 0; i < 40; i++ {
				keys, err := localcluster.FillEveryType(ctx, sc, fmt.Sprintf("{t%d}", i), localcluster.FillOptions{Small: 3, TTL: time.Hour, Seed: uint64(i)})
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, keys...)
			}
			big, err := localcluster.FillEveryType(ctx, sc, "{big}", localcluster.FillOptions{Small: 1, BigElements: 100_000, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, big...)
			bigSlot := slots.ForString("{big}")
			set, err := slots.Parse(fmt.Sprintf("0-5460,%d", bigSlot))
			if bigSlot <= 5460 {
				set, err = slots.Parse("0-5460")
			}
			if err != nil {
				t.Fatal(err)
			}

			link, err := stream.Open(ctx, stream.Config{Conn: cluster.Conn{Addr: src.Addr}, SpoolDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer link.Close()
			scan := rdbparse.NewScanner(bufio.NewReaderSize(link.RDB(), 1<<20), set)
			var got []copied
			for {
				e, err := scan.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				own := *e
				own.Key, own.Payload = bytes.Clone(e.Key), bytes.Clone(e.Payload)
				got = append(got, copied{key: string(e.Key), expireAt: e.ExpireAt, elements: e.Elements, entry: own})
			}
			// Nothing may follow the RDB in its reader.
			if n, err := link.RDB().Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("after the RDB: %d bytes, %v", n, err)
			}
			if st := link.Stats(); st.Diskless != (diskless == "yes") {
				t.Fatalf("transfer form: diskless=%v", st.Diskless)
			}

			// Exactly the keys the source lists for those slots.
			var want []string
			for _, s := range set.Slots() {
				n, err := sc.ClusterCountKeysInSlot(ctx, int(s)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					keys, err := sc.ClusterGetKeysInSlot(ctx, int(s), int(n)).Result()
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, keys...)
				}
			}
			gotKeys := make([]string, len(got))
			for i, c := range got {
				gotKeys[i] = c.key
			}
			sort.Strings(want)
			sort.Strings(gotKeys)
			if len(want) < 500 || fmt.Sprint(want) != fmt.Sprint(gotKeys) {
				t.Fatalf("scanner emitted %d keys, the source lists %d for %s", len(gotKeys), len(want), set)
			}

			// Every payload restores to the same value and expiry.
			scratch := harness.ServerT(t, localcluster.Options{})
			rc := scratch.Client()
			defer rc.Close()
			p := rc.Pipeline()
			for _, c := range got {
				p.Do(ctx, "RESTORE", c.key, c.expireAt, c.entry.Payload, "ABSTTL", "REPLACE")
			}
			if _, err := p.Exec(ctx); err != nil {
				t.Fatalf("RESTORE: %v", err)
			}
			if err := localcluster.CompareKeys(ctx, sc, rc, gotKeys); err != nil {
				t.Fatal(err)
			}

			// Big keys decoded and replayed as commands are the same values.
			replay := harness.ServerT(t, localcluster.Options{})
			pc := replay.Client()
			defer pc.Close()
			var bigKeys []string
			for _, c := range got {
				if c.elements < 100_000 {
					continue
				}
				bigKeys = append(bigKeys, c.key)
				obj, err := rdbparse.Decode(&c.entry, scan.Version())
				if err != nil {
					t.Fatalf("decode %q: %v", c.key, err)
				}
				if err := replayObject(ctx, pc, obj, c); err != nil {
					t.Fatalf("replay %q: %v", c.key, err)
				}
			}
			if len(bigKeys) < 5 {
				t.Fatalf("only %d big keys in the chosen slots: %v", len(bigKeys), bigKeys)
			}
			if err := localcluster.CompareKeys(ctx, sc, pc, bigKeys); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func replayObject(ctx context.Context, c *redis.Client, obj *rdbparse.Object, e copied) error {
	p := c.Pipeline()
	for args := range obj.Commands([]byte(e.key), chunk.Limit{}) {
		a := make([]any, len(args))
		for i, x := range args {
			a[i] = x
		}
		p.Do(ctx, a...)
	}
	if e.expireAt > 0 {
		p.PExpireAt(ctx, e.key, time.UnixMilli(e.expireAt))
	}
	_, err := p.Exec(ctx)
	return err
}
