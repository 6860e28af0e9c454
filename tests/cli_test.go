package tests

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/tests/harness"
)

// Every command refuses the words it does not take (exit 2, one
// line naming them) before it connects anywhere, where they were once
// ignored: "move --slots 0-10 20-30" moved 0-10 alone and exited 0, "fix
// --dry-run stray" found nothing to repair. The cluster is unchanged after
// each: every node's view of the slots' owners, and every node's keys.
func TestCLIRefusesExtraArguments(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	ctx := testContext(t, 2*time.Minute)
	cc := clusterClient(t, c)
	asked := mustSlots(t, "0-10,20-30")
	keys := append(fillMoved(t, ctx, cc, mustSlots(t, "0-10"), 1), fillMoved(t, ctx, cc, mustSlots(t, "20-30"), 1)...)
	source := nodeClient(t, c, 0)
	held := capture(t, ctx, source, keys)
	before := fingerprint(t, ctx, c)
	src, dst := c.Nodes[0].Addr, c.Nodes[1].Addr
	plan := filepath.Join(t.TempDir(), "plan.json") // never read: the surplus is refused first
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"move, a second slot range", []string{"move", "--source", src, "--target", dst, "--slots", "0-10", "20-30"}, `unexpected argument "20-30": move takes only flags`},
		{"move, words among the flags", []string{"move", "--json", "stray", "--source", src, "--target", dst, "--slots", "0-10"}, `unexpected argument "stray": move takes only flags`},
		{"fix", []string{"fix", "--cluster", src, "--dry-run", "stray"}, `unexpected argument "stray": fix takes only flags`},
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
		{"bench, no method for the fleet", []string{"bench", "--workloads", "fleet", "--methods", "reshard10"}, `no method given runs on the fleet workload`},
		{"bench, a fleet of none", []string{"bench", "--workloads", "fleet", "--fleet-masters", "0"}, `the fleet's masters and new masters must be 1 … 64 each, not 0 and 3`},
		{"soak", []string{"soak", "--cluster", src, "--duration", "1s", "stray"}, `unexpected argument "stray": soak takes only flags`},
		{"version", []string{"version", "stray"}, `unexpected argument "stray": version takes no argument`},
		{"ls", []string{"ls", "--nats", "nats://127.0.0.1:1", "stray"}, `unexpected argument "stray": ls takes only flags`},
		{"pause", []string{"pause", "--admin", "127.0.0.1:1", "id1", "stray"}, `unexpected argument "stray": pause takes one task ID, or --all`},
		{"resume", []string{"resume", "--all", "stray", "--admin", "127.0.0.1:1"}, `unexpected argument "stray": resume takes one task ID, or --all`},
		{"hold-cutover", []string{"hold-cutover", "id1", "stray"}, `unexpected argument "stray": hold-cutover takes one task ID, or --all`},
		{"release-cutover", []string{"release-cutover", "id1", "id2"}, `unexpected argument "id2": release-cutover takes one task ID, or --all`},
		{"budget", []string{"budget", "off", "--all", "--admin", "127.0.0.1:1", "stray"}, `unexpected argument "stray": budget takes a budget`},
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
	must(t, c.WaitOwner(ctx, asked, c.IDs[0], 5*time.Second))
	if err := held.Compare(ctx, source); err != nil {
		t.Fatalf("the asked slots' keys on the source: %v", err)
	}
}

