package tests

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// A user that may not run a command the move needs, or a wrong password,
// is refused before anything changes (exit 2), with the command named: not
// found half-way, with marks and copies to undo.
func TestMissingPermissionsAreRefusedFirst(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 5*time.Minute)
	load(t, cc, 5_000, mustSlots(t, "0-5460"))
	setUser := func(rules ...string) bool {
		t.Helper()
		for _, n := range c.Nodes {
			cl := n.Client()
			args := []any{"ACL", "SETUSER", "mover", "reset", "on", ">pw", "allkeys", "allcommands"}
			for _, r := range rules {
				args = append(args, r)
			}
			err := cl.Do(ctx, args...).Err()
			cl.Close()
			if err != nil {
				t.Logf("this server takes no ACL rule %v: %v", rules, err)
				return false
			}
		}
		return true
	}
	before := fingerprint(t, ctx, c)
	move := func(password string) (int, string) {
		code, _, stderr := runCLI(t, "move", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", "0-5460",
			"--user", "mover", "--password", password)
		return code, stderr
	}
	for _, deny := range []string{"-multi", "-evalsha", "-client", "-cluster|setslot", "-client|pause", "-restore-asking", "-replconf", "-psync"} {
		if !setUser(deny) {
			continue
		}
		if deny == "-psync" && !hasDryRun(t, c) {
			t.Log("no ACL DRYRUN here: PSYNC cannot be checked before the move")
			continue
		}
		code, stderr := move("pw")
		// CLIENT as a whole is refused when the move names its connections.
		named := strings.Contains(stderr, "may not run") || strings.Contains(stderr, "NOPERM")
		if code != 2 || !named || !strings.Contains(stderr, strings.TrimPrefix(deny, "-")) {
			t.Fatalf("user without %s: exit %d, %s", deny, code, stderr)
		}
		assertUnchanged(t, c, before)
	}
	setUser()
	if code, stderr := move("wrong"); code != 2 || !strings.Contains(stderr, "WRONGPASS") {
		t.Fatalf("wrong password: exit %d, %s", code, stderr)
	}
	assertUnchanged(t, c, before)
	// The control: the same user with every permission moves; where the
	// server has ACL DRYRUN (7.0+), without adding one error to the
	// operator's statistics.
	errsBefore, err := c.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, stderr := move("pw"); code != 0 {
		t.Fatalf("user with every permission: exit %d, %s", code, stderr)
	}
	if hasDryRun(t, c) {
		errsAfter, err := c.ErrorStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(errsAfter) != fmt.Sprint(errsBefore) {
			t.Fatalf("the move added errors to the servers' statistics: %v, then %v", errsBefore, errsAfter)
		}
	}
	// And back, by a user who may not run ACL (so the commands are probed,
	// as on 6.2, which has no ACL DRYRUN): the probes leave every other
	// client of the nodes alone.
	setUser("-acl")
	bystander := nodeClient(t, c, 0)
	conn := bystander.Conn()
	defer conn.Close()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "move", "--source", c.Nodes[3].Addr, "--target", c.Nodes[0].Addr, "--slots", "0-5460",
		"--user", "mover", "--password", "pw")
	if code != 0 {
		t.Fatalf("move back by a user without ACL: exit %d, %s", code, stderr)
	}
	if again, err := conn.ClientID(ctx).Result(); err != nil || again != id {
		t.Fatalf("a client of the target did not survive the move's probes: %v (id %d, then %d)", err, id, again)
	}
}

