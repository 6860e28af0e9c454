package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The README's first command: the demo starts a cluster, NATS and a
// sidecar per master, and applies a plan adding the empty master through
// the sidecars while a workload writes. Its summary must say every move
// moved, the masters ended even, no write was lost, the workload saw no
// ASK or TRYAGAIN, and the sample keys of every type are unchanged.
func TestDemo(t *testing.T) {
	code, stdout, stderr := runCLI(t, "demo", "--keys", "20000", "--big-elements", "3000", "--json")
	var sum struct {
		Moves []struct {
			Result string `json:"result"`
			Keys   int64  `json:"keys"`
			Task   string `json:"task"`
		} `json:"moves"`
		Moved       int              `json:"moved"`
		Writes      int              `json:"writes"`
		Lost        int              `json:"lost"`
		Redirects   map[string]int64 `json:"redirects"`
		KeysChecked int              `json:"keys_checked"`
		KeysEqual   bool             `json:"keys_equal"`
		Imbalance   [2]float64       `json:"imbalance"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); code != 0 || err != nil {
		t.Fatalf("demo: exit %d (%v)\nstdout %s\nstderr %s", code, err, stdout, stderr)
	}
	t.Logf("demo:\n%s", stderr)
	if len(sum.Moves) < 3 || sum.Moved != len(sum.Moves) {
		t.Fatalf("demo: %d of %d moves moved, want 3 or more, all", sum.Moved, len(sum.Moves))
	}
	for _, m := range sum.Moves {
		if m.Task == "" || m.Keys == 0 {
			t.Fatalf("demo: a move not run by a sidecar, or with no keys: %+v", m)
		}
	}
	if sum.Writes == 0 || sum.Lost != 0 || sum.Redirects["ASK"] != 0 || sum.Redirects["TRYAGAIN"] != 0 {
		t.Fatalf("demo: %d writes, %d lost, redirects %v; want some writes, none lost, no ASK or TRYAGAIN", sum.Writes, sum.Lost, sum.Redirects)
	}
	if !sum.KeysEqual || sum.KeysChecked < 100 || sum.Imbalance[0] < 1.3 || sum.Imbalance[1] > 1.05 {
		t.Fatalf("demo: %d sample keys equal: %v; imbalance %v, want from 1.33 to 1.0", sum.KeysChecked, sum.KeysEqual, sum.Imbalance)
	}
}

// The demo's workload has its connections dropped by the server while it
// writes (CLIENT KILL, as a failover or a proxy restart would): a write
// that got no reply may have landed or not, and the demo accepts either
// without taking it for a lost write, nor writes it twice. Its summary
// shows such writes and none lost. The commands the demo prints name the
// plan file it wrote.
func TestDemoWorkloadWithDroppedConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, labBin, "demo", "--keys", "20000", "--big-elements", "3000", "--json")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// The demo prints its masters in the plan's table, then the apply
	// line once its workload writes: from there until its summary, the
	// workload's connections (unnamed, last command INCR; the moves' are
	// named) are killed every 20 ms.
	var stderr strings.Builder
	addrs := map[string]bool{}
	addr := regexp.MustCompile(`(?:^|\s)(127\.0\.0\.1:\d+)\s`)
	planLine := regexp.MustCompile(`^\$ slotmover plan .* -o (\S+)$`)
	applyLine := regexp.MustCompile(`^\$ slotmover apply (\S+) --nats `)
	var planPath, applyPath string
	stopKill := make(chan struct{})
	stop := sync.OnceFunc(func() { close(stopKill) })
	var killed int
	var wg sync.WaitGroup
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		line := sc.Text()
		stderr.WriteString(line + "\n")
		switch m := applyLine.FindStringSubmatch(line); {
		case m != nil:
			applyPath = m[1]
			wg.Add(1)
			go func() {
				defer wg.Done()
				killed = killWorkload(ctx, addrs, stopKill)
			}()
		case applyPath != "" && strings.HasPrefix(line, "demo: "):
			stop() // the summary: the workload is over
		case applyPath != "":
		case planLine.MatchString(line):
			planPath = planLine.FindStringSubmatch(line)[1]
			fallthrough
		case planPath != "":
			for _, m := range addr.FindAllStringSubmatch(line, -1) {
				addrs[m[1]] = true
			}
		}
	}
	err = cmd.Wait()
	stop()
	wg.Wait()
	t.Logf("demo (exit %v), %d workload connections killed:\n%s", err, killed, stderr.String())

	if planPath == "" || !strings.HasSuffix(planPath, "/plan.json") || applyPath != planPath {
		t.Errorf("the demo's commands: plan -o %q, apply %q; want the same plan file", planPath, applyPath)
	}
	var sum struct {
		Moves   []struct{ Result string } `json:"moves"`
		Moved   int                       `json:"moved"`
		Writes  int                       `json:"writes"`
		Unknown int                       `json:"unknown"`
		Lost    int                       `json:"lost"`
	}
	if jerr := json.Unmarshal([]byte(stdout.String()), &sum); jerr != nil {
		t.Fatalf("demo: %v, its summary: %v; stdout %s", err, jerr, stdout.String())
	}
	if len(addrs) != 4 || killed == 0 {
		t.Fatalf("killed %d workload connections on %d masters %v: the test tested nothing", killed, len(addrs), addrs)
	}
	if sum.Moved != len(sum.Moves) || sum.Writes == 0 || sum.Lost != 0 || sum.Unknown == 0 {
		t.Fatalf("demo: %d of %d moves moved, %d writes acknowledged, %d unanswered, %d lost; want every move, writes of both kinds, none lost",
			sum.Moved, len(sum.Moves), sum.Writes, sum.Unknown, sum.Lost)
	}
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
}

// killWorkload kills, every 20 ms until stop, the connections of the
// masters at addrs that are unnamed and last ran INCR, and returns how
// many it killed.
func killWorkload(ctx context.Context, addrs map[string]bool, stop <-chan struct{}) int {
	var clients []*redis.Client
	for a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
		defer c.Close()
		clients = append(clients, c)
	}
	killed := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return killed
		case <-ctx.Done():
			return killed
		case <-tick.C:
		}
		for _, c := range clients {
			list, err := c.ClientList(ctx).Result()
			if err != nil {
				continue // the demo is stopping its servers
			}
			for _, line := range strings.Split(list, "\n") {
				f := map[string]string{}
				for _, kv := range strings.Fields(line) {
					k, v, _ := strings.Cut(kv, "=")
					f[k] = v
				}
				if f["cmd"] == "incr" && f["name"] == "" && c.ClientKillByFilter(ctx, "ID", f["id"]).Val() > 0 {
					killed++
				}
			}
		}
	}
}
