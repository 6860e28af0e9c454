package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/lab/writecheck"
)

// Counters is how many counters the background load increments; their
// slots spread over the whole slot range.
const Counters = 1024

// CounterName is the name of the i-th counter of the background load.
func CounterName(i int) string { return "bench:ctr:" + strconv.Itoa(i) }

// Redirects counts redirection errors by kind.
type Redirects struct {
	Moved    int64 `json:"moved"`
	Ask      int64 `json:"ask"`
	TryAgain int64 `json:"tryagain"`
}

// Total is the sum of the kinds.
func (r Redirects) Total() int64 { return r.Moved + r.Ask + r.TryAgain }

func (r Redirects) sub(o Redirects) Redirects {
	return Redirects{r.Moved - o.Moved, r.Ask - o.Ask, r.TryAgain - o.TryAgain}
}

// serverRedirects sums INFO errorstats of every node: the redirects the
// servers replied, to any client.
func serverRedirects(ctx context.Context, c *localcluster.Cluster) (Redirects, error) {
	st, err := c.ErrorStats(ctx)
	if err != nil {
		return Redirects{}, err
	}
	return Redirects{Moved: st["MOVED"], Ask: st["ASK"], TryAgain: st["TRYAGAIN"]}, nil
}

// load increments counters over all slots at a steady rate through a
// cluster client, and remembers what each counter must hold afterwards.
type load struct {
	cc    *redis.ClusterClient
	tally *writecheck.Tally
	errs  atomic.Int64
	seen  *localcluster.Redirects // replies seen by the node clients

	// The round trips of the INCRs, per worker, before and after markDuring.
	moving     atomic.Bool
	rtt        [][2][]time.Duration
	duringOps  atomic.Int64
	duringAt   time.Time
	finishedAt time.Time

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// newLoad builds the client, its redirects counted (go-redis follows MOVED
// and ASK inside the cluster client).
func newLoad(c *localcluster.Cluster) *load {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	l := &load{tally: writecheck.NewTally(Counters, CounterName)}
	l.cc = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        addrs,
		MaxRedirects: 16, // a reshard can bounce a key between ASK and MOVED more than the default 3 times
		ReadTimeout:  10 * time.Second,
	})
	l.seen = localcluster.CountRedirects(l.cc)
	return l
}

// prime creates every counter at 0, so that the moves carry a fixed set of keys.
func (l *load) prime(ctx context.Context) error {
	p := l.cc.Pipeline()
	for i := 0; i < Counters; i++ {
		p.Set(ctx, CounterName(i), 0, 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("create counters: %w", err)
	}
	return nil
}

// start sends rate INCRs per second from a few goroutines (a write held by
// a pause must not stop the others), for at most maxFor and maxFor×rate ops.
func (l *load) start(rate int, maxFor time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), maxFor)
	l.stop = cancel
	workers := min(max(rate/500, 1), 16)
	interval := time.Duration(float64(time.Second) * float64(workers) / float64(rate))
	budget := int64(maxFor.Seconds()*float64(rate))/int64(workers) + 1
	l.rtt = make([][2][]time.Duration, workers)
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			next := time.Now().Add(interval * time.Duration(w) / time.Duration(workers))
			c := w
			for n := int64(0); n < budget && ctx.Err() == nil; n++ {
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				} else if d < -100*time.Millisecond {
					next = time.Now() // after a long stall, go on at the rate instead of bursting
				}
				next = next.Add(interval)
				l.incr(ctx, c, &l.rtt[w])
				c = (c + workers) % Counters
			}
		}()
	}
}

func (l *load) incr(ctx context.Context, c int, rtt *[2][]time.Duration) {
	moving := l.moving.Load()
	t0 := time.Now()
	err := l.cc.Incr(ctx, CounterName(c)).Err()
	phase := 0
	if moving {
		phase = 1
	}
	rtt[phase] = append(rtt[phase], time.Since(t0))
	l.tally.Note(c, err)
	if err == nil {
		if moving {
			l.duringOps.Add(1)
		}
		return
	}
	if ctx.Err() == nil {
		l.errs.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// markDuring sends the following round trips to the move's bucket.
func (l *load) markDuring() {
	l.duringAt = time.Now()
	l.moving.Store(true)
}

// ClientLatency is what the writer saw of its INCRs: round trips while the
// cluster was idle (before the move) and during the move, and how many
// it got acknowledged per second during the move.
type ClientLatency struct {
	Idle      int     `json:"ops_idle"`
	IdleP50MS float64 `json:"idle_p50_ms"`
	IdleP99MS float64 `json:"idle_p99_ms"`
	IdleMaxMS float64 `json:"idle_max_ms"`
	During    int     `json:"ops_during"`
	P50MS     float64 `json:"p50_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
	OpsPerSec float64 `json:"ops_per_sec"`
}

// latency summarizes the round trips; call it after finish.
func (l *load) latency() ClientLatency {
	var idle, during []time.Duration
	for _, w := range l.rtt {
		idle, during = append(idle, w[0]...), append(during, w[1]...)
	}
	cl := ClientLatency{
		Idle: len(idle), IdleP50MS: quantileMS(idle, 0.5), IdleP99MS: quantileMS(idle, 0.99), IdleMaxMS: quantileMS(idle, 1),
		During: len(during), P50MS: quantileMS(during, 0.5), P99MS: quantileMS(during, 0.99), MaxMS: quantileMS(during, 1),
	}
	if !l.duringAt.IsZero() {
		if secs := l.finishedAt.Sub(l.duringAt).Seconds(); secs > 0 {
			cl.OpsPerSec = float64(l.duringOps.Load()) / secs
		}
	}
	return cl
}

// finish stops the load and waits for its goroutines.
func (l *load) finish() {
	if l.stop != nil {
		l.stop()
	}
	l.wg.Wait()
	l.finishedAt = time.Now()
}

// check reads every counter and returns the acknowledged increments, those
// missing, and the increments that were never sent.
func (l *load) check(ctx context.Context) (ops, lost, extra int64, err error) {
	v, err := l.tally.Check(ctx, l.cc)
	return v.Acked, v.Lost, v.Extra, err
}

func (l *load) redirects() Redirects {
	n := l.seen.Counts()
	return Redirects{Moved: n["MOVED"], Ask: n["ASK"], TryAgain: n["TRYAGAIN"]}
}

func (l *load) close() { l.cc.Close() }
