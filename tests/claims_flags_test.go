package tests

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// Issue 10, item 5: the TLS flags of `slotmover move` that
// TestMoveOverTLS leaves out (it moves through mover.Run and only refuses
// by the command): --tls with --tls-ca-cert moves by the command, --tls
// alone (the system's CAs, which do not know the cluster's certificate)
// is refused before anything changes, naming the certificate, and --tls
// with --tls-insecure moves back. Every key is asserted on its new owner,
// and every node's view names it.
func TestClaimsFlagsTLS(t *testing.T) {
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{TLS: true})
	ctx := testContext(t, 2*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "0-6000")
	keys := fillMoved(t, ctx, cc, set, 2)
	before, err := localcluster.Capture(ctx, cc, keys)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(c.Nodes[0].Dir, "cert.pem")
	there := []string{"move", "--json", "--tls", "--source", c.Nodes[0].Addr, "--target", c.Nodes[1].Addr, "--slots", set.String()}
	code, stdout, stderr := runCLI(t, append(there, "--tls-ca-cert", ca)...)
	if sum := parseSummary(t, code, stdout, stderr); code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move with --tls --tls-ca-cert: exit %d, result %q, %d keys (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[1], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	target := c.Nodes[1].Client()
	defer target.Close()
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move with --tls-ca-cert, on the target: %v", err)
	}

	back := []string{"move", "--json", "--tls", "--source", c.Nodes[1].Addr, "--target", c.Nodes[0].Addr, "--slots", set.String()}
	fingerprint, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, back...)
	if code != 2 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("move with --tls and no CA (the system's do not know the cluster's certificate): exit %d, want 2 naming the certificate; stdout %s; stderr %s", code, stdout, stderr)
	}
	assertUnchanged(t, c, fingerprint)

	code, stdout, stderr = runCLI(t, append(back, "--tls-insecure")...)
	if sum := parseSummary(t, code, stdout, stderr); code != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(keys)) {
		t.Fatalf("move back with --tls --tls-insecure: exit %d, result %q, %d keys (want %d); stderr %s", code, sum.Result, sum.KeysCopied, len(keys), stderr)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	source := c.Nodes[0].Client()
	defer source.Close()
	if err := before.Compare(ctx, source); err != nil {
		t.Fatalf("after the move back with --tls-insecure, on the source: %v", err)
	}
}