// Every command prints its help on stdout and exits 0 for -h
// and --help, with what its exit codes mean; a bad flag value or an
// unknown flag is one line on stderr naming it, exit 2, before anything is
// reached (the addresses given are closed ports: a command that went on
// would fail otherwise, exit 1, with more to say).
func TestCLIHelpAndBadFlags(t *testing.T) {
	closed := "127.0.0.1:1"
	for _, tc := range []struct {
		cmd  string
		args []string // besides the bad flag, what the command needs to start
		bad  []string
	}{
		{"move", []string{"--source", closed, "--target", closed, "--slots", "0"}, []string{"--window", "x"}},
		{"plan", []string{"--cluster", closed, "--rebalance"}, []string{"--max-moves", "x"}},
		{"apply", []string{"plan.json"}, []string{"--parallel", "x"}},
		{"fix", []string{"--cluster", closed}, []string{"--cleanup-batch", "x"}},
		{"serve", []string{"--node", closed}, []string{"--tls=x"}},
		{"status", []string{"--admin", closed}, []string{"--json=x"}},
		{"cancel", []string{"--admin", closed, "t1"}, []string{"--all=x"}},
		{"pause", []string{"--admin", closed, "t1"}, []string{"--all=x"}},
		{"resume", []string{"--admin", closed, "t1"}, []string{"--all=x"}},
		{"hold-cutover", []string{"--admin", closed, "t1"}, []string{"--all=x"}},
		{"release-cutover", []string{"--admin", closed, "t1"}, []string{"--all=x"}},
		{"budget", []string{"off", "--admin", closed, "t1"}, []string{"--all=x"}},
		{"ls", []string{"--nats", "nats://" + closed}, []string{"--wait", "x"}},
		{"demo", nil, []string{"--keys", "x"}},
		{"bench", nil, []string{"--runs", "x"}},
		{"soak", []string{"--cluster", closed, "--duration", "1s"}, []string{"--rate", "x"}},
		{"version", nil, []string{"--bogus"}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			prog := filepath.Base(binOf([]string{tc.cmd}))
			for _, help := range []string{"-h", "--help"} {
				code, stdout, stderr := runCLI(t, tc.cmd, help)
				first, _, _ := strings.Cut(stdout, "\n")
				if code != 0 || stderr != "" || !strings.HasPrefix(first, "usage: "+prog+" ") || !strings.Contains(first, tc.cmd) ||
					!strings.Contains(stdout, "\nexit codes:\n  0  ") {
					t.Fatalf("%s %s %s: exit %d, want 0 with the help and exit codes on stdout\nstdout %s\nstderr %s", prog, tc.cmd, help, code, stdout, stderr)
				}
			}
			for _, bad := range [][]string{tc.bad, {"--bogus"}} {
				args := append(append([]string{tc.cmd}, tc.args...), bad...)
				code, stdout, stderr := runCLI(t, args...)
				want := "unknown flag: --bogus"
				if bad[0] != "--bogus" {
					want = "invalid argument"
				}
				if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, prog+" "+tc.cmd+": ") || !strings.Contains(stderr, want) {
					t.Fatalf("%s %s: exit %d, want 2 with one line %q\nstdout %s\nstderr %s", prog, strings.Join(args, " "), code, want, stdout, stderr)
				}
			}
		})
	}
	// The production binary lists its verbs and not the lab's, which
	// the lab binary lists.
	code, stdout, stderr := runCLI(t, "--help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "hold-cutover") || strings.Contains(stdout, "slotmover bench") {
		t.Fatalf("slotmover --help: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if out, err := exec.Command(labBin, "--help").Output(); err != nil || !strings.Contains(string(out), "slotmover-lab bench") ||
		strings.Contains(string(out), "slotmover-lab move") {
		t.Fatalf("slotmover-lab --help: %v\n%s", err, out)
	}
	if code, stdout, _ := runCLI(t, "help", "fix"); code != 0 || !strings.HasPrefix(stdout, "usage: slotmover fix") {
		t.Fatalf("slotmover help fix: exit %d\nstdout %s", code, stdout)
	}
	if code, _, stderr := runCLI(t, "mvoe"); code != 2 || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("slotmover mvoe: exit %d, stderr %q", code, stderr)
	}
}

