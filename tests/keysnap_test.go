package tests

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
)

// The keys path (no fork, no RDB: the link continues the source's history
// and only the chosen slots' keys are read) moves every key of every type
// exactly, under a writer that loses nothing, and auto takes it for a
// small share of a source with a backlog and the RDB otherwise, saying why.
func TestKeysSnapshot(t *testing.T) {
	c := fourMasters(t)
	cc := c.Client()
	defer cc.Close()
	ctx := testContext(t, 5*time.Minute)
	keys := load(t, cc, 30_000, mustSlots(t, "5461-10922"))
	addReplica(t, c, 0) // the source keeps a backlog, as any master with a replica does
	w := startWriter(t, c, 1_000_000)

	source := c.Nodes[0].Client()
	defer source.Close()
	forks := func() int64 {
		st, err := info.Read(ctx, source, "stats")
		if err != nil {
			t.Fatal(err)
		}
		n, err := st.Int("total_forks")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	keysPath := func(o *mover.Options) { o.Snapshot = mover.SnapshotKeys }
	forksBefore := forks()
	sum := moveAndCheck(t, c, 0, 3, mustSlots(t, "0-54"), keys, keysPath)
	if sum.Snapshot != mover.SnapshotKeys || sum.RDBBytes != 0 {
		t.Fatalf("asked for the keys path, took %q (%s), %d RDB bytes", sum.Snapshot, sum.SnapshotReason, sum.RDBBytes)
	}
	if n := forks(); n != forksBefore {
		t.Fatalf("the source forked %d times during a keys-path move", n-forksBefore)
	}

	sum = moveAndCheck(t, c, 0, 3, mustSlots(t, "55-109"), keys)
	if sum.Snapshot != mover.SnapshotKeys || !strings.Contains(sum.SnapshotReason, "% of the source's keys") {
		t.Fatalf("auto on 1%% of the source's keys took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}
	sum = moveAndCheck(t, c, 0, 3, mustSlots(t, "110-5460"), keys)
	if sum.Snapshot != mover.SnapshotRDB || !strings.Contains(sum.SnapshotReason, "faster below") {
		t.Fatalf("auto on the rest of the shard took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}

	if ops := w.finish(t); ops < 100 {
		t.Fatalf("the writer managed only %d writes", ops)
	}

	// Master 1 holds the big keys and keeps no backlog.
	bigSlot := slots.ForString(tagIn(mustSlots(t, "5461-10922"), 0))
	one := mustSlots(t, fmt.Sprint(bigSlot))
	refused := func(why string) {
		t.Helper()
		before, err := c.Fingerprint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = mover.Run(ctx, mover.Options{Source: mover.Conn{Addr: c.Nodes[1].Addr}, Target: mover.Conn{Addr: c.Nodes[3].Addr},
			Slots: one, Logger: testLogger(t), Snapshot: mover.SnapshotKeys})
		var input *mover.InputError
		if !errors.As(err, &input) || !strings.Contains(err.Error(), why) {
			t.Fatalf("--snapshot keys: %v, want a refusal saying %q", err, why)
		}
		if after, err := c.Fingerprint(ctx); err != nil || after != before {
			t.Fatalf("a refused move changed the cluster (%v):\n%s\n%s", err, before, after)
		}
	}
	refused("no replication backlog")
	addReplica(t, c, 1)
	refused("too big to read in one short call")
	sum = moveAndCheck(t, c, 1, 3, one, keys)
	if sum.Snapshot != mover.SnapshotRDB || !strings.Contains(sum.SnapshotReason, "too big") {
		t.Fatalf("auto with a big key took %q: %s", sum.Snapshot, sum.SnapshotReason)
	}
}
