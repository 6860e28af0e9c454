package tests

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// Issue 29: every command refuses the words it does not take (exit 2, one
// line naming them) before it connects anywhere, where they were once
// ignored: "move --slots 0-10 20-30" moved 0-10 alone and exited 0, "fix
// --dry-run stray" found nothing to repair. The cluster is unchanged after
// each: every node's view of the slots' owners, and every node's keys.
func TestCLIRefusesExtraArguments(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	asked := mustSlots(t, "0-10,20-30")
	keys := append(fillMoved(t, ctx, cc, mustSlots(t, "0-10"), 1), fillMoved(t, ctx, cc, mustSlots(t, "20-30"), 1)...)
	source := c.Nodes[0].Client()
	defer source.Close()
	held, err := localcluster.Capture(ctx, source, keys)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := c.Nodes[0].Addr, c.Nodes[1].Addr
	plan := filepath.Join(t.TempDir(), "plan.json") // never read: the surplus is refused first
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"move, a second slot range", []string{"move", "--source", src, "--target", dst, "--slots", "0-10", "20-30"}, `unexpected argument "20-30": move takes only flags`},
		{"move, words among the flags", []string{"move", "--json", "stray", "--source", src, "--target", dst, "--slots", "0-10"}, `unexpected arguments "stray" "--source"`},
		{"fix", []string{"fix", "--node", src, "--dry-run", "stray"}, `unexpected argument "stray": fix takes only flags`},
		{"plan --rebalance", []string{"plan", "--cluster", src, "--rebalance", "stray"}, `unexpected argument "stray": plan takes words only as the nodes of --add or --drain`},
		{"plan, no mode", []string{"plan", "stray", "--cluster", src}, `unexpected argument "stray"`},
		// The control: after --add a word is a node, which the planner
		// looks up (read-only) and does not find.
		{"plan --add, a node", []string{"plan", "--cluster", src, "--add", dst, "127.0.0.1:1"}, `unknown node "127.0.0.1:1"`},
		{"apply, flags first", []string{"apply", "--dry-run", plan, "stray"}, `unexpected argument "stray": apply takes one plan file`},
		{"apply, file first", []string{"apply", plan, "--dry-run", "stray", "more"}, `unexpected arguments "stray" "more": apply takes one plan file`},
		{"status", []string{"status", "--admin", "127.0.0.1:1", "id1", "stray"}, `unexpected argument "stray": status takes one task ID at most`},
		{"cancel", []string{"cancel", "--admin", "127.0.0.1:1", "id1", "stray"}, `unexpected argument "stray": cancel takes one task ID, or --all`},
		{"cancel --all", []string{"cancel", "--all", "--admin", "127.0.0.1:1", "stray"}, `unexpected argument "stray": cancel takes one task ID, or --all`},
		{"serve", []string{"serve", "--node", src, "--admin", "127.0.0.1:0", "stray"}, `unexpected argument "stray"`},
		// --parallel 0 too: were the surplus not refused first, the demo
		// would still refuse, naming --parallel, instead of starting.
		{"demo", []string{"demo", "--parallel", "0", "stray"}, `unexpected argument "stray": demo takes only flags`},
		{"bench", []string{"bench", "--runs", "0", "stray"}, `unexpected argument "stray": bench takes only flags`},
		{"soak", []string{"soak", "--cluster", src, "--duration", "1s", "stray"}, `unexpected argument "stray": soak takes only flags`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Fatalf("slotmover %s: exit %d, want 2 with one line %q; stdout %q; stderr %q", strings.Join(tc.args, " "), code, tc.want, stdout, stderr)
			}
			assertUnchanged(t, c, before)
		})
	}
	// Slots 0-10 and 20-30 are still the source's in every node's view,
	// with their keys.
	if err := c.WaitOwner(ctx, asked, c.IDs[0], 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := held.Compare(ctx, source); err != nil {
		t.Fatalf("the asked slots' keys on the source: %v", err)
	}
}
