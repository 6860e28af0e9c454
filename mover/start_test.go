package mover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// A move cancelled as its snapshot begins rolls back: it ends cancelled,
// the target holds nothing of the slots and has no marks, the source owns
// them. A cancel once the source released the slots changes nothing: the
// move ends moved.
func TestMoveCancel(t *testing.T) {
	for _, c := range []struct {
		at      Phase
		wantErr error
		result  string
	}{
		{PhaseSnapshot, nil, ResultCancelled},
		{PhaseCleanup, ErrTooLate, ResultMoved},
	} {
		t.Run(string(c.at), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cl := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
			source, target := cl.Nodes[0].Client(), cl.Nodes[2].Client()
			defer source.Close()
			defer target.Close()
			set := slots.NewSet(slots.Range{Start: 0, End: 99})
			for i := range 2000 {
				if err := source.Set(ctx, fmt.Sprintf("{%s}:k%d", slotTags()[i%100], i), i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var mv *Move
			cancelErr := make(chan error, 1)
			opts := Options{
				Source: Conn{Addr: cl.Nodes[0].Addr}, Target: Conn{Addr: cl.Nodes[2].Addr}, Slots: set,
				Progress: func(p Progress) {
					if p.Phase == c.at && len(cancelErr) == 0 {
						cancelErr <- mv.Cancel()
					}
				},
			}
			mv = Start(ctx, opts)
			sum, err := mv.Wait()
			select {
			case cerr := <-cancelErr:
				if !errors.Is(cerr, c.wantErr) {
					t.Fatalf("Cancel in %s: %v, want %v", c.at, cerr, c.wantErr)
				}
			default:
				t.Fatalf("the move never reported phase %s (ended %s: %v)", c.at, sum.Result, err)
			}
			if sum.Result != c.result {
				t.Fatalf("cancel in %s: result %s (%v), want %s", c.at, sum.Result, err, c.result)
			}
			// The source's settings tuned for the sync are as they were,
			// however the move ended.
			for name, want := range map[string]string{"repl-diskless-sync-delay": "5", "rdbcompression": "yes"} {
				if got := source.ConfigGet(ctx, name).Val()[name]; got != want {
					t.Fatalf("the source's %s is %q after the move (%s), was %q", name, got, c.result, want)
				}
			}
			owner := cl.IDs[0]
			if c.result == ResultMoved {
				owner = cl.IDs[2]
			}
			if err := cl.WaitOwner(ctx, set, owner, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if c.result == ResultCancelled {
				counts, err := cluster.CountKeys(ctx, target, set.Slots())
				if err != nil {
					t.Fatal(err)
				}
				for i, n := range counts {
					if n != 0 {
						t.Fatalf("the cancelled move left %d keys of slot %d on the target", n, i)
					}
				}
				top, err := cluster.Load(ctx, target)
				if err != nil {
					t.Fatal(err)
				}
				if len(top.Myself.Importing) != 0 {
					t.Fatalf("the cancelled move left %d importing marks on the target", len(top.Myself.Importing))
				}
			}
		})
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
