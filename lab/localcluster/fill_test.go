package localcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// TestFillAndCompare fills a cluster through a cluster client, copies the
// keys to a standalone server, and checks that CompareKeys finds them equal,
// then finds each kind of difference.
func TestFillAndCompare(t *testing.T) {
	ctx := context.Background()
	c := harness.ClusterT(t, []string{"0-5460", "5461-10922", "10923-16383"}, localcluster.Options{})
	cc := c.Client()
	defer cc.Close()
	start := time.Now()
	keys, err := localcluster.FillEveryType(ctx, cc, "f", localcluster.FillOptions{Small: 3, BigElements: 3000, TTL: time.Hour, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys in %v", len(keys), time.Since(start))
	var dbsize int64
	for _, s := range c.Nodes {
		cl := s.Client()
		n, err := cl.DBSize(ctx).Result()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		dbsize += n
	}
	if dbsize != int64(len(keys)) {
		t.Fatalf("cluster holds %d keys, FillEveryType returned %d names", dbsize, len(keys))
	}

	dst := harness.ServerT(t, localcluster.Options{})
	dc := dst.Client()
	defer dc.Close()
	for _, k := range keys {
		dump, err := cc.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := cc.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 {
			ttl = 0
		}
		if err := dc.Restore(ctx, k, ttl, dump).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := localcluster.CompareKeys(ctx, cc, dc, keys); err != nil {
		t.Fatal(err)
	}

	var stream, list, str string
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, ":stream:1"):
			stream = k
		case strings.Contains(k, "list:small:1"):
			list = k
		case strings.Contains(k, "str:raw:0"): // has a TTL: a new one changes the expiry, not the digest
			str = k
		}
	}
	if err := dc.RPush(ctx, list, "extra").Err(); err != nil {
		t.Fatal(err)
	}
	if err := dc.Expire(ctx, str, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := dc.XGroupCreateConsumer(ctx, stream, "g1", "newcomer").Err(); err != nil {
		t.Fatal(err)
	}
	err = localcluster.CompareKeys(ctx, cc, dc, keys)
	if err == nil {
		t.Fatal("differences not found")
	}
	for _, want := range []string{"3 of", list + `": digest`, str + `": pexpiretime`, stream + `": stream groups`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	var untouched []string
	for _, k := range keys {
		if k != stream && k != list && k != str {
			untouched = append(untouched, k)
		}
	}
	absentAndResurrected(t, cc, dc, untouched)
}

// absentAndResurrected checks the comparisons on keys that do not exist: a
// key expected to exist that is on neither side is a difference, not two
// equal empty answers; a key missing on the target is named as missing; a
// deleted key that comes back is named as resurrected.
func absentAndResurrected(t *testing.T, src *redis.ClusterClient, dst *redis.Client, keys []string) {
	ctx := context.Background()
	ghost := "f:never-written"
	err := localcluster.CompareKeys(ctx, src, dst, []string{keys[0], ghost})
	if err == nil || !strings.Contains(err.Error(), `"`+ghost+`": absent on both sides`) || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("CompareKeys of a key neither side has: %v", err)
	}
	if _, err := localcluster.Capture(ctx, src, []string{keys[0], ghost}); err == nil || !strings.Contains(err.Error(), ghost) {
		t.Errorf("Capture of a key that does not exist: %v", err)
	}
	// A key deleted on the source: absent on both sides is what is expected.
	gone := keys[1]
	if err := src.Del(ctx, gone).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := localcluster.CompareKeysMayBeAbsent(ctx, src, dst, []string{keys[2], gone}); err == nil || n != 1 ||
		!strings.Contains(err.Error(), `"`+gone+`": resurrected`) || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("CompareKeysMayBeAbsent with a deleted key the target still has: %d present, %v", n, err)
	}
	if err := dst.Del(ctx, gone).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := localcluster.CompareKeysMayBeAbsent(ctx, src, dst, []string{keys[2], gone}); err != nil || n != 1 {
		t.Errorf("CompareKeysMayBeAbsent once both lack the deleted key: %d present, %v", n, err)
	}
	ks, err := localcluster.CaptureMayBeAbsent(ctx, src, []string{keys[2], gone})
	if err != nil {
		t.Fatal(err)
	}
	if ks.Present() != 1 {
		t.Errorf("captured %d present keys, want 1", ks.Present())
	}
	if err := ks.Compare(ctx, dst); err != nil {
		t.Errorf("KeyStates.Compare with the deleted key absent on both: %v", err)
	}
	// The deleted key comes back on the target; a kept key goes missing.
	if err := dst.Set(ctx, gone, "back", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Del(ctx, keys[2]).Err(); err != nil {
		t.Fatal(err)
	}
	err = ks.Compare(ctx, dst)
	if err == nil || !strings.Contains(err.Error(), `"`+gone+`": resurrected: expected absent, found a string`) ||
		!strings.Contains(err.Error(), `"`+keys[2]+`": missing`) || !strings.Contains(err.Error(), "2 of 2") {
		t.Errorf("KeyStates.Compare with a resurrected and a missing key: %v", err)
	}
}

// BigTypes limits the big keys to the types named (the keys path reads no
// big list or stream, so a benchmark of it names the others).
func TestFillBigTypes(t *testing.T) {
	ctx := context.Background()
	s := harness.ServerT(t, localcluster.Options{})
	c := s.Client()
	defer c.Close()
	keys, err := localcluster.FillEveryType(ctx, c, "b", localcluster.FillOptions{Small: 1, BigElements: 1500, BigTypes: []string{"hash", "zset"}})
	if err != nil {
		t.Fatal(err)
	}
	var big []string
	for _, k := range keys {
		if strings.Contains(k, ":big:") {
			big = append(big, k)
		}
	}
	if strings.Join(big, " ") != "b:big:hash b:big:zset" {
		t.Fatalf("big keys %v, want b:big:hash and b:big:zset", big)
	}
	if n := c.Exists(ctx, "b:big:list", "b:big:set", "b:big:stream").Val(); n != 0 {
		t.Fatalf("%d big keys of types not asked for", n)
	}
	if h, z := c.HLen(ctx, "b:big:hash").Val(), c.ZCard(ctx, "b:big:zset").Val(); h != 1500 || z != 1500 {
		t.Fatalf("big hash of %d fields, zset of %d members; want 1500 each", h, z)
	}
}
