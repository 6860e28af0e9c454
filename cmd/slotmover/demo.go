package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/internal/localcluster"
)

// demoCmd starts a local cluster of 4 masters (3 with all slots, 1 empty),
// loads sample keys, moves slots to the empty master with a live writer
// running, checks every write, and stops the cluster.
func demoCmd(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var f moveFlags
	f.register(fs)
	keys := fs.Int("keys", 100000, "sample keys to load")
	if err := fs.Parse(append([]string{"--slots", "0-5460", "--json"}, args...)); err != nil {
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "slotmover-demo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitFailed
	}
	defer os.RemoveAll(dir)

	fmt.Fprintln(os.Stderr, "demo: starting 4 redis-server masters on loopback…")
	c, err := localcluster.StartCluster(ctx, dir, []string{"0-5460", "5461-10922", "10923-16383", ""}, localcluster.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return exitFailed
	}
	defer c.Stop()
	cc := c.Client()
	defer cc.Close()
	fmt.Fprintf(os.Stderr, "demo: loading %d keys…\n", *keys)
	if err := loadSample(ctx, cc, *keys); err != nil {
		fmt.Fprintf(os.Stderr, "demo: load: %v\n", err)
		return exitFailed
	}
	f.opts.Source.Addr, f.opts.Target.Addr = c.Nodes[0].Addr, c.Nodes[3].Addr
	if err := f.resolve(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return exitRefused
	}
	fmt.Fprintf(os.Stderr, "demo: moving slots %s from %s to %s while a client writes…\n", f.slotSpec, f.opts.Source.Addr, f.opts.Target.Addr)
	wctx, stopWriter := context.WithCancel(ctx)
	written := make(chan int)
	go func() { written <- writeCounters(wctx, cc) }()
	code := runMove(ctx, &f, os.Stdout, os.Stderr)
	stopWriter()
	n := <-written
	lost, err := checkCounters(ctx, cc, n)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: check: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(os.Stderr, "demo: %d acknowledged writes during the move, %d lost\n", n, lost)
	if lost > 0 && code == exitMoved {
		return exitFailed
	}
	return code
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

// writeCounters increments counter:i once each, in order, until ctx ends
// (at most 10 minutes), and returns how many were acknowledged.
func writeCounters(ctx context.Context, cc *redis.ClusterClient) int {
	deadline := time.Now().Add(10 * time.Minute)
	n := 0
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if err := cc.Incr(ctx, fmt.Sprint("counter:", n)).Err(); err != nil {
			if ctx.Err() != nil {
				break
			}
			time.Sleep(time.Millisecond)
			continue
		}
		n++
	}
	return n
}

func checkCounters(ctx context.Context, cc *redis.ClusterClient, n int) (int, error) {
	lost := 0
	for i := 0; i < n; i++ {
		v, err := cc.Get(ctx, fmt.Sprint("counter:", i)).Int()
		if err == redis.Nil || v != 1 {
			lost++
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	return lost, nil
}