// No password appears in any help, error or log line.
// The environment's passwords and a password file's are given to every
// command, which prints its help, meets a bogus flag, a bad flag value,
// an unreachable address, and a server that refuses the password; no
// secret may appear in its output. Each case also shows it did what it
// is named for.
func TestCLIKeepsSecretsOut(t *testing.T) {
	secret := func(what string) string {
		b := make([]byte, 12)
		rand.Read(b)
		return what + "-" + hex.EncodeToString(b)
	}
	envSecret, adminSecret, nodeSecret, fileSecret, right := secret("env"), secret("admin"), secret("node"), secret("file"), secret("right")
	secrets := []string{envSecret, adminSecret, nodeSecret, fileSecret, right}
	env := []string{"SLOTMOVER_PASSWORD=" + envSecret, "SLOTMOVER_ADMIN_PASSWORD=" + adminSecret, "SLOTMOVER_NODE_PASSWORD=" + nodeSecret}
	s := harness.ServerT(t, localcluster.Options{Cluster: true, Config: []string{"requirepass " + right}})
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	wrongFile := write("wrong", fileSecret+"\n")
	rightFile := write("right", right+"\nnot the password\n")
	emptyFile := write("empty", "\n")
	const anyExit, notZero = -2, -1
	type run struct {
		args []string
		code int    // or anyExit, or notZero
		want string // in stdout or stderr
	}
	var runs []run
	for _, cmd := range []struct {
		name, help string
		bad        []string // a flag with a bad value
	}{
		{"move", "$SLOTMOVER_PASSWORD)", []string{"--window", "x"}},
		{"fix", "$SLOTMOVER_PASSWORD)", []string{"--cleanup-batch", "x"}},
		{"plan", "$SLOTMOVER_PASSWORD)", []string{"--max-moves", "x"}},
		{"apply", "$SLOTMOVER_PASSWORD)", []string{"--parallel", "x"}},
		{"soak", "$SLOTMOVER_PASSWORD)", []string{"--rate", "x"}},
		{"status", "$SLOTMOVER_ADMIN_PASSWORD)", []string{"--json=x"}},
		{"cancel", "$SLOTMOVER_ADMIN_PASSWORD)", []string{"--all=x"}},
		{"serve", "--password-file", []string{"--tls=x"}},
		{"demo", "-keys", []string{"--keys", "x"}},
		{"bench", "-runs", []string{"--runs", "x"}},
	} {
		runs = append(runs,
			run{[]string{cmd.name, "-h"}, anyExit, cmd.help},
			run{[]string{cmd.name, "--help"}, anyExit, cmd.help},
			run{[]string{cmd.name, "--bogus"}, 2, "unknown flag: --bogus"},
			run{append([]string{cmd.name}, cmd.bad...), 2, "invalid"},
		)
	}
	// The commands that take a password, reaching addr, logging all.
	reach := func(addr string) [][]string {
		return [][]string{
			{"move", "--source", addr, "--target", "127.0.0.1:1", "--slots", "0-10", "--log-level", "debug"},
			{"fix", "--cluster", addr, "--log-level", "debug"},
			{"plan", "--cluster", addr, "--rebalance", "--log-level", "debug"},
			{"apply", planOn(t, dir, addr), "--dry-run", "--log-level", "debug"},
			{"soak", "--cluster", addr, "--duration", "1s", "--log-level", "debug"},
			{"status", "--admin", addr},
			{"cancel", "--admin", addr, "task1"},
		}
	}
	// Unreachable, then a wrong password: the environment's, then the file's.
	for _, addr := range []string{"127.0.0.1:1", s.Addr} {
		want := "connection refused"
		if addr == s.Addr {
			want = "WRONGPASS"
		}
		for _, args := range reach(addr) {
			runs = append(runs, run{args, notZero, want}, run{append(args, "--password-file", wrongFile), notZero, want})
		}
		runs = append(runs, run{[]string{"serve", "--node", addr, "--admin", "127.0.0.1:0"}, 2, want})
	}
	// Refused before anything is reached.
	for _, args := range reach(s.Addr) {
		runs = append(runs,
			run{append(args, "--password", "x", "--password-file", wrongFile), 2, "password-file: give one"},
			run{append(args, "--password-file", emptyFile), 2, "the first line is empty"})
	}
	// The control: with the file's first line, fix gets past AUTH and
	// reads the cluster (of one node, which knows no address of its own).
	runs = append(runs, run{[]string{"fix", "--cluster", s.Addr, "--password-file", rightFile, "--dry-run"}, 0, "nothing repaired"})

	for _, r := range runs {
		code, stdout, stderr := runCLIEnv(t, env, r.args...)
		what := "slotmover " + strings.Join(r.args, " ")
		for _, sec := range secrets {
			if strings.Contains(stdout+stderr, sec) {
				t.Errorf("%s printed a secret (%s…): exit %d\nstdout %s\nstderr %s", what, sec[:5], code, stdout, stderr)
			}
		}
		okCode := code == r.code || r.code == notZero && code != 0 || r.code == anyExit
		if !okCode || !strings.Contains(stdout+stderr, r.want) {
			t.Errorf("%s: exit %d, want %d with %q\nstdout %s\nstderr %s", what, code, r.code, r.want, stdout, stderr)
		}
	}
}

