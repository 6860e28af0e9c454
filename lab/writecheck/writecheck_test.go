package writecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/slotmover/slotmover/lab/localcluster"
)

// Read back from a real server, each counter must hold its acknowledged
// increments, and at most those plus the unknown ones: a missing one is
// lost, one more is made up; a counter noted past the first n is checked
// too.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	c, err := localcluster.StartCluster(ctx, t.TempDir(), []string{"0-16383"}, localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cc := c.Client()
	defer cc.Close()
	name := func(i int) string { return fmt.Sprint("wc:", i) }
	tally := NewTally(4, name)
	replyLost := errors.New("i/o timeout")
	for _, tc := range []struct {
		counter        int
		acked, unknown int
		value          int64
	}{
		{0, 3, 0, 3}, // all there
		{1, 2, 0, 1}, // one lost
		{2, 1, 1, 1}, // the unknown one did not land
		{3, 0, 0, 1}, // never sent: made up
		{6, 1, 1, 4}, // past the first n, two made up
	} {
		for range tc.acked {
			tally.Note(tc.counter, nil)
		}
		for range tc.unknown {
			tally.Note(tc.counter, replyLost)
		}
		if err := cc.Set(ctx, name(tc.counter), tc.value, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	v, err := tally.Check(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"wc:1 = 1, acknowledged 2 (+0 unknown)", "wc:3 = 1, acknowledged 0 (+0 unknown)", "wc:6 = 4, acknowledged 1 (+1 unknown)"}
	if v.Acked != 7 || v.Lost != 1 || v.Extra != 3 || !slices.Equal(v.Wrong, want) {
		t.Fatalf("verdict %+v, want 7 acknowledged, 1 lost, 3 made up in %q", v, want)
	}
}
