package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// Issue 10, item 5: a move against servers with requirepass. The cluster's
// nodes (source, target and the other master, which the move tells of the
// new owner) all require a password. Without it the move is refused (exit
// 2, NOAUTH) before anything changes; with --password it moves, and back
// with $SLOTMOVER_PASSWORD instead of the flag. Every moved key is asserted
// on the new owner (type, value digest, TTL, stream groups), and every
// node's own view names the new owner with no mark left.
func TestClaimsAuthRequirepass(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-8191", "8192-16383", ""}, localcluster.Options{})
	ctx := testContext(t, 2*time.Minute)
	set := mustSlots(t, "0-3000")
	cc := c.Client()
	keys := fillMoved(t, ctx, cc, set, 3)
	// Keys outside the slots: the source keeps them (paced cleanup, not FLUSHDB).
	outside, err := localcluster.FillEveryType(ctx, cc, tagIn(mustSlots(t, "5000-8191"), 1), localcluster.FillOptions{Small: 1})
	if err != nil {
		t.Fatal(err)
	}
	cc.Close()
	const pw = "s3cret-pw"
	for _, n := range c.Nodes {
		cl := n.Client()
		err := cl.ConfigSet(ctx, "requirepass", pw).Err()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	// From here on every client of the test needs the password.
	authed := authClusterClient(c, "", pw)
	defer authed.Close()
	before, err := localcluster.Capture(ctx, authed, keys)
	if err != nil {
		t.Fatal(err)
	}
	src, tgt := c.Nodes[0], c.Nodes[2]
	args := []string{"move", "--json", "--source", src.Addr, "--target", tgt.Addr, "--slots", set.String()}

	// The control: without the password, refused first.
	code, stdout, stderr := runCLIEnv(t, []string{"SLOTMOVER_PASSWORD="}, args...)
	if code != 2 || !strings.Contains(stderr, "NOAUTH") {
		t.Fatalf("move without a password on requirepass servers: exit %d, want 2 with NOAUTH; stdout %s; stderr %s", code, stdout, stderr)
	}
	assertOwnerWith(t, ctx, c, "", pw, set, c.IDs[0])
	if n := keysOnNode(t, ctx, tgt, "", pw, set); n != 0 {
		t.Fatalf("the refused move left %d keys of slots %s on the target", n, set)
	}

	// With --password: moved, every key on the target, the target the owner everywhere.
	code, stdout, stderr = runCLIEnv(t, []string{"SLOTMOVER_PASSWORD="}, append(args, "--password", pw)...)
	sum := parseSummary(t, code, stdout, stderr)
	if code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move with --password: exit %d, result %q, %d keys copied (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	assertOwnerWith(t, ctx, c, "", pw, set, c.IDs[2])
	tc := authNodeClient(tgt, "", pw)
	defer tc.Close()
	if err := before.Compare(ctx, tc); err != nil {
		t.Fatalf("after the move with --password, on the target: %v", err)
	}
	if n := keysOnNode(t, ctx, src, "", pw, set); n != 0 {
		t.Fatalf("the source still holds %d keys of the moved slots", n)
	}
	if sum.OrphansRemoved != int64(len(keys)) {
		t.Fatalf("orphans_removed %d, want %d", sum.OrphansRemoved, len(keys))
	}

	// And back with $SLOTMOVER_PASSWORD, no flag.
	back := []string{"move", "--json", "--source", tgt.Addr, "--target", src.Addr, "--slots", set.String()}
	code, stdout, stderr = runCLIEnv(t, []string{"SLOTMOVER_PASSWORD=" + pw}, back...)
	sum = parseSummary(t, code, stdout, stderr)
	if code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move back with $SLOTMOVER_PASSWORD: exit %d, result %q, %d keys copied (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	assertOwnerWith(t, ctx, c, "", pw, set, c.IDs[0])
	sc := authNodeClient(src, "", pw)
	defer sc.Close()
	if err := before.Compare(ctx, sc); err != nil {
		t.Fatalf("after the move back with $SLOTMOVER_PASSWORD, on the source: %v", err)
	}
	if err := localcluster.CompareKeys(ctx, sc, authed, outside); err != nil {
		t.Fatal(err)
	}
	if n := keysOnNode(t, ctx, tgt, "", pw, set); n != 0 {
		t.Fatalf("the target still holds %d keys of the slots moved back", n)
	}
}

// moverACL is what an ACL user needs for a move, and nothing more: every
// command the move runs, as mover/permissions.go probes them (source,
// target and other masters), plus PSYNC (only ACL DRYRUN checks it), EXEC
// and what go-redis sends on connecting (HELLO, AUTH; CLIENT is granted
// whole: SETNAME, PAUSE, UNPAUSE, REPLY, KILL, LIST, ID).
var moverACL = []string{
	"hello", "auth", "ping", "client",
	"cluster", "info", "role", "dbsize", "flushdb", "command", "time", "config|get", "config|set",
	"replconf", "psync",
	"eval", "evalsha", "script",
	"multi", "exec", "discard",
	"asking", "set", "del", "unlink", "rename", "pexpireat", "dump", "pttl", "restore", "restore-asking",
	"rpush", "sadd", "hset", "zadd", "xadd", "xsetid", "xgroup", "xclaim", "function|list",
}

// moverACLFor is moverACL less what the server lacks: FUNCTION came in
// 7.0 (Redis 6.2 refuses an ACL rule naming an unknown command, and the
// move lists no functions there).
func moverACLFor(t *testing.T) []string {
	t.Helper()
	v, err := localcluster.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.AtLeast(7, 0) {
		return moverACL
	}
	return slices.DeleteFunc(slices.Clone(moverACL), func(cmd string) bool { return strings.HasPrefix(cmd, "function|") })
}

// Issue 10, item 5: a move as an ACL user that has only the commands a move
// needs (moverACL) on every node. Taking away any one of them makes the
// move refused (exit 2) before anything changes, with an error that names
// the command; with all of them the user moves every key of every type
// (big keys replayed as commands included), and every node's view names
// the target.
func TestClaimsAuthACLUser(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	set := mustSlots(t, "100-2100")
	cc := c.Client()
	defer cc.Close()
	keys := fillMoved(t, ctx, cc, set, 2)
	big, err := localcluster.FillEveryType(ctx, cc, tagIn(set, 9), localcluster.FillOptions{Small: 1, BigElements: 9000, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, big...)
	if _, err := localcluster.FillEveryType(ctx, cc, tagIn(mustSlots(t, "3000-5460"), 1), localcluster.FillOptions{Small: 1}); err != nil {
		t.Fatal(err)
	}
	before, err := localcluster.Capture(ctx, cc, keys)
	if err != nil {
		t.Fatal(err)
	}
	acl := moverACLFor(t)
	// setUser grants the user every command of acl but without ("" for
	// none): left out, not taken away with "-", which Redis 6.2 refuses
	// for a subcommand (config|get).
	setUser := func(without string, more ...string) {
		t.Helper()
		for _, n := range c.Nodes {
			cl := n.Client()
			args := []any{"ACL", "SETUSER", "mover", "reset", "on", ">pw", "~*", "&*", "-@all"}
			for _, cmd := range append(slices.Clone(acl), more...) {
				if cmd != without {
					args = append(args, "+"+cmd)
				}
			}
			err := cl.Do(ctx, args...).Err()
			cl.Close()
			if err != nil {
				t.Fatalf("ACL SETUSER on %s: %v", n.Addr, err)
			}
		}
	}
	fingerprint, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"move", "--json", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", set.String(),
		"--user", "mover", "--password", "pw"}
	for _, cmd := range acl {
		if cmd == "hello" || cmd == "auth" {
			continue // go-redis falls back from one to the other
		}
		setUser(cmd)
		code, stdout, stderr := runCLIEnv(t, nil, args...)
		// Preflight's own check says "may not run <cmd>"; a command the
		// move runs before it (PING, CLIENT SETNAME on connecting) is
		// named by the server's NOPERM.
		named := (strings.Contains(stderr, "may not run") || strings.Contains(stderr, "NOPERM")) && strings.Contains(stderr, cmd)
		if code != 2 || !named {
			t.Fatalf("user without %s: exit %d, want 2 (refused) with an error naming %s; stdout %s; stderr %s", cmd, code, cmd, stdout, stderr)
		}
		assertUnchanged(t, c, fingerprint)
	}

	// The keys path's reads need more (the README lists them): forced
	// onto it, a user who may not scan a big hash is refused by name.
	setUser("", slices.DeleteFunc(slices.Clone(keysPathACL), func(c string) bool { return c == "hscan" })...)
	code, stdout, stderr := runCLIEnv(t, nil, append(args, "--snapshot", "keys")...)
	if code != 2 || !strings.Contains(stderr, "hscan") {
		t.Fatalf("keys path, user without hscan: exit %d, want 2 (refused) naming hscan; stdout %s; stderr %s", code, stdout, stderr)
	}
	assertUnchanged(t, c, fingerprint)

	setUser("")
	code, stdout, stderr = runCLIEnv(t, nil, args...)
	sum := parseSummary(t, code, stdout, stderr)
	if code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) || sum.BigKeys == 0 {
		t.Fatalf("user with the move's commands only: exit %d, result %q, %d keys copied (want %d), %d big; stderr %s",
			code, sum.Result, sum.KeysCopied, len(keys), sum.BigKeys, stderr)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	target := c.Nodes[3].Client()
	defer target.Close()
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move as an ACL user, on the target: %v", err)
	}
	if orphans, err := c.Orphans(ctx); err != nil || len(orphans) > 0 {
		t.Fatalf("keys left behind (%v): %v", err, orphans)
	}
}

// fillMoved writes keys of every type and encoding (half of them with a
// TTL) under n hash tags of set, and returns them.
func fillMoved(t *testing.T, ctx context.Context, cc *redis.ClusterClient, set *slots.Set, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; i < n; i++ {
		k, err := localcluster.FillEveryType(ctx, cc, tagIn(set, 100+i), localcluster.FillOptions{Small: 2, TTL: time.Hour, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k...)
	}
	return keys
}

// summary is the part of `slotmover move --json`'s output the tests read.
type summary struct {
	TaskID          string  `json:"task_id"`
	Result          string  `json:"result"`
	KeysCopied      int64   `json:"keys_copied"`
	BigKeys         int64   `json:"big_keys"`
	DeltaCommands   int64   `json:"delta_commands"`
	PauseMS         float64 `json:"pause_ms"`
	CleanupMS       int64   `json:"cleanup_ms"`
	CutoverAttempts int     `json:"cutover_attempts"`
	FenceOffset     int64   `json:"fence_offset"`
	ReleaseOffset   int64   `json:"release_offset"`
	OrphansRemoved  int64   `json:"orphans_removed"`
}

func parseSummary(t *testing.T, code int, stdout, stderr string) summary {
	t.Helper()
	var s summary
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("exit %d, no JSON summary on stdout (%v): %q; stderr %s", code, err, stdout, stderr)
	}
	return s
}

// runCLIEnv is runCLI with extra environment variables.
func runCLIEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binOf(args), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run slotmover: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

var noMaintNotes = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

// authNodeClient is a client of one node as an ACL user ("" for default).
func authNodeClient(s *localcluster.Server, user, pw string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, Username: user, Password: pw, MaxRetries: -1,
		ReadTimeout: 30 * time.Second, DisableIdentity: true, MaintNotificationsConfig: noMaintNotes})
}