// status reaches a sidecar's TLS admin port with --admin-tls, trusting
// its certificate, and not without: a plaintext client gets no answer.
func TestCLIStatusOverAdminTLS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{})
	cert, key, _, err := localcluster.WriteTestCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var log harness.SyncBuffer
	serve := exec.Command(slotmoverBin, "serve", "--node", c.Nodes[0].Addr, "--admin", "127.0.0.1:0", "--metrics", "",
		"--admin-tls-cert", cert, "--admin-tls-key", key, "--state-dir", t.TempDir())
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		serve.Process.Kill()
		serve.Wait()
		if t.Failed() {
			t.Logf("serve's log:\n%s", log.String())
		}
	})
	admin, _ := servingAddrs(t, &log)
	status := []string{"status", "--json", "--admin", admin}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, stdout, stderr := runCLI(t, append(status, "--admin-tls", "--admin-tls-ca-cert", cert)...)
		if code == 0 && strings.TrimSpace(stdout) == "[]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status --admin-tls: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, stdout, stderr := runCLI(t, status...); code == 0 {
		t.Fatalf("status without --admin-tls was answered: exit 0\nstdout %s\nstderr %s", stdout, stderr)
	}
}

// A Redis with tls-auth-clients yes takes only clients
// that present a certificate. The move is refused without one (exit 2,
// nothing changed) and moves with --tls-cert and --tls-key: every key on
// the target, every node's view naming it.
func TestCLITLSClientCertificate(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{TLS: true})
	ctx := testContext(t, 2*time.Minute)
	// The cluster's one certificate is its CA, and a client's certificate too.
	cert, key := filepath.Join(c.Nodes[0].Dir, "cert.pem"), filepath.Join(c.Nodes[0].Dir, "key.pem")
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	noCert := c.Nodes[0].TLS
	for _, n := range c.Nodes {
		// The test's own clients present it from here on.
		n.TLS = n.TLS.Clone()
		n.TLS.Certificates = []tls.Certificate{pair}
		cl := n.Client()
		err := cl.ConfigSet(ctx, "tls-auth-clients", "yes").Err()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	anon := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr, TLSConfig: noCert, MaxRetries: -1, DisableIdentity: true})
	err = anon.Ping(ctx).Err()
	anon.Close()
	if err == nil {
		t.Fatal("a client without a certificate was served: the servers do not ask for one, the test would test nothing")
	}
	cc := clusterClient(t, c)
	set := mustSlots(t, "0-3000")
	keys := fillMoved(t, ctx, cc, set, 2)
	held := capture(t, ctx, cc, keys)
	fingerprint := fingerprint(t, ctx, c)
	move := []string{"move", "--json", "--source", c.Nodes[0].Addr, "--target", c.Nodes[1].Addr, "--slots", set.String(), "--tls-ca-cert", cert}
	for _, r := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls"}, "certificate"}, // the server's alert, or the hint when it reset the connection first
		{[]string{"--tls", "--tls-cert", cert}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", cert, "--tls-key", key}, "go with --tls"},
	} {
		code, stdout, stderr := runCLI(t, append(move, r.args...)...)
		if code != 2 || !strings.Contains(stderr, r.want) {
			t.Fatalf("move %v: exit %d, want 2 with %q; stdout %s; stderr %s", r.args, code, r.want, stdout, stderr)
		}
		assertUnchanged(t, c, fingerprint)
	}
	code, stdout, stderr := runCLI(t, append(move, "--tls", "--tls-cert", cert, "--tls-key", key)...)
	if sum := parseSummary(t, code, stdout, stderr); code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move with --tls-cert and --tls-key: exit %d, result %q, %d keys (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second))
	target := nodeClient(t, c, 1)
	if err := held.Compare(ctx, target); err != nil {
		t.Fatalf("after the move, on the target: %v", err)
	}
}