// Issue 10, item 5: the tunables of `slotmover move`, each shown to take
// effect in the servers' own records or the summary, in one move:
//
//   - --max-lag 1GiB: while the target's writes are held (CLIENT PAUSE
//     WRITE, by the test) with tens of MB
//     of stream still to apply, far more than the default 256 KiB, a
//     cutover is tried anyway (the source sees CLIENT PAUSE), and misses
//     its fence; the move switches once the target runs again.
//   - --pause-budget 1700ms: every CLIENT PAUSE on the source (its slow
//     log, which logs every command here) asks for 1700 ms; --task-id names
//     the connection that sends it.
//   - --spool-dir: while the target is held, the stream backlog (> the
//     64 MiB a spool keeps in memory) spills to a file the mover holds open
//     there (already unlinked); the directory is empty at the end.
//   - --chunk 250 with --big-key-elements 1000 and --chunk-time 1s (so
//     the element cap, not the time, sizes the commands): each big list,
//     set, hash and zset of 3000 elements reaches the target as 12
//     RPUSH/SADD/HSET/ZADD calls (its commandstats).
//   - --reply-per-key: the target never gets CLIENT REPLY (commandstats).
//   - --cleanup-batch 4: every UNLINK script the cleanup sends to the
//     source (slow log) names at most 4 keys, and all of them add up to the
//     orphans removed; --cleanup-sleep 150ms: the cleanup lasts at least
//     150 ms per round after the first.
//
// Every moved key (the backlog's included) is then asserted on the target,
// and every node's view names it.
func TestClaimsFlagsTunables(t *testing.T) {
	c := fourMasters(t)
	ctx := testContext(t, 3*time.Minute)
	cc := c.Client()
	defer cc.Close()
	set := mustSlots(t, "100-300")
	tag := tagIn(set, 7)
	const bigN, chunk, batch, sleep, budget = 3000, 250, 4, 150 * time.Millisecond, 1700 * time.Millisecond
	filled, err := localcluster.FillEveryType(ctx, cc, tag, localcluster.FillOptions{Small: 1, BigElements: bigN, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// A key the source keeps: its cleanup is paced, not one FLUSHDB.
	if err := cc.Set(ctx, tagIn(mustSlots(t, "4000-5460"), 1)+":kept", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	source, target := c.Nodes[0].Client(), c.Nodes[3].Client()
	defer source.Close()
	defer target.Close()
	for _, kv := range [][2]string{{"slowlog-max-len", "100000"}, {"slowlog-log-slower-than", "0"}} {
		if err := source.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	spool := t.TempDir()
	const taskID = "flags-task"
	cmd := exec.Command(slotmoverBin, "move", "--json", "--source", c.Nodes[0].Addr, "--target", c.Nodes[3].Addr, "--slots", set.String(),
		"--task-id", taskID, "--max-lag", strconv.Itoa(1<<30), "--window", "1", "--max-attempts", "1000", "--pause-budget", budget.String(),
		"--big-key-elements", "1000", "--chunk", strconv.Itoa(chunk), "--chunk-time", "1s", "--reply-per-key",
		"--cleanup-batch", strconv.Itoa(batch), "--cleanup-sleep", sleep.String(), "--spool-dir", spool)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := map[int]bool{} // pid → SIGSTOPped: continued at cleanup whatever happens
	stop := func(pid int) {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped[pid] = true
	}
	cont := func(pid int) {
		syscall.Kill(pid, syscall.SIGCONT)
		delete(stopped, pid)
	}
	t.Cleanup(func() {
		for pid := range stopped {
			cont(pid)
		}
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nslotmover's stderr:\n%s", append(args, stderr.String())...)
	}
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				fail("waited %s for %s", d, what)
			}
		}
	}

	// The mover is held as soon as the source sees it as a replica, until
	// the source has forked for its snapshot: what is written then goes
	// into the stream, behind the snapshot.
	waitFor("the mover's replica link on the source", 30*time.Second, func() bool { return replicaState(t, source) != "" })
	stop(cmd.Process.Pid)
	waitFor("the source's snapshot fork", 10*time.Second, func() bool {
		s := replicaState(t, source)
		return s != "wait_bgsave" && s != ""
	})
	counter, blob := tag+":backlog:counter", tag+":backlog:blob"
	const incrs, blobs = 20_000, 80
	for i := 0; i < incrs; i += 1000 {
		p := source.Pipeline()
		for j := 0; j < 1000; j++ {
			p.Incr(ctx, counter)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < blobs; i++ {
		if err := source.Set(ctx, blob, strings.Repeat(string(rune('a'+i%26)), 1<<20), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keys := append(filled, counter, blob)
	before, err := localcluster.Capture(ctx, source, keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := source.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	pausesBefore := commandCalls(t, source, "client|pause")
	cont(cmd.Process.Pid)

	// The target is held as soon as the stream reaches it (the counter
	// appears there), with most of the backlog still to come. By name: a
	// count of the slot's keys also sees a big key's replay, which holds
	// the key and its temporary one for a moment.
	slot := int(slots.ForString(counter))
	waitFor("the stream to reach the target", 60*time.Second, func() bool {
		keys, err := target.ClusterGetKeysInSlot(ctx, slot, len(filled)+10).Result()
		return err == nil && slices.Contains(keys, counter)
	})
	// Its writes are held (CLIENT PAUSE WRITE): it still answers the
	// mover's INFO, but applies nothing.
	if err := target.Do(ctx, "CLIENT", "PAUSE", 20_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	paused := true
	unpause := func() {
		if paused {
			paused = false
			if err := target.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Errorf("CLIENT UNPAUSE on the target: %v", err)
			}
		}
	}
	defer unpause()
	// --spool-dir: the backlog spills to a file the mover holds there.
	var spoolFiles []string
	waitFor("a spool file held open by the mover", 10*time.Second, func() bool {
		spoolFiles = openSpoolFiles(t, cmd.Process.Pid)
		return len(spoolFiles) > 0
	})
	for _, f := range spoolFiles {
		if filepath.Dir(strings.TrimSuffix(f, " (deleted)")) != spool {
			fail("the mover spools to %s, not under --spool-dir %s", f, spool)
		}
	}
	// --max-lag: a cutover is tried while the target trails by far more
	// than the default.
	waitFor(fmt.Sprintf("a cutover attempt (CLIENT PAUSE on the source) while the held target trails by %s (--max-lag %d; the default 256 KiB would wait)",
		lagOf(source), 1<<30), 15*time.Second, func() bool { return commandCalls(t, source, "client|pause") > pausesBefore })
	unpause()

	select {
	case <-exited:
	case <-ctx.Done():
		fail("the move did not end")
	}
	sum := parseSummary(t, cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
	if cmd.ProcessState.ExitCode() != 0 || sum.Result != "moved" || sum.KeysCopied != int64(len(filled)) || sum.CutoverAttempts < 2 {
		fail("exit %d, result %q, %d keys copied (want %d), %d cutover attempts (want 2 or more: one missed while the target was held)",
			cmd.ProcessState.ExitCode(), sum.Result, sum.KeysCopied, len(filled), sum.CutoverAttempts)
	}
	if err := c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := before.Compare(ctx, target); err != nil {
		t.Fatalf("after the move, on the target: %v", err)
	}
	if orphans, err := c.Orphans(ctx); err != nil || len(orphans) > 0 {
		t.Fatalf("keys left behind (%v): %v", err, orphans)
	}

	// --spool-dir: nothing left there.
	if left, err := os.ReadDir(spool); err != nil || len(left) > 0 {
		t.Fatalf("--spool-dir %s holds %v after the move (%v)", spool, left, err)
	}
	// --chunk: each big collection replayed in ceil(3000/250) commands.
	want := int64(math.Ceil(float64(bigN) / chunk))
	for _, command := range []string{"rpush", "sadd", "hset", "zadd"} {
		if n := commandCalls(t, target, command); n != want {
			t.Errorf("--chunk %d: the target ran %s %d times for a big key of %d elements, want %d", chunk, strings.ToUpper(command), n, bigN, want)
		}
	}
	if sum.BigKeys != 5 {
		t.Errorf("--big-key-elements 1000: %d big keys replayed, want the 5 of %d elements", sum.BigKeys, bigN)
	}
	// --reply-per-key: the target's replies were never turned off.
	if n := commandCalls(t, target, "client|reply"); n != 0 {
		t.Errorf("--reply-per-key: the target ran CLIENT REPLY %d times, want none", n)
	}
	// --pause-budget, --task-id, --cleanup-batch, --cleanup-sleep: the source's slow log.
	log, err := source.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	pauses, rounds, unlinked := 0, 0, int64(0)
	for _, e := range log {
		args := e.Args
		switch {
		case len(args) >= 3 && strings.EqualFold(args[0], "client") && strings.EqualFold(args[1], "pause"):
			pauses++
			if args[2] != strconv.FormatInt(budget.Milliseconds(), 10) {
				t.Errorf("--pause-budget %s: the source was sent %q", budget, strings.Join(args, " "))
			}
			if e.ClientName != "slotmover:"+taskID {
				t.Errorf("--task-id %s: the pause came from a connection named %q", taskID, e.ClientName)
			}
		case len(args) > 3 && strings.EqualFold(args[0], "eval") && strings.Contains(args[1], "UNLINK"):
			rounds++
			if n := len(args) - 3; n > batch {
				t.Errorf("--cleanup-batch %d: one cleanup round trip removed %d keys: %q", batch, n, args[3:])
			}
			unlinked += int64(len(args) - 3)
		}
	}
	if pauses < 2 {
		t.Errorf("the source's slow log holds %d CLIENT PAUSE, want one per cutover attempt (%d)", pauses, sum.CutoverAttempts)
	}
	if unlinked != sum.OrphansRemoved || unlinked != int64(len(keys)) {
		t.Errorf("the cleanup's UNLINK scripts named %d keys, the summary says %d orphans removed, %d keys were moved", unlinked, sum.OrphansRemoved, len(keys))
	}
	if least := time.Duration(rounds-1) * sleep; time.Duration(sum.CleanupMS)*time.Millisecond < least {
		t.Errorf("--cleanup-sleep %s: %d cleanup rounds took %d ms, less than the %s of sleeps between them", sleep, rounds, sum.CleanupMS, least)
	}
	t.Logf("%d cutover attempts (pause budget %s), %d cleanup rounds in %d ms, spool %v", sum.CutoverAttempts, budget, rounds, sum.CleanupMS, spoolFiles)
}

// replicaState is the state of the source's first replica ("" for none).
func replicaState(t *testing.T, c *redis.Client) string {
	t.Helper()
	f, err := info.Read(context.Background(), c, "replication")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(f["slave0"], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "state" {
			return v
		}
	}
	return ""
}

// commandCalls reads the calls of a command in a node's commandstats.
func commandCalls(t *testing.T, c *redis.Client, command string) int64 {
	t.Helper()
	n, err := localcluster.CommandStat(context.Background(), c, command, "calls")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openSpoolFiles lists the spool files process pid holds open.
func openSpoolFiles(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.Contains(filepath.Base(target), "slotmover-spool-") {
			out = append(out, target)
		}
	}
	return out
}

// lagOf describes the source's offset, for a message.
func lagOf(c *redis.Client) string {
	f, err := info.Read(context.Background(), c, "replication")
	if err != nil {
		return "?"
	}
	return "a stream at offset " + f["master_repl_offset"]
}