// authClusterClient is c.Client() with credentials.
func authClusterClient(c *localcluster.Cluster, user, pw string) *redis.ClusterClient {
	base := c.Client()
	opts := *base.Options()
	base.Close()
	opts.Username, opts.Password = user, pw
	return redis.NewClusterClient(&opts)
}

// assertOwnerWith is Cluster.WaitOwner through clients with credentials:
// every node's own view gives every slot of set to owner, with no mark.
func assertOwnerWith(t *testing.T, ctx context.Context, c *localcluster.Cluster, user, pw string, set *slots.Set, owner string) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		why = ""
		for _, n := range c.Nodes {
			cl := authNodeClient(n, user, pw)
			top, err := cluster.Load(ctx, cl)
			cl.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range set.Slots() {
				o := top.Owner(x)
				_, mig := top.Myself.Migrating[x]
				_, imp := top.Myself.Importing[x]
				if o == nil || o.ID != owner || mig || imp {
					why = fmt.Sprintf("%s: slot %d owner %v migrating %v importing %v", n.Addr, x, o, mig, imp)
					break
				}
			}
			if why != "" {
				break
			}
		}
		if why == "" {
			return
		}
	}
	t.Fatalf("slots %s: owner %s not agreed by every node: %s", set, owner, why)
}

// keysOnNode counts the keys a node holds in the slots of set.
func keysOnNode(t *testing.T, ctx context.Context, s *localcluster.Server, user, pw string, set *slots.Set) int64 {
	t.Helper()
	cl := authNodeClient(s, user, pw)
	defer cl.Close()
	counts, err := cluster.CountKeys(ctx, cl, set.Slots())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, k := range counts {
		n += k
	}
	return n
}
