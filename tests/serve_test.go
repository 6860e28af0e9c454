package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/tests/harness"
)

// servingLine is the line slotmover serve logs once its ports serve.
var servingLine = regexp.MustCompile(`msg=serving .*\badmin=(\S+) .*\bmetrics=(\S+)`)

// servingAddrs waits for the "serving" line of a slotmover serve started
// with its ports at :0 and returns the ports it took. A port picked free
// beforehand could be taken by another test's server before the sidecar
// binds it.
func servingAddrs(t *testing.T, log *harness.SyncBuffer) (admin, metrics string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := servingLine.FindStringSubmatch(log.String()); m != nil {
			return m[1], strings.Trim(m[2], `"`)
		}
		if time.Now().After(deadline) {
			t.Fatalf("slotmover serve never said it was serving; log:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemon is a `slotmover serve` process.
type daemon struct {
	cmd            *exec.Cmd
	admin, metrics string
	log            *harness.SyncBuffer
}

// startDaemon runs slotmover serve for node, with its admin and metrics
// ports where the kernel puts them, and waits until the admin port answers.
func startDaemon(t *testing.T, node, natsURL string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, node, natsURL)
}

// startDaemonEnv is startDaemon with env added to the environment; by
// default its state is in the test's stateHome.
func startDaemonEnv(t *testing.T, env []string, node, natsURL string) *daemon {
	t.Helper()
	d := &daemon{log: &harness.SyncBuffer{}}
	args := []string{"serve", "--node", node, "--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--max-tasks", "2"}
	if natsURL != "" {
		args = append(args, "--nats", natsURL)
	}
	d.cmd = exec.Command(slotmoverBin, args...)
	d.cmd.Env = append(append(os.Environ(), "STATE_DIRECTORY=", "XDG_STATE_HOME="+stateHome(t)), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			d.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log)
		}
	})
	d.admin, d.metrics = servingAddrs(t, d.log)
	if out, err := d.cli(t, "PING"); err != nil || strings.TrimSpace(out) != "PONG" {
		t.Fatalf("the daemon's admin port %s: %v %q; log:\n%s", d.admin, err, out, d.log)
	}
	return d
}

// stateHomes holds each running test's $XDG_STATE_HOME for its daemons.
var stateHomes sync.Map

// stateHome is the test's $XDG_STATE_HOME: its daemons keep their state in
// its slotmover folder, and one restarted finds what it left there.
func stateHome(t *testing.T) string {
	if d, ok := stateHomes.Load(t); ok {
		return d.(string)
	}
	d := t.TempDir()
	stateHomes.Store(t, d)
	t.Cleanup(func() { stateHomes.Delete(t) })
	return d
}

// terminate stops the sidecar with SIGTERM and fails the test unless it
// exits cleanly.
func (d *daemon) terminate(t *testing.T) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("the sidecar after SIGTERM: %v", err)
	}
}

// cli runs the real redis-cli against the admin port; its output is the
// raw form redis-cli prints when not on a terminal: one value per line.
func (d *daemon) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	host, port, _ := net.SplitHostPort(d.admin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, localcluster.CliBin(), append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return string(out), err
}

