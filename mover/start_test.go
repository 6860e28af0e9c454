package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// A move cancelled in its snapshot, once the source was tuned for the
// sync, rolls back: it ends cancelled, the target holds nothing of the
// slots and has no marks, the source owns them and has its settings back.
// A cancel once the source released the slots changes nothing: the move
// ends moved.
func TestMoveCancel(t *testing.T) {
	for _, c := range []struct {
		at      Phase // "" for as soon as the source is seen tuned
		wantErr error
		result  string
	}{
		{"", nil, ResultCancelled},
		{PhaseCleanup, ErrTooLate, ResultMoved},
	} {
		name := string(c.at)
		if name == "" {
			name = "tuned"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl, source, target, set := settingsTestCluster(t)
			w := watchSyncSettings(t, cl.Nodes[0].Addr)
			var mv *Move
			var phase atomic.Value
			cancelErr := make(chan error, 1)
			opts := Options{
				Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: cl.Nodes[2].Addr}, Slots: set, Snapshot: SnapshotRDB,
				Progress: func(p Progress) {
					phase.Store(p.Phase)
					if c.at != "" && p.Phase == c.at && len(cancelErr) == 0 {
						cancelErr <- mv.Cancel()
					}
				},
			}
			mv = Start(ctx, opts)
			if c.at == "" {
				select {
				case <-w.tuned:
					if got := phase.Load(); got != PhaseSnapshot {
						t.Errorf("the source was seen tuned in phase %v, not %s", got, PhaseSnapshot)
					}
					cancelErr <- mv.Cancel()
				case <-mv.Done():
				}
			}
			sum, err := mv.Wait()
			seen := w.stop()
			select {
			case cerr := <-cancelErr:
				if !errors.Is(cerr, c.wantErr) {
					t.Fatalf("Cancel in %s: %v, want %v", name, cerr, c.wantErr)
				}
			default:
				t.Fatalf("the move ended %s before the cancel (%s: %v); settings seen on the source: %v", sum.Result, sum.Phase, err, seen)
			}
			if sum.Result != c.result {
				t.Fatalf("cancel in %s: result %s (%v), want %s", name, sum.Result, err, c.result)
			}
			assertTunedThenRestored(t, ctx, source, seen)
			owner := cl.IDs[0]
			if c.result == ResultMoved {
				owner = cl.IDs[2]
			}
			if err := cl.WaitOwner(ctx, set, owner, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if c.result == ResultCancelled {
				assertTargetClean(t, ctx, target, set)
			}
		})
	}
}

