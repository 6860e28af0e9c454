package tests

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// keysPathACL is what the keys path reads besides moverACL.
var keysPathACL = []string{"type", "strlen", "hlen", "llen", "scard", "zcard", "xlen", "hscan", "sscan", "zscan", "zrange", "persist"}

// The README's ACL line is the one to paste: it grants what the tests
// prove a move needs (moverACL, keysPathACL), and pasted as written, with
// what the README says to add or leave out on this server, a user moves
// every key of every type by the keys path, the one that needs the most.
func TestReadmeACLLine(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^    (ACL SETUSER slotmover on >CHANGE-ME .*)$`).FindStringSubmatch(string(readme))
	if line == nil {
		t.Fatal("the README has no ACL SETUSER line to paste")
	}
	words := strings.Fields(line[1])
	var granted []string
	for _, w := range words[5:] {
		if c, ok := strings.CutPrefix(w, "+"); ok {
			granted = append(granted, c)
		}
	}
	want := append(slices.Clone(moverACL), keysPathACL...)
	slices.Sort(granted)
	slices.Sort(want)
	if !slices.Equal(granted, want) {
		t.Fatalf("the README's ACL line grants %v; the tests prove a move needs %v", granted, want)
	}

	v, err := localcluster.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	args := []any{"ACL", "SETUSER", "slotmover", "on", ">pw"}
	for _, w := range words[5:] {
		if w == "+function|list" && !v.AtLeast(7, 0) {
			continue // the README: leave it out on Redis 6.2
		}
		args = append(args, w)
	}
	if v.Product == "Redis" && v.AtLeast(7, 4) {
		args = append(args, "+hpexpiretime", "+hpexpireat") // the README: add on 7.4 and newer
	}
	t.Run("as written", func(t *testing.T) { moveAsUser(t, args) })
	// A user granted before sorted sets were read in order: they are
	// read by ZSCAN instead.
	t.Run("without zrange", func(t *testing.T) {
		moveAsUser(t, slices.DeleteFunc(slices.Clone(args), func(a any) bool { return a == "+zrange" }))
	})
}

// moveAsUser moves slots 0-99, holding keys of every type and big ones
// read in chunks, by the keys path as a user made by the ACL SETUSER
// args on every node, and checks the target holds them all.
func moveAsUser(t *testing.T, args []any) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	ctx := testContext(t, 2*time.Minute)
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-99")
	keys := fillMoved(t, ctx, cc, set, 2)
	// Big keys of the types the keys path reads in chunks (its scans).
	big, err := localcluster.FillEveryType(ctx, cc, tagIn(set, 9), localcluster.FillOptions{Small: 1, BigElements: 9000, TTL: time.Hour,
		BigTypes: []string{"hash", "set", "zset"}})
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, big...)
	before := capture(t, ctx, cc, keys)
	for _, n := range c.Nodes {
		cl := n.Client()
		err := cl.Do(ctx, args...).Err()
		cl.Close()
		if err != nil {
			t.Fatalf("the README's ACL line on %s: %v", n.Addr, err)
		}
	}
	code, stdout, stderr := runCLI(t, "move", "--json", "--source", c.Nodes[0].Addr, "--target", c.Nodes[1].Addr, "--slots", set.String(),
		"--user", "slotmover", "--password", "pw", "--snapshot", "keys")
	sum := parseSummary(t, code, stdout, stderr)
	if code != 0 || sum.KeysCopied != int64(len(keys)) || sum.BigKeys == 0 {
		t.Fatalf("a move by the keys path as the README's user: exit %d, %d keys copied (want %d), %d big; stderr %s", code, sum.KeysCopied, len(keys), sum.BigKeys, stderr)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second))
	target := nodeClient(t, c, 1)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move as the README's user, on the target: %v", err)
	}
}
