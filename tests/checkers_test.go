package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// Negative controls: the checks the move tests rely on, each shown to
// report a fault planted by hand. A check that cannot fail proves nothing.

// The writer's checks (writer.finish): a writer that got nothing
// acknowledged, errors it got, writes bounced between two nodes, one acknowledged write dropped from the
// server, and ASK and TRYAGAIN replies provoked with a slot put in
// MIGRATING/IMPORTING by hand, counted both by the servers' errorstats (as
// parsed by Cluster.ErrorStats) and by the writer's own client.
func TestWriterChecksCatchPlantedFaults(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 1)

	// A writer whose every write is refused (out of memory): no write
	// acknowledged, and the errors it got.
	if err := source.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	refused := startWriter(t, c, 10)
	refused.wg.Wait() // every increment tried
	refused.halt()
	if err := source.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	v, err := refused.verdict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(v.problems(), "; "); v.ops != 0 || v.errs["OOM"] != 10 ||
		!strings.Contains(p, "no write acknowledged") || !strings.Contains(p, "the writer got errors: map[OOM:10]") {
		t.Errorf("a writer refused every write: %d acknowledged, errors %v; problems: %s", v.ops, v.errs, p)
	}

	// Writes bounced between two nodes for good, as between a release
	// and a claim that never comes: the source sends counters 1-3 to the
	// target, which sends them back. The writer retries each for
	// bounceRetry, then counts it failed.
	bounced := []string{counterKey(1), counterKey(2), counterKey(3)}
	for _, k := range bounced {
		s := slots.ForString(k)
		if err := source.Do(ctx, "CLUSTER", "DELSLOTS", s).Err(); err != nil {
			t.Fatal(err)
		}
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", c.IDs[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b := startWriter(t, c, 4)
	b.wg.Wait()
	b.halt()
	for _, k := range bounced {
		if err := source.Do(ctx, "CLUSTER", "SETSLOT", slots.ForString(k), "NODE", c.IDs[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if v, err = b.verdict(ctx); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(v.problems(), "; "); v.bounces != 3 || v.errs["MOVED"] != 3 ||
		!strings.Contains(p, "gave up on 3 writes bounced between two nodes (at most 2)") {
		t.Errorf("3 writes bounced for good: %d bounces counted, errors %v; problems: %s", v.bounces, v.errs, p)
	}
	if err := source.Del(ctx, counterKey(0)).Err(); err != nil {
		t.Fatal(err)
	}

	// A healthy run first: the control.
	w := startWriter(t, c, 2*counters)
	w.wg.Wait() // every increment done
	w.halt()
	v, err = w.verdict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := v.problems(); len(p) > 0 || v.ops != 2*counters {
		t.Fatalf("the control run: %d acknowledged; problems %v", v.ops, p)
	}

	// One acknowledged write dropped from the server: the control run
	// incremented each counter twice, with no error.
	dropped := counterKey(7)
	if err := w.cc.Decr(ctx, dropped).Err(); err != nil {
		t.Fatal(err)
	}

	// A slot in migration, the way redis-cli --cluster reshard leaves it.
	tag := tagIn(mustSlots(t, "0-16383"), 77)
	slot := slots.ForString(tag)
	if err := source.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.IDs[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := target.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.IDs[0]).Err(); err != nil {
		t.Fatal(err)
	}
	// A key the source lacks: -ASK. Several keys the importing target
	// lacks, asked with ASKING: -TRYAGAIN (on every server version).
	if err := source.Get(ctx, tag+":absent").Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("GET of a missing key of a migrating slot: %v, want ASK", err)
	}
	var mget *redis.SliceCmd
	if _, err := target.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		mget = p.MGet(ctx, tag+":absent", tag+":also-absent")
		return nil
	}); err == nil || mget.Err() == nil || !strings.HasPrefix(mget.Err().Error(), "TRYAGAIN") {
		t.Fatalf("ASKING + MGET of missing keys of an importing slot: %v, want TRYAGAIN", mget.Err())
	}
	// Through the writer's client: the ASK is followed (ASKING, then the
	// INCR on the importing target), and its node client counts it.
	if err := w.cc.Incr(ctx, tag+":fresh").Err(); err != nil {
		t.Fatal(err)
	}

	v, err = w.verdict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := dropped + " = 1, acknowledged 2 (+0 unknown)"; !slices.Equal(v.bad, []string{want}) {
		t.Errorf("counters reported: %v, want exactly %q", v.bad, want)
	}
	if v.errorstat["ASK"] != 2 || v.errorstat["TRYAGAIN"] != 1 || v.seen["ASK"] != 1 {
		t.Errorf("provoked 2 ASK (1 through the writer's client) and 1 TRYAGAIN; counted by the servers %v, by the client %v", v.errorstat, v.seen)
	}
	p := strings.Join(v.problems(), "; ")
	for _, want := range []string{
		"1 counters lost or gained acknowledged writes: " + dropped + " = 1, acknowledged 2",
		"the writer's client was answered ASK 1 times",
		"the servers answered ASK 2 times (errorstats)",
		"the servers answered TRYAGAIN 1 times (errorstats)",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("problems lack %q: %s", want, p)
		}
	}
}

// After a real move, the checks of the moved data: a key deleted before
// the move that comes back on the target is reported as resurrected (the
// only difference), and a key of a moved slot left on the source is
// reported by Cluster.Orphans (the only one).
func TestMoveChecksCatchResurrectedAndOrphanedKeys(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-99")
	tag := tagIn(set, 5)
	keys, err := localcluster.FillEveryType(ctx, cc, tag, localcluster.FillOptions{Small: 2, TTL: time.Hour, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	deleted := tag + ":deleted"
	if err := cc.Set(ctx, deleted, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.Del(ctx, deleted).Err(); err != nil {
		t.Fatal(err)
	}
	before, err := localcluster.CaptureMayBeAbsent(ctx, cc, append(keys, deleted))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := mover.Run(ctx, mover.Options{
		Source: mover.Conn{Addr: c.Nodes[0].Addr}, Target: mover.Conn{Addr: c.Nodes[1].Addr},
		Slots: set, Logger: testLogger(t),
	})
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move: %s: %v", sum.Result, err)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second))
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 1)
	// The controls: nothing to report after a good move.
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move: %v", err)
	}
	assertNoOrphans(t, c)

	// The deleted key comes back on the target.
	if err := target.Set(ctx, deleted, "back", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = before.Compare(ctx, target)
	want := fmt.Sprintf(`compare: 1 of %d keys differ: %q: resurrected: expected absent, found a string`, len(keys)+1, deleted)
	if err == nil || err.Error() != want {
		t.Errorf("a deleted key back on the target: %v\nwant %s", err, want)
	}

	// A key of a moved slot on the source, which no longer serves it
	// (written the way a move writes to a slot it imports).
	orphan := tag + ":orphan"
	slot := slots.ForString(orphan)
	if err := source.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.IDs[1]).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := source.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		p.Set(ctx, orphan, "left behind", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := source.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
		t.Fatal(err)
	}
	orphans, err := c.Orphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOrphan := fmt.Sprintf("%s holds 1 keys of slot %d (served by %s in its view), e.g. [%q]", c.Nodes[0].Addr, slot, c.Nodes[1].Addr, orphan)
	if len(orphans) != 1 || orphans[0] != wantOrphan {
		t.Errorf("orphans: %q\nwant [%s]", orphans, wantOrphan)
	}
}