// A move against servers with requirepass. The cluster's
// nodes (source, target and the other master, which the move tells of the
// new owner) all require a password. Without it the move is refused (exit
// 2, NOAUTH) before anything changes; with --password it moves, and back
// with $SLOTMOVER_PASSWORD instead of the flag. Every moved key is asserted
// on the new owner (type, value digest, TTL, stream groups), and every
// node's own view names the new owner with no mark left.
func TestAuthRequirepass(t *testing.T) {
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
	before := capture(t, ctx, authed, keys)
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

// A move as an ACL user that has only the commands a move
// needs (moverACL) on every node. Taking away any one of them makes the
// move refused (exit 2) before anything changes, with an error that names
// the command; with all of them the user moves every key of every type
// (big keys replayed as commands included), and every node's view names
// the target.
func TestAuthACLUser(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 2*time.Minute)
	set := mustSlots(t, "100-2100")
	cc := clusterClient(t, c)
	keys := fillMoved(t, ctx, cc, set, 2)
	big, err := localcluster.FillEveryType(ctx, cc, tagIn(set, 9), localcluster.FillOptions{Small: 1, BigElements: 9000, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, big...)
	if _, err := localcluster.FillEveryType(ctx, cc, tagIn(mustSlots(t, "3000-5460"), 1), localcluster.FillOptions{Small: 1}); err != nil {
		t.Fatal(err)
	}
	before := capture(t, ctx, cc, keys)
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
	fingerprint := fingerprint(t, ctx, c)
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
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	target := nodeClient(t, c, 3)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move as an ACL user, on the target: %v", err)
	}
	if orphans, err := c.Orphans(ctx); err != nil || len(orphans) > 0 {
		t.Fatalf("keys left behind (%v): %v", err, orphans)
	}
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
	must(t, c.WaitOwnerVia(ctx, set, owner, 10*time.Second, func(s *localcluster.Server) *redis.Client { return authNodeClient(s, user, pw) }))
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

// A move over TLS only: the replica link, the applier and the control
// connections all speak TLS with the cluster's certificate.
func TestMoveOverTLS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{TLS: true})
	ctx := testContext(t, 2*time.Minute)
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-8000")
	keys := load(t, cc, 5000, set)
	before := capture(t, ctx, cc, keysIn(keys, set))
	conn := func(s *localcluster.Server) mover.Conn {
		return mover.Conn{Addr: s.Addr, TLS: s.TLS}
	}
	sum, err := mover.Run(ctx, mover.Options{Source: conn(c.Nodes[0]), Target: conn(c.Nodes[1]), Slots: set, Logger: testLogger(t)})
	if err != nil || sum.Result != mover.ResultMoved {
		t.Fatalf("move over TLS: %s: %v", sum.Result, err)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second))
	target := nodeClient(t, c, 1)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatal(err)
	}
	// Without TLS the move back is refused before anything changes, for
	// what it is: the source cannot be reached in plain text.
	// On the target itself: cc's slot map may still name the old owner.
	before, err = localcluster.Capture(ctx, target, keysIn(keys, set))
	if err != nil {
		t.Fatal(err)
	}
	fingerprint := fingerprint(t, ctx, c)
	plain := mover.Conn{Addr: c.Nodes[1].Addr}
	want := "cannot reach source " + c.Nodes[1].Addr
	sum, err = mover.Run(ctx, mover.Options{Source: plain, Target: conn(c.Nodes[0]), Slots: set, Logger: testLogger(t)})
	var refusal *mover.InputError
	if sum.Result != mover.ResultRefused || !errors.As(err, &refusal) || !strings.Contains(err.Error(), want) {
		t.Fatalf("plain-text move in a TLS cluster: %s: %v; want refused with %q", sum.Result, err, want)
	}
	// And by the command: exit 2 with the reason.
	code, stdout, stderr := runCLI(t, "move", "--json", "--source", c.Nodes[1].Addr, "--target", c.Nodes[0].Addr, "--slots", "0-8000")
	if code != 2 || !strings.Contains(stdout, `"result":"refused"`) || !strings.Contains(stderr, want) {
		t.Fatalf("slotmover move without --tls: exit %d, want 2 with %q; stdout %s; stderr %s", code, want, stdout, stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(stderr))
	if after, err := c.Fingerprint(ctx); err != nil || after != fingerprint {
		t.Fatalf("the refused moves changed the cluster (%v):\nbefore\n%s\nafter\n%s", err, fingerprint, after)
	}
	if err := before.Compare(ctx, target); err != nil {
		t.Fatal(err)
	}
}

// The TLS flags of `slotmover move` that
// TestMoveOverTLS leaves out (it moves through mover.Run and only refuses
// by the command): --tls with --tls-ca-cert moves by the command, --tls
// alone (the system's CAs, which do not know the cluster's certificate)
// is refused before anything changes, naming the certificate, and --tls
// with --tls-insecure moves back. Every key is asserted on its new owner,
// and every node's view names it.
func TestMoveFlagsTLS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{TLS: true})
	ctx := testContext(t, 2*time.Minute)
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-6000")
	keys := fillMoved(t, ctx, cc, set, 2)
	before := capture(t, ctx, cc, keys)
	ca := filepath.Join(c.Nodes[0].Dir, "cert.pem")
	there := []string{"move", "--json", "--tls", "--source", c.Nodes[0].Addr, "--target", c.Nodes[1].Addr, "--slots", set.String()}
	code, stdout, stderr := runCLI(t, append(there, "--tls-ca-cert", ca)...)
	if sum := parseSummary(t, code, stdout, stderr); code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move with --tls --tls-ca-cert: exit %d, result %q, %d keys (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second))
	target := nodeClient(t, c, 1)
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move with --tls-ca-cert, on the target: %v", err)
	}

	back := []string{"move", "--json", "--tls", "--source", c.Nodes[1].Addr, "--target", c.Nodes[0].Addr, "--slots", set.String()}
	fingerprint := fingerprint(t, ctx, c)
	code, stdout, stderr = runCLI(t, back...)
	if code != 2 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("move with --tls and no CA (the system's do not know the cluster's certificate): exit %d, want 2 naming the certificate; stdout %s; stderr %s", code, stdout, stderr)
	}
	assertUnchanged(t, c, fingerprint)

	code, stdout, stderr = runCLI(t, append(back, "--tls-insecure")...)
	if sum := parseSummary(t, code, stdout, stderr); code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move back with --tls --tls-insecure: exit %d, result %q, %d keys (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second))
	source := nodeClient(t, c, 0)
	if err := before.Compare(ctx, source); err != nil {
		t.Fatalf("after the move back with --tls-insecure, on the source: %v", err)
	}
}