// A release build stamps its version (-ldflags -X main.version=…), and
// `slotmover version` prints it on stdout with Go's version and the
// platform, exit 0.
func TestCLIVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "slotmover")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v1.2.3-test", "-o", bin, "../cmd/slotmover").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("slotmover version: %v: %s", err, stderr.String())
	}
	want := fmt.Sprintf("slotmover v1.2.3-test %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if stdout.String() != want || stderr.Len() != 0 {
		t.Fatalf("slotmover version: stdout %q, stderr %q; want %q", stdout.String(), stderr.String(), want)
	}
}

// move, a local apply and fix copy or remove keys from their own process,
// and on a server's host they yield the CPU to the servers as the sidecar
// does: every thread at --nice's default. Each talks to a server that
// accepts and never answers, so it is still waiting when its threads are
// read; a bad --nice is refused before anything is reached.
func TestCLICommandsThatMoveKeysRunNiced(t *testing.T) {
	// Nothing accepts: the kernel completes the handshakes, and what the
	// commands send waits in the queue unanswered.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	silent := ln.Addr().String()
	plan := planOn(t, t.TempDir(), silent)
	for _, args := range [][]string{
		{"move", "--source", silent, "--target", silent, "--slots", "0-10"},
		{"apply", plan},
		{"fix", "--cluster", silent},
	} {
		if code, _, stderr := runCLI(t, append(args, "--nice", "20")...); code != 2 || !strings.Contains(stderr, "--nice 20") {
			t.Errorf("%s --nice 20: exit %d, %q; want 2 naming it", args[0], code, stderr)
		}
		cmd := exec.Command(slotmoverBin, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var nices []int
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if nices = threadNices(t, cmd.Process.Pid); len(nices) > 0 && !slices.ContainsFunc(nices, func(n int) bool { return n != config.DefaultNice }) {
				break
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if len(nices) == 0 || slices.ContainsFunc(nices, func(n int) bool { return n != config.DefaultNice }) {
			t.Errorf("%s: threads at nice %v, want all %d", args[0], nices, config.DefaultNice)
		}
	}
}

// planOn writes into dir a plan of one move of slots 0-10 from addr to
// addr, as apply reads it, and returns its path.
func planOn(t *testing.T, dir, addr string) string {
	t.Helper()
	data, err := json.Marshal(planner.Plan{Format: planner.Format, Mode: planner.Rebalance, By: planner.ByKeys,
		Moves: []planner.Move{{Source: addr, SourceID: strings.Repeat("a", 40), Target: addr, TargetID: strings.Repeat("b", 40), Slots: "0-10"}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plan-"+strings.ReplaceAll(addr, ":", "-")+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