// The source's settings tuned for the sync (repl-diskless-sync-delay 0,
// rdbcompression no) are seen on it during the move and are back as they
// were however the move ends: rolled back after its cutover attempts ran
// out, or failed on a target that refuses writes. KeepSourceConfig leaves
// them alone throughout.
func TestMoveRestoresTheSourcesSettings(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   func(*Options)
		onTune func(t *testing.T, cl *localcluster.Cluster) // when the source is seen tuned
		errHas string
	}{
		{"rollback", func(o *Options) {
			// Every fence runs out: the target never gets there.
			o.FenceTimeout, o.MaxAttempts = 20*time.Millisecond, 2
			o.Hooks.Fence = func(cutover.Fence) cutover.Fence {
				return func(ctx context.Context, _ int64) error { <-ctx.Done(); return ctx.Err() }
			}
		}, nil, "cutover failed 2 times"},
		{"failure", nil, func(t *testing.T, cl *localcluster.Cluster) {
			// The target refuses writes (OOM) from now on.
			c := cl.Nodes[2].Client()
			defer c.Close()
			if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
				t.Error(err)
			}
		}, "commands failed or were refused on the target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl, source, target, set := settingsTestCluster(t)
			w := watchSyncSettings(t, cl.Nodes[0].Addr)
			opts := Options{Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: cl.Nodes[2].Addr}, Slots: set, Snapshot: SnapshotRDB}
			if c.opts != nil {
				c.opts(&opts)
			}
			mv := Start(ctx, opts)
			if c.onTune != nil {
				select {
				case <-w.tuned:
					c.onTune(t, cl)
				case <-mv.Done():
				}
			}
			sum, err := mv.Wait()
			seen := w.stop()
			if sum.Result != ResultRolledBack || err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Fatalf("move: %s in %s, %v; want %s with %q", sum.Result, sum.Phase, err, ResultRolledBack, c.errHas)
			}
			assertTunedThenRestored(t, ctx, source, seen)
			if err := cl.WaitOwner(ctx, set, cl.IDs[0], 10*time.Second); err != nil {
				t.Fatal(err)
			}
			assertTargetClean(t, ctx, target, set)
		})
	}
	t.Run("keep-source-config", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cl, source, _, set := settingsTestCluster(t)
		// Not the default, so that "untouched" is not "set back to the
		// default"; and 1 s, not 5 s, of wait before the sync.
		if err := source.ConfigSet(ctx, "repl-diskless-sync-delay", "1").Err(); err != nil {
			t.Fatal(err)
		}
		w := watchSyncSettings(t, cl.Nodes[0].Addr)
		var inSnapshot atomic.Bool
		w.during = &inSnapshot
		sum, err := Run(ctx, Options{Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: cl.Nodes[2].Addr}, Slots: set, Snapshot: SnapshotRDB, KeepSourceConfig: true,
			Progress: func(p Progress) { inSnapshot.Store(p.Phase == PhaseSnapshot) }})
		seen := w.stop()
		if err != nil || sum.Result != ResultMoved {
			t.Fatalf("move with KeepSourceConfig: %s, %v", sum.Result, err)
		}
		if len(seen) != 1 || seen["1/yes"] == 0 || w.samplesDuring.Load() < 20 {
			t.Fatalf("settings seen on the source (repl-diskless-sync-delay/rdbcompression: samples) %v, %d samples in the snapshot; want only 1/yes, in 20 or more", seen, w.samplesDuring.Load())
		}
	})
}

