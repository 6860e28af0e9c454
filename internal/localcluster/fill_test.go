package localcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
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
}