// field reads a field of the first task in a raw STATUS reply.
func field(status, name string) string {
	lines := strings.Split(strings.TrimSpace(status), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == name {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// waitState polls STATUS ID until the task's state is one of want.
func (d *daemon) waitState(t *testing.T, id string, timeout time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
		if err != nil {
			t.Fatalf("STATUS: %v: %s", err, out)
		}
		for _, w := range want {
			if field(out, "state") == w {
				return out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not %v after %s:\n%s", id, want, timeout, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape returns a metric's value from the daemon's /metrics (-1 if absent).
func (d *daemon) scrape(t *testing.T, metric string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), " "); ok && name == metric {
			v, _ := strconv.ParseFloat(value, 64)
			return v
		}
	}
	return -1
}

// An operator's script with the real redis-cli: IMPORT 0 5460, polled
// with STATUS, completes while a writer writes; every key is on the
// target, no acknowledged write is lost; /metrics shows the copy's
// progress while it runs.
func TestServeImportWithRedisCli(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-5460")
	keys := keysIn(load(t, cc, 20_000, set), set)
	want := capture(t, ctx, cc, keys)
	natsURL := harness.NATS(t)
	d := startDaemon(t, c.Nodes[3].Addr, natsURL)
	w := startWriter(t, c, 2_000_000)

	id := d.importShard(t)
	var progress []float64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status, err := d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
		if err != nil {
			t.Fatal(err)
		}
		if v := d.scrape(t, "slotmover_keys_copied_total"); len(progress) == 0 || v != progress[len(progress)-1] {
			progress = append(progress, v)
		}
		if state := field(status, "state"); state != "running" {
			if state != "completed" {
				t.Fatalf("task ended %s:\n%s", state, status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still running after 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.finish(t)
	if last := progress[len(progress)-1]; last < float64(len(keys)) {
		t.Fatalf("keys copied per /metrics: %v, want at least %d at the end", progress, len(keys))
	}
	t.Logf("slotmover_keys_copied_total seen during the move: %v", progress)
	must(t, c.WaitOwner(ctx, set, c.IDs[3], 10*time.Second))
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if v := d.scrape(t, `slotmover_tasks{state="completed"}`); v != 1 {
		t.Fatalf("slotmover_tasks{state=completed} = %v", v)
	}
	// The operator's view: slotmover status over the admin port and over
	// NATS, and a cancel that finds nothing to stop.
	// --config: as the sidecar of that file connects to NATS.
	sidecarYAML := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(sidecarYAML, []byte(fmt.Sprintf("node:\n  address: %s\nnats:\n  servers: [%s]\n", c.Nodes[3].Addr, natsURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, how := range [][]string{{"--admin", d.admin}, {"--nats", natsURL, "--node", c.IDs[3]}, {"--config", sidecarYAML, "--node", c.IDs[3]}} {
		code, stdout, stderr := runCLI(t, append([]string{"status", "--json"}, how...)...)
		var recs []map[string]any
		if code != 0 || json.Unmarshal([]byte(stdout), &recs) != nil || len(recs) != 1 || recs[0]["id"] != id || recs[0]["state"] != "completed" {
			t.Fatalf("slotmover status %v: exit %d\n%s%s", how, code, stdout, stderr)
		}
	}
	if code, stdout, stderr := runCLI(t, "cancel", "--all", "--admin", d.admin); code != 0 || !strings.Contains(stdout, "cancelled: 0") {
		t.Fatalf("slotmover cancel --all: exit %d\n%s%s", code, stdout, stderr)
	}
	// The sidecar yields the CPU to the master: every thread, those the
	// move started too, runs at tasks.nice's default.
	if nices := threadNices(t, d.cmd.Process.Pid); slices.ContainsFunc(nices, func(n int) bool { return n != config.DefaultNice }) {
		t.Fatalf("the sidecar's threads run at nice %v, want %d", nices, config.DefaultNice)
	}
	// SIGTERM: a clean exit.
	d.terminate(t)
}

// CANCEL during the copy leaves the cluster exactly as it was.
func TestServeCancelDuringCopy(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	bulkLoad(t, cc, 200_000)
	before := fingerprint(t, ctx, c)
	d := startDaemon(t, c.Nodes[3].Addr, "")
	id := d.importShard(t)
	if out, err := d.cli(t, "CLUSTER", "MIGRATION", "CANCEL", "ID", id); err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("CANCEL: %v %q", err, out)
	}
	status := d.waitState(t, id, time.Minute, "canceled", "completed", "failed")
	if field(status, "state") != "canceled" {
		t.Fatalf("cancelled task:\n%s", status)
	}
	assertHealthyAndUnchanged(t, ctx, c, before)
}

// kill -9 of the daemon in the middle of the copy, then a restart: the
// task is found in the NATS bucket and repaired with fix's logic (here
// rolled back); the cluster ends whole, as before the import.
func TestServeKilledMidCopyIsRepairedOnRestart(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	bulkLoad(t, cc, 300_000)
	before := fingerprint(t, ctx, c)
	natsURL := harness.NATS(t)
	d := startDaemon(t, c.Nodes[3].Addr, natsURL)
	id := d.importShard(t)
	target := nodeClient(t, c, 3)
	waitCopying(t, ctx, target)
	d.cmd.Process.Kill()
	d.cmd.Wait()
	if target.DBSize(ctx).Val() == 0 {
		t.Fatal("the killed import left nothing to repair: the test tests nothing")
	}

	d2 := startDaemon(t, c.Nodes[3].Addr, natsURL)
	status := d2.waitState(t, id, time.Minute, "failed", "completed")
	if !strings.Contains(field(status, "last_error"), "interrupted") {
		t.Fatalf("the restarted daemon's record of the task:\n%s", status)
	}
	assertHealthyAndUnchanged(t, ctx, c, before)
}

// Bad starts change nothing and say why: a node that is not there, or
// not given. (NATS unreachable is no bad start: see
// TestServeRepairsWithoutNATS.)
func TestServeRefusesBadStarts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "127.0.0.1:1", "--admin", "127.0.0.1:0"}, "the local master"},
		{[]string{"--admin", "127.0.0.1:0"}, "node.address"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"serve"}, tc.args...)...)
		if code != 2 || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("serve %v: exit %d, want 2 and %q:\n%s%s", tc.args, code, tc.want, stdout, stderr)
		}
	}
}

// importShard sends IMPORT 0 5460 and returns the task id.
func (d *daemon) importShard(t *testing.T) string {
	t.Helper()
	out, err := d.cli(t, "CLUSTER", "MIGRATION", "IMPORT", "0", "5460")
	id := strings.TrimSpace(out)
	if err != nil || len(id) < 8 || strings.Contains(id, "ERR") {
		t.Fatalf("IMPORT: %v %q", err, out)
	}
	return id
}

// waitCopying waits until the target holds keys of the copy under way.
func waitCopying(t *testing.T, ctx context.Context, target *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for target.DBSize(ctx).Val() < 1000 {
		if time.Now().After(deadline) {
			t.Fatal("the import never started its snapshot")
		}
		time.Sleep(time.Millisecond)
	}
}

// assertHealthyAndUnchanged fails unless the cluster is healthy again and
// as before.
func assertHealthyAndUnchanged(t *testing.T, ctx context.Context, c *localcluster.Cluster, before string) {
	t.Helper()
	must(t, c.WaitHealthy(ctx, 10*time.Second))
	assertUnchanged(t, c, before)
}

// bulkLoad writes n plain keys in the first shard, enough for a copy that
// lasts a while.
func bulkLoad(t *testing.T, cc *redis.ClusterClient, n int) {
	t.Helper()
	ctx := context.Background()
	set := mustSlots(t, "0-5460")
	for start := 0; start < n; start += 10_000 {
		if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := start; i < min(start+10_000, n); i++ {
				p.Set(ctx, fmt.Sprintf("%s:%d", tagIn(set, i%500), i), strings.Repeat("v", 200), 0)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// SIGTERM in the middle of a copy: the sidecar takes no new task, the copy
// is cancelled and rolled back, and it exits 0 with the cluster as before.
func TestServeSIGTERMRollsBackCopies(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	bulkLoad(t, cc, 300_000)
	before := fingerprint(t, ctx, c)
	d := startDaemon(t, c.Nodes[3].Addr, "")
	d.importShard(t)
	target := nodeClient(t, c, 3)
	waitCopying(t, ctx, target)
	d.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the daemon after SIGTERM: %v\n%s", err, d.log)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the daemon did not exit within a minute of SIGTERM")
	}
	if !strings.Contains(d.log.String(), "rolled back") {
		t.Fatalf("no rollback in the daemon's log:\n%s", d.log)
	}
	assertHealthyAndUnchanged(t, ctx, c, before)
}

// One sidecar per node. A second `slotmover serve` for a node whose
// sidecar runs is refused (exit 2), naming that sidecar: at once if it
// shares the state directory, after the claim's lapse on NATS if not. A
// sidecar killed with -9 does not block the next one: its claim, no
// longer renewed, is taken over.
func TestServeRefusesASecondSidecar(t *testing.T) {
	c := fourMasters(t)
	natsURL := harness.NATS(t)
	node := c.Nodes[3].Addr
	d := startDaemon(t, node, natsURL)
	for _, tc := range []struct {
		name, stateHome, want string
	}{
		{"same state directory", stateHome(t), "another sidecar holds this node's state"},
		{"another state directory", t.TempDir(), "another sidecar serves this node"},
	} {
		code, stdout, stderr := runCLIEnv(t, []string{"STATE_DIRECTORY=", "XDG_STATE_HOME=" + tc.stateHome},
			"serve", "--node", node, "--admin", "127.0.0.1:0", "--metrics", "", "--nats", natsURL)
		out := stdout + stderr
		t.Logf("%s: %s", tc.name, out)
		if code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, "admin port "+d.admin) {
			t.Fatalf("%s: exit %d, want 2, %q and the first sidecar's admin port %s:\n%s", tc.name, code, tc.want, d.admin, out)
		}
	}
	if out, err := d.cli(t, "PING"); err != nil || strings.TrimSpace(out) != "PONG" {
		t.Fatalf("the first sidecar after the refusals: %v %q", err, out)
	}

	d.cmd.Process.Kill()
	d.cmd.Wait()
	d2 := startDaemonEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, node, natsURL)
	d2.terminate(t)
	if log := d2.log.String(); !strings.Contains(log, "took over the claim") || !strings.Contains(log, "admin port "+d.admin) {
		t.Fatalf("the second sidecar does not say it took the dead one's claim over:\n%s", log)
	}
}

