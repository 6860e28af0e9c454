package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/internal/planview"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/lab/writecheck"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/rollout"
)

// demoSummary is what the demo prints at the end (as JSON with --json).
type demoSummary struct {
	Moves   []rollout.Outcome `json:"moves"`
	Moved   int               `json:"moved"`
	Seconds float64           `json:"seconds"` // plan applied in
	Writes  int               `json:"writes"`  // acknowledged by the workload during the moves
	Unknown int               `json:"unknown"` // writes answered by an error (a reply lost): either outcome is right
	// Lost counts the workload's counters whose value no write explains:
	// an acknowledged increment missing, or one applied twice.
	Lost        int              `json:"lost"`
	Redirects   map[string]int64 `json:"redirects"` // replies the workload's client followed
	KeysChecked int              `json:"keys_checked"`
	KeysEqual   bool             `json:"keys_equal"`
	Imbalance   [2]float64       `json:"imbalance"` // heaviest master / mean, before and after
}

// demoCmd shows slotmover as it is meant to run: a local cluster of 3
// masters and an empty one, an embedded NATS server, a sidecar per master,
// sample keys of every type with big ones, then `plan --add` for the
// empty master applied through the sidecars while a workload writes, with
// the live view, and a final table.
func demoCmd(args []string) int {
	fs := cli.NewFlagSet("demo")
	keys := fs.Int("keys", 100_000, "plain sample keys (besides keys of every type and a big one of each collection type)")
	bigElements := fs.Int("big-elements", 50_000, "elements of each big key")
	parallel := fs.Int("parallel", 3, "moves at once (apply --parallel)")
	keep := fs.Bool("keep", false, "leave the cluster, NATS and the sidecars running at the end, print how to reach them, and wait for Ctrl-C")
	jsonOut := fs.Bool("json", false, "print the summary as JSON on stdout (the rest goes to stderr)")
	words, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("demo", words, 0, command.FlagsOnly) {
		return command.ExitRefused
	}
	if *keys < 0 || *bigElements < 0 || *parallel < 1 {
		fmt.Fprintln(os.Stderr, "slotmover-lab demo: --keys and --big-elements must not be negative, --parallel at least 1")
		return command.ExitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := io.Writer(os.Stdout)
	if *jsonOut {
		out = os.Stderr
	}
	sum, d, err := runDemo(ctx, out, *keys, *bigElements, *parallel)
	if d != nil {
		defer d.stop()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return command.ExitFailed
	}
	if *jsonOut {
		command.PrintJSON(os.Stdout, sum)
	}
	if *keep {
		d.printHowToConnect(os.Stderr)
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "demo: stopping")
	}
	if sum.Moved != len(sum.Moves) || sum.Lost > 0 || !sum.KeysEqual {
		return command.ExitFailed
	}
	return command.ExitDone
}

// demo is what the demo started: stop ends it all.
type demo struct {
	dir     string
	cluster *localcluster.Cluster
	nats    *server.Server
	side    *sidecars
}

func (d *demo) stop() {
	if d.side != nil {
		d.side.stop()
	}
	if d.nats != nil {
		d.nats.Shutdown()
		d.nats.WaitForShutdown()
	}
	if d.cluster != nil {
		d.cluster.Stop()
	}
	os.RemoveAll(d.dir)
}