// settingsTestCluster is a source owning 0-8191 with 2000 keys in slots
// 0-99, another master and an empty target. The source's RDB takes about
// half a second to write (rdb-key-save-delay), time to see its settings
// during the snapshot.
func settingsTestCluster(t *testing.T) (cl *localcluster.Cluster, source, target *redis.Client, set *slots.Set) {
	t.Helper()
	ctx := context.Background()
	cl = harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	source, target = cl.Nodes[0].Client(), cl.Nodes[2].Client()
	t.Cleanup(func() { source.Close(); target.Close() })
	set = slots.NewSet(slots.Range{Start: 0, End: 99})
	if _, err := source.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 2000 {
			p.Set(ctx, fmt.Sprintf("{%s}:k%d", slotTags()[i%100], i), i, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := source.ConfigSet(ctx, "rdb-key-save-delay", "250").Err(); err != nil { // µs per key
		t.Fatal(err)
	}
	return cl, source, target, set
}

// syncSettingsWatch polls the source's repl-diskless-sync-delay and
// rdbcompression every few milliseconds, counting each pair of values seen.
type syncSettingsWatch struct {
	tuned         chan struct{} // closed when 0/no is first seen
	during        *atomic.Bool  // if set, samples taken while it holds are counted
	samplesDuring atomic.Int64
	done          chan struct{}
	result        chan map[string]int
}

func watchSyncSettings(t *testing.T, addr string) *syncSettingsWatch {
	w := &syncSettingsWatch{tuned: make(chan struct{}), done: make(chan struct{}), result: make(chan map[string]int, 1)}
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	go func() {
		defer c.Close()
		seen := map[string]int{}
		defer func() { w.result <- seen }()
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			delay, derr := c.ConfigGet(ctx, "repl-diskless-sync-delay").Result()
			comp, cerr := c.ConfigGet(ctx, "rdbcompression").Result()
			cancel()
			if derr != nil || cerr != nil {
				t.Errorf("watching the source's settings: %v", errors.Join(derr, cerr))
				return
			}
			pair := delay["repl-diskless-sync-delay"] + "/" + comp["rdbcompression"]
			if pair == "0/no" && seen[pair] == 0 {
				close(w.tuned)
			}
			seen[pair]++
			if w.during != nil && w.during.Load() {
				w.samplesDuring.Add(1)
			}
		}
	}()
	return w
}

// stop ends the watch and returns what it saw.
func (w *syncSettingsWatch) stop() map[string]int {
	close(w.done)
	return <-w.result
}

// assertTunedThenRestored fails unless the watch saw the source tuned for
// the sync (0/no) and its settings are now as they were (5/yes).
func assertTunedThenRestored(t *testing.T, ctx context.Context, source *redis.Client, seen map[string]int) {
	t.Helper()
	if seen["0/no"] == 0 {
		t.Errorf("the source was never seen tuned for the sync (repl-diskless-sync-delay/rdbcompression: samples): %v", seen)
	}
	for name, want := range map[string]string{"repl-diskless-sync-delay": "5", "rdbcompression": "yes"} {
		if got := source.ConfigGet(ctx, name).Val()[name]; got != want {
			t.Errorf("the source's %s is %q after the move, was %q", name, got, want)
		}
	}
}

// assertTargetClean fails unless the target holds no key of set and no
// importing mark.
func assertTargetClean(t *testing.T, ctx context.Context, target *redis.Client, set *slots.Set) {
	t.Helper()
	counts, err := cluster.CountKeys(ctx, target, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range counts {
		if n != 0 {
			t.Fatalf("the move left %d keys of slot %d on the target", n, i)
		}
	}
	top, err := cluster.Load(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Myself.Importing) != 0 {
		t.Fatalf("the move left %d importing marks on the target", len(top.Myself.Importing))
	}
}

// A node that does not run in cluster mode is refused before anything is
// changed, with that said.
func TestMoveRefusesANodeOutOfClusterMode(t *testing.T) {
	cl := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{})
	plain := harness.ServerT(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: plain.Addr}, Slots: slots.NewSet(slots.Range{Start: 0, End: 9})})
	var refused *InputError
	if !errors.As(err, &refused) || sum.Result != ResultRefused || !strings.Contains(err.Error(), "target "+plain.Addr+" is not in cluster mode") {
		t.Fatalf("move to a standalone server: %s, %v", sum.Result, err)
	}
}

// A target whose own view of the cluster is failed (here a slot it sees
// unassigned; a node added moments ago is another) would answer CLUSTERDOWN
// to the move's commands: it is refused before anything is changed.
func TestMoveRefusesATargetWithClusterDown(t *testing.T) {
	cl := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	target := cl.Nodes[2].Client()
	defer target.Close()
	if err := target.Do(ctx, "CLUSTER", "DELSLOTS", 9000).Err(); err != nil {
		t.Fatal(err)
	}
	for target.ClusterInfo(ctx).Val() == "" || strings.Contains(target.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if ctx.Err() != nil {
			t.Fatal("the target's cluster_state stayed ok with a slot unassigned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	set := slots.NewSet(slots.Range{Start: 0, End: 9})
	sum, err := Run(ctx, Options{Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: cl.Nodes[2].Addr}, Slots: set})
	var refused *InputError
	if !errors.As(err, &refused) || sum.Result != ResultRefused || !strings.Contains(err.Error(), "target "+cl.Nodes[2].Addr+" reports cluster_state:fail") {
		t.Fatalf("move to a target with cluster_state:fail: %s, %v", sum.Result, err)
	}
	top, err := cluster.Load(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Myself.Importing) != 0 {
		t.Fatalf("the refused move left importing marks on the target: %v", top.Myself.Importing)
	}
}
