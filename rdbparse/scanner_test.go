package rdbparse

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/chunk"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// saved is an Entry copied out of the scanner's buffers.
type saved struct {
	Entry
	key string
}

func scanAll(t testing.TB, rdb []byte, want *slots.Set, opts ...Option) ([]saved, Stats, int) {
	t.Helper()
	sc := NewScanner(bufio.NewReaderSize(bytes.NewReader(rdb), 64<<10), want, opts...)
	var out []saved
	for {
		e, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		c := saved{Entry: *e, key: string(e.Key)}
		c.Key = bytes.Clone(e.Key)
		c.Payload = bytes.Clone(e.Payload)
		out = append(out, c)
	}
	return out, sc.Stats(), sc.Version()
}

// saveRDB makes the server write its RDB and returns the file's bytes.
func saveRDB(t testing.TB, s *localcluster.Server) []byte {
	t.Helper()
	c := s.Client()
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bigElements(t *testing.T) int {
	if testing.Short() {
		return 20_000
	}
	return 120_000
}

func TestScanAgainstRedis(t *testing.T) {
	for _, compression := range []string{"yes", "no"} {
		t.Run("rdbcompression="+compression, func(t *testing.T) {
			t.Parallel()
			testScanAgainstRedis(t, compression)
		})
	}
}

func testScanAgainstRedis(t *testing.T, compression string) {
	ctx := context.Background()
	set, err := slots.Parse("0-5460")
	if err != nil {
		t.Fatal(err)
	}
	src := harness.ServerT(t, localcluster.Options{Config: []string{"rdbcompression " + compression}})
	dst := harness.ServerT(t, localcluster.Options{})
	sc, dc := src.Client(), dst.Client()
	defer sc.Close()
	defer dc.Close()

	// A prefix that puts most of the big keys into the chosen slots.
	prefix := "k"
	for i := 0; bigChosen(prefix, set) < 4; i++ {
		prefix = "k" + strconv.Itoa(i)
	}
	keys, err := localcluster.FillEveryType(ctx, sc, prefix, localcluster.FillOptions{Small: 12, BigElements: bigElements(t), TTL: time.Hour, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	// A list with plain (non-listpack) nodes: elements above the packed threshold.
	if err := sc.Do(ctx, "DEBUG", "QUICKLIST-PACKED-THRESHOLD", "1000").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		k := "k:list:plain:" + string(rune('a'+i))
		if err := sc.RPush(ctx, k, "small", strings.Repeat("P", 3000+i), "tail").Err(); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	// A key in another database.
	c1 := redis.NewClient(&redis.Options{Addr: src.Addr, DB: 3})
	if err := c1.Set(ctx, "db3key", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c1.Close()

	rdb := saveRDB(t, src)

	// Every slot: all keys, every type Redis 7.0 writes.
	all, st, version := scanAll(t, rdb, slots.NewSet(slots.Range{Start: 0, End: slots.Count - 1}))
	if version != 10 {
		t.Errorf("version %d, want 10 (Redis 7.0)", version)
	}
	if int(st.Keys) != len(keys)+1 || st.Chosen != st.Keys || st.Bytes != int64(len(rdb)) {
		t.Errorf("stats %+v for %d keys and %d bytes", st, len(keys)+1, len(rdb))
	}
	types := map[byte]int{}
	for _, e := range all {
		types[e.Type]++
		if e.key == "db3key" && e.DB != 3 {
			t.Errorf("db3key in db %d", e.DB)
		}
	}
	for _, want := range []byte{TypeString, TypeListQuicklist2, TypeSetIntset, TypeSet, TypeHashListpack, TypeHash,
		TypeZsetListpack, TypeZset2, TypeStreamListpacks2} {
		if types[want] == 0 {
			t.Errorf("no key of RDB type %d in the file (types seen: %v)", want, types)
		}
	}

	// A third of the slots: exactly the server's keys of those slots.
	entries, st, _ := scanAll(t, rdb, set)
	other := 0
	for i := 0; i < len(entries); i++ {
		if entries[i].DB != 0 { // compared by name below, restored into db 0 of the scratch server
			entries = append(entries[:i], entries[i+1:]...)
			i--
			other++
		}
	}
	var wantKeys, got []string
	for _, k := range keys {
		if set.Contains(slots.ForString(k)) {
			wantKeys = append(wantKeys, k)
		}
	}
	serverKeys, err := sc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(serverKeys) != len(keys) {
		t.Fatalf("server holds %d keys, fill wrote %d", len(serverKeys), len(keys))
	}
	for _, e := range entries {
		got = append(got, e.key)
		if e.Slot != slots.ForKey(e.Key) || !set.Contains(e.Slot) {
			t.Errorf("%q: slot %d", e.key, e.Slot)
		}
	}
	sort.Strings(wantKeys)
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(wantKeys, "\n") {
		t.Fatalf("scan returned %d keys, the server has %d in those slots", len(got), len(wantKeys))
	}
	if st.Chosen != int64(len(entries)+other) || st.Chosen+st.Skipped+st.Expired != st.Keys || st.Expired != 0 {
		t.Errorf("stats %+v", st)
	}
	checkElements(t, ctx, sc, entries)

	// RESTORE of every payload, then the same type, digest and expiry.
	pipe := dc.Pipeline()
	for _, e := range entries {
		pipe.RestoreReplace(ctx, e.key, 0, string(e.Payload))
		if e.ExpireAt != 0 {
			pipe.PExpireAt(ctx, e.key, time.UnixMilli(e.ExpireAt))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("RESTORE: %v", err)
	}
	if err := localcluster.CompareKeys(ctx, sc, dc, got); err != nil {
		t.Fatalf("after RESTORE: %v", err)
	}

	// Decode and replay as commands, in small chunks.
	if err := dc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	commands := 0
	for _, e := range entries {
		o, err := Decode(&e.Entry, version)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		pipe := dc.Pipeline()
		for args := range o.Commands(e.Key, chunk.Limit{Elements: 500}) {
			cmd := make([]any, len(args))
			for i, a := range args {
				cmd[i] = a
			}
			pipe.Do(ctx, cmd...)
			commands++
		}
		if e.ExpireAt != 0 {
			pipe.PExpireAt(ctx, e.key, time.UnixMilli(e.ExpireAt))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("replay %q: %v", e.key, err)
		}
	}
	if err := localcluster.CompareKeys(ctx, sc, dc, got); err != nil {
		t.Fatalf("after replay: %v", err)
	}
	t.Logf("%d keys of %d, %d bytes; replayed with %d commands", len(entries), st.Keys, len(rdb), commands)
}

// bigChosen counts the big keys FillEveryType names under prefix that are in set.
func bigChosen(prefix string, set *slots.Set) int {
	n := 0
	for _, k := range []string{"list", "set", "hash", "zset", "stream"} {
		if set.Contains(slots.ForString(prefix + ":big:" + k)) {
			n++
		}
	}
	return n
}

// checkElements compares Entry.Elements with the server's own counts.
func checkElements(t *testing.T, ctx context.Context, c *redis.Client, entries []saved) {
	pipe := c.Pipeline()
	counts := make([]*redis.IntCmd, len(entries))
	for i, e := range entries {
		switch e.Type {
		case TypeString:
			counts[i] = pipe.StrLen(ctx, e.key)
		case TypeListQuicklist2:
			counts[i] = pipe.LLen(ctx, e.key)
		case TypeSet, TypeSetIntset:
			counts[i] = pipe.SCard(ctx, e.key)
		case TypeHash, TypeHashListpack:
			counts[i] = pipe.HLen(ctx, e.key)
		case TypeZset2, TypeZsetListpack:
			counts[i] = pipe.ZCard(ctx, e.key)
		case TypeStreamListpacks2:
			counts[i] = pipe.XLen(ctx, e.key)
		default:
			t.Errorf("%q: unexpected type %d", e.key, e.Type)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	big := 0
	for i, e := range entries {
		if counts[i] == nil {
			continue
		}
		if uint64(counts[i].Val()) != e.Elements {
			t.Errorf("%q (type %d): Elements %d, server says %d", e.key, e.Type, e.Elements, counts[i].Val())
		}
		if e.Elements >= 100_000 {
			big++
		}
	}
	if big < 4 && !testing.Short() {
		t.Errorf("only %d chosen keys with 100k+ elements", big)
	}
}