// An operator controls a running import three ways: PAUSE with the real
// redis-cli on the admin port, HOLD-CUTOVER over NATS, and resume, budget
// and release-cutover with the slotmover CLI. Paused, the copy stands
// still (the target's key count does not move); held, the task catches up
// and waits in catch-up, the source still the owner; released, it moves
// every key, and a writer loses nothing. Bad controls exit 2.
func TestServeControlsAMove(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	bulkLoad(t, cc, 200_000)
	natsURL := harness.NATS(t)
	d := startDaemon(t, c.Nodes[3].Addr, natsURL)
	w := startWriter(t, c, 2_000_000)
	id := d.importShard(t)
	target := nodeClient(t, c, 3)
	waitCopying(t, ctx, target)

	if out, err := d.cli(t, "CLUSTER", "MIGRATION", "PAUSE", "ID", id); err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("PAUSE: %v %q", err, out)
	}
	nats := []string{"--nats", natsURL, "--node", c.IDs[3]}
	if code, out, errOut := runCLI(t, append([]string{"hold-cutover", id}, nats...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("hold-cutover over NATS: exit %d: %s%s", code, out, errOut)
	}
	time.Sleep(200 * time.Millisecond) // what was in flight lands
	size0 := target.DBSize(ctx).Val()
	time.Sleep(time.Second)
	status, _ := d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
	// The budget may hold it too (a slow probe on a busy machine): paused
	// is one of the holds, not necessarily the first.
	paused := holds(strings.Split(field(status, "holding"), "; "), "paused: ")
	if size1 := target.DBSize(ctx).Val(); size1 != size0 || !paused || field(status, "cutover_held") != "1" {
		t.Fatalf("paused: the target went from %d to %d keys in 1 s; status:\n%s", size0, size1, status)
	}

	admin := []string{"--admin", d.admin}
	for _, bad := range [][]string{{"resume"}, {"resume", id, "extra"}, {"budget", "fast", id}, {"budget"}, {"pause", "--all", id}} {
		if code, out, errOut := runCLI(t, append(bad, admin...)...); code != 2 || errOut == "" {
			t.Fatalf("%q: exit %d, want 2 with a reason: %s%s", bad, code, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, append([]string{"resume", id}, admin...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("resume: exit %d: %s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, append([]string{"budget", "max-event=50ms,max-rise=3", "--all"}, nats...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("budget over NATS: exit %d: %s%s", code, out, errOut)
	}
	// Caught up, the task waits for its cutover's release.
	deadline := time.Now().Add(time.Minute)
	for {
		status, _ = d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
		lag, _ := strconv.Atoi(field(status, "lag_bytes"))
		if field(status, "phase") == "catchup" && lag < 256<<10 && field(status, "holding") == "" {
			break
		}
		if time.Now().After(deadline) || field(status, "state") != "running" {
			t.Fatalf("the task never caught up to wait for its cutover:\n%s", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	status, _ = d.cli(t, "CLUSTER", "MIGRATION", "STATUS", "ID", id)
	if field(status, "phase") != "catchup" || field(status, "budget") != "max-event=50ms,max-rise=3" {
		t.Fatalf("with the cutover held, 1 s later:\n%s", status)
	}
	if owner := ownSlots(t, c, 0); !owner.Slots.Contains(0) {
		t.Fatalf("with the cutover held, the source no longer owns slot 0: %v", owner.Slots)
	}
	if code, out, errOut := runCLI(t, append([]string{"release-cutover", id}, admin...)...); code != 0 || !strings.Contains(out, "1 running task") {
		t.Fatalf("release-cutover: exit %d: %s%s", code, out, errOut)
	}
	status = d.waitState(t, id, time.Minute, "completed", "failed", "canceled")
	if field(status, "state") != "completed" || field(status, "paused_ms") == "0" {
		t.Fatalf("released:\n%s", status)
	}
	must(t, c.WaitOwner(ctx, mustSlots(t, "0-5460"), c.IDs[3], 10*time.Second))
	if n := target.DBSize(ctx).Val(); n < 200_000 {
		t.Fatalf("the target holds %d keys, want the 200000 loaded and the writer's", n)
	}
	assertNoOrphans(t, c)
	w.finish(t)
}

// A sidecar died between its move's release and its claim: the source has
// given slots 0-99 up, the target imports them and holds every key, and
// no master serves them. It restarts while NATS is down. From its state
// directory alone it repairs the move (fix gives the slots back to the
// source, which holds every write): one owner serves the slots again,
// every key is there once, and the record says what happened, in
// STATUS and in the state file. When NATS comes up the sidecar takes it
// up and answers there.
func TestServeRepairsWithoutNATS(t *testing.T) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-99")
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", tagIn(set, i%200), i)
	}
	if _, err := cc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, k, "value of "+k, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := capture(t, ctx, cc, keys)

	// The move, by hand, up to its release.
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	copiedToImporting(t, ctx, source, target, c.IDs[0], set, keys)
	if err := source.Do(ctx, cluster.SlotsCommand("DELSLOTS", set.Slots())...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cutover.SetSlots(ctx, source, set.Slots(), "NODE", c.IDs[3]); err != nil {
		t.Fatal(err)
	}
	server0, err := info.Read(ctx, target, "server")
	if err != nil {
		t.Fatal(err)
	}
	// The state file of the sidecar that died, as it left it.
	stateDir := filepath.Join(stateHome(t), "slotmover")
	records := filepath.Join(stateDir, c.IDs[3]+".tasks.json")
	dead := []sidecar.Task{{
		ID: "0d1e2a3d4b5c", Slots: "0-99", Source: c.IDs[0], SourceAddr: c.Nodes[0].Addr, Dest: c.IDs[3], DestAddr: c.Nodes[3].Addr,
		DestRunID: server0["run_id"], Operation: "import", State: sidecar.StateRunning, Phase: "cutover", CreateTime: time.Now(),
	}}
	data, _ := json.Marshal(dead)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(records, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// The port is held until NATS takes it, by a listener that never
	// accepts (a client gets no INFO: NATS is unreachable). Left free for
	// the repair's seconds, it was once taken by another test's server.
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	natsAddr := hold.Addr().String()
	d := startDaemon(t, c.Nodes[3].Addr, "nats://"+natsAddr)
	status := d.waitState(t, dead[0].ID, time.Minute, "completed", "failed")
	if field(status, "state") != "failed" || field(status, "result") != "rolled_back" || field(status, "phase") != "repaired" ||
		!strings.Contains(field(status, "last_error"), "interrupted") {
		t.Fatalf("the repaired task:\n%s", status)
	}
	must(t, c.WaitOwner(ctx, set, c.IDs[0], 10*time.Second))
	must(t, c.WaitHealthy(ctx, 10*time.Second))
	fresh := c.Client()
	defer fresh.Close()
	if err := want.Compare(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys { // once: on the source, nowhere else
		n := 0
		for _, node := range c.Nodes {
			cl := node.Client()
			n += int(cl.Exists(ctx, k).Val())
			cl.Close()
		}
		if n != 1 {
			t.Fatalf("key %s is on %d masters", k, n)
		}
	}
	var saved []sidecar.Task
	if data, err := os.ReadFile(records); err != nil || json.Unmarshal(data, &saved) != nil ||
		len(saved) != 1 || saved[0].State != sidecar.StateFailed || saved[0].Result != "rolled_back" || saved[0].Phase != "repaired" {
		t.Fatalf("the state file after the repair (%v): %s", err, data)
	}

	// NATS comes up where the sidecar looks for it: it is taken up, and
	// the bucket learns how the task ended.
	hold.Close()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: hold.Addr().(*net.TCPAddr).Port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	client := &natsapi.Client{NC: nc}
	deadline := time.Now().Add(30 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		tasks, err := client.Status(qctx, c.IDs[3], dead[0].ID)
		cancel()
		if err == nil {
			if len(tasks) != 1 || tasks[0].Result != "rolled_back" {
				t.Fatalf("status over NATS: %+v", tasks)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar never answered on NATS once it came up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, natsapi.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	var kept sidecar.Task
	if e, err := kv.Get(ctx, c.IDs[3]+"."+dead[0].ID); err != nil || json.Unmarshal(e.Value(), &kept) != nil || kept.Result != "rolled_back" {
		t.Fatalf("the bucket's record: %+v %v", kept, err)
	}
	d.terminate(t)
	if log := d.log.String(); !strings.Contains(log, "NATS unreachable") || !strings.Contains(log, "NATS taken up") {
		t.Fatalf("the log does not say that NATS was down, then taken up:\n%s", log)
	}
}

// threadNices is the nice value of each thread of process pid.
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	nices, err := command.ThreadNices(pid)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Collect(maps.Values(nices))
}