func runDemo(ctx context.Context, out io.Writer, keys, bigElements, parallel int) (*demoSummary, *demo, error) {
	say := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...) }
	dir, err := os.MkdirTemp("", "slotmover-demo-")
	if err != nil {
		return nil, nil, err
	}
	d := &demo{dir: dir}
	say("starting 4 redis-server masters on loopback (3 with all the slots, 1 empty)…")
	if d.cluster, err = localcluster.StartCluster(ctx, dir, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{}); err != nil {
		return nil, d, err
	}
	c := d.cluster
	say("starting an embedded NATS server and a slotmover sidecar beside each master…")
	if d.nats, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true}); err != nil {
		return nil, d, fmt.Errorf("NATS server: %w", err)
	}
	d.nats.Start()
	if !d.nats.ReadyForConnections(10 * time.Second) {
		return nil, d, errors.New("the NATS server did not start")
	}
	if err := d.startSidecars(); err != nil {
		return nil, d, err
	}

	cc := c.Client()
	defer cc.Close()
	say("loading %d keys, keys of every type, and a big list, set, hash, sorted set and stream of %d elements…", keys, bigElements)
	if err := loadSample(ctx, cc, keys); err != nil {
		return nil, d, fmt.Errorf("load: %w", err)
	}
	typed, err := localcluster.FillEveryType(ctx, cc, "demo", localcluster.FillOptions{Small: 20, BigElements: bigElements, TTL: time.Hour, Seed: 1})
	if err != nil {
		return nil, d, fmt.Errorf("load: %w", err)
	}
	before, err := localcluster.Capture(ctx, cc, typed)
	if err != nil {
		return nil, d, fmt.Errorf("read the sample keys: %w", err)
	}

	// What `slotmover plan --add` does, in-process, and its plan file.
	planPath := filepath.Join(dir, "plan.json")
	say("each $ line below is the command that does the same from a shell; the demo runs its code in-process")
	fmt.Fprintf(out, "\n$ slotmover plan --cluster %s --add %s -o %s\n", c.Nodes[0].Addr, c.Nodes[3].Addr, planPath)
	p, err := planner.Build(ctx, cluster.Conn{Addr: c.Nodes[0].Addr}, planner.Request{Mode: planner.Add, Nodes: []string{c.Nodes[3].Addr}, By: planner.ByKeys}, planner.BigKeyOptions{})
	if err != nil {
		return nil, d, fmt.Errorf("plan: %w", err)
	}
	if err := planner.WriteFile(planPath, p); err != nil {
		return nil, d, err
	}
	planview.PrintPlan(out, p)
	fmt.Fprintf(out, "\nplan written to %s\n", planPath)

	nc, err := nats.Connect(d.nats.ClientURL(), nats.Name("slotmover demo"))
	if err != nil {
		return nil, d, fmt.Errorf("NATS: %w", err)
	}
	defer nc.Close()
	wc, seen := localcluster.RedirectCountingClient(c)
	defer wc.Close()
	wctx, stopWriter := context.WithCancel(ctx)
	written := make(chan workload)
	go func() { written <- writeCounters(wctx, wc) }()

	fmt.Fprintf(out, "\n$ slotmover apply %s --nats %s --parallel %d    # while a client writes\n", planPath, d.nats.ClientURL(), parallel)
	ui := planview.New(ctx, out)
	r := &rollout.Runner{Plan: p, Parallel: parallel, Budgeted: true, Mover: rollout.Sidecars{Bus: &natsapi.Client{NC: nc}}, Watch: ui.Watch}
	start := time.Now()
	results := r.Run(ctx)
	ui.Wait()
	took := time.Since(start)
	stopWriter()
	work := <-written
	sum := &demoSummary{Moves: results, Seconds: took.Seconds(), Writes: work.acked, Unknown: work.unknown, Redirects: seen.Counts(), KeysChecked: len(typed)}
	planview.Print(out, results, false)
	for _, r := range results {
		if r.Result == mover.ResultMoved {
			sum.Moved++
		}
	}
	wv, err := work.tally.Check(ctx, cc)
	if err != nil {
		return nil, d, fmt.Errorf("check the workload's writes: %w", err)
	}
	sum.Lost = len(wv.Wrong)
	cerr := before.Compare(ctx, cc)
	sum.KeysEqual = cerr == nil
	sum.Imbalance[0] = p.Before.Imbalance
	if sum.Imbalance[1], err = keyImbalance(ctx, c); err != nil {
		return nil, d, err
	}

	fmt.Fprintf(out, "\ndemo: %d of %d moves moved in %.1f s; masters' keys heaviest/mean %.2f before, %.2f after\n",
		sum.Moved, len(results), sum.Seconds, sum.Imbalance[0], sum.Imbalance[1])
	fmt.Fprintf(out, "demo: the workload: %d acknowledged writes during the moves (and %d answered by an error, either outcome right), %d lost; replies its client followed: %s\n",
		sum.Writes, sum.Unknown, sum.Lost, redirectLine(sum.Redirects))
	if cerr != nil {
		fmt.Fprintf(out, "demo: the sample keys differ after the moves: %v\n", cerr)
	} else {
		fmt.Fprintf(out, "demo: all %d sample keys of every type (with their TTLs and the big ones) are as they were\n", sum.KeysChecked)
	}
	return sum, d, nil
}

// startSidecars runs a sidecar beside each master.
func (d *demo) startSidecars() (err error) {
	var nodes []string
	for _, n := range d.cluster.Nodes {
		nodes = append(nodes, n.Addr)
	}
	d.side, err = startSidecars(d.nats.ClientURL(), nodes, d.dir)
	return err
}

func (d *demo) printHowToConnect(w io.Writer) {
	c := d.cluster
	fmt.Fprintf(w, "\nThe demo keeps running; Ctrl-C stops it and removes %s.\n\n", d.dir)
	fmt.Fprintf(w, "  the cluster:   redis-cli -c -p %d\n", c.Nodes[0].Port)
	fmt.Fprintf(w, "  NATS:          %s (subjects slotmover.<node>.import|status|cancel|ping, events on slotmover.events.<node ID>.<task>)\n", d.nats.ClientURL())
	fmt.Fprintln(w, "  sidecars:")
	for i, s := range d.side.list {
		fmt.Fprintf(w, "    %s  %s (%s)\n", s.alias, s.node, c.IDs[i])
		fmt.Fprintf(w, "      admin port:  redis-cli -p %s CLUSTER MIGRATION STATUS ALL\n", portOf(s.admin))
		fmt.Fprintf(w, "      over NATS:   slotmover status --nats %s --node %s\n", d.nats.ClientURL(), s.alias)
		fmt.Fprintf(w, "      metrics:     http://%s/metrics\n", s.metrics)
		fmt.Fprintf(w, "      log:         %s\n", s.log)
	}
	// The demo's plan is applied: the master it added can be drained again.
	drain := filepath.Join(d.dir, "drain.json")
	fmt.Fprintf(w, "\n  plan again:    slotmover plan --cluster %s --drain %s -o %s\n", c.Nodes[0].Addr, c.Nodes[3].Addr, drain)
	fmt.Fprintf(w, "  apply it:      slotmover apply %s --nats %s\n", drain, d.nats.ClientURL())
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}

// keyImbalance is the heaviest master's key count over the masters' mean.
func keyImbalance(ctx context.Context, c *localcluster.Cluster) (float64, error) {
	var total, heaviest int64
	for _, n := range c.Nodes {
		cl := n.Client()
		k, err := cl.DBSize(ctx).Result()
		cl.Close()
		if err != nil {
			return 0, fmt.Errorf("DBSIZE on %s: %w", n.Addr, err)
		}
		total += k
		heaviest = max(heaviest, k)
	}
	if total == 0 {
		return 1, nil
	}
	return float64(heaviest) * float64(len(c.Nodes)) / float64(total), nil
}

func redirectLine(r map[string]int64) string {
	var parts []string
	for _, k := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		parts = append(parts, fmt.Sprintf("%s %d", k, r[k]))
	}
	return strings.Join(parts, ", ")
}

func loadSample(ctx context.Context, cc *redis.ClusterClient, n int) error {
	value := strings.Repeat("x", 100)
	for i := 0; i < n; i += 1000 {
		p := cc.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.Set(ctx, fmt.Sprint("key:", j), value, 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// workload is what writeCounters did: it incremented counter:i once for
// each i it noted in tally; unknown of them were answered by an error
// instead of a reply (a dropped connection, a timeout), and may have
// landed or not.
type workload struct {
	tally          *writecheck.Tally
	acked, unknown int
}

// incrOnce is an INCR the client sends only once: go-redis sends again a
// command whose reply it lost, and an INCR that had landed would count
// twice, which the check would take for a broken move.
type incrOnce struct{ *redis.IntCmd }

func (incrOnce) NoRetry() bool { return true }

// writeCounters increments counter:0, counter:1… once each until ctx ends
// (at most 10 minutes). An increment the server refused (an error reply:
// CLUSTERDOWN, too many MOVED) did not land and is tried again; one that
// got no reply (a dropped connection, a timeout) may have landed, so it
// is not: its counter is noted as unknown and the next one follows.
func writeCounters(ctx context.Context, cc *redis.ClusterClient) workload {
	deadline := time.Now().Add(10 * time.Minute)
	w := workload{tally: writecheck.NewTally(0, counterName)}
	for n := 0; ctx.Err() == nil && time.Now().Before(deadline); {
		err := cc.Process(ctx, incrOnce{redis.NewIntCmd(ctx, "incr", counterName(n))})
		var refused redis.Error
		switch {
		case err == nil:
			w.tally.Note(n, nil)
			w.acked++
			n++
			continue
		case ctx.Err() != nil:
			return w // stopped: counter:n is not checked, whatever became of it
		case errors.As(err, &refused):
			// Nothing landed: the same counter again.
		default:
			w.tally.Note(n, err)
			w.unknown++
			n++
		}
		time.Sleep(time.Millisecond)
	}
	return w
}

func counterName(i int) string { return fmt.Sprint("counter:", i) }
