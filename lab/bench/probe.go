package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
)

// ServerProbe is what one source or target went through during a move:
// its forks, its own longest stall, and, for a source, the latency of a
// PING sent every ~1 ms, while idle (the second before the move) and
// during the move.
type ServerProbe struct {
	Addr  string `json:"addr"`
	Forks int64  `json:"forks"` // INFO stats total_forks, after the move minus before
	// LatestForkUS is INFO stats latest_fork_usec after the move, when it forked.
	LatestForkUS int64 `json:"latest_fork_usec,omitempty"`
	// StallMS is the longest time the source's main thread spent on one
	// event during the move (a command, a script, a fork, an expiry
	// cycle…), as its latency monitor saw it: whole ms, rounded down, 0
	// when nothing took 1 ms. StallEvent names that event, and for a
	// command the slowest one its slow log kept. A PING's wait also counts
	// waits for a CPU; this does not.
	StallMS    int64  `json:"stall_max_ms"`
	StallEvent string `json:"stall_event,omitempty"`
	// Over2MS and Over5MS count the commands of its slow log that took
	// that long: a few stretched by waits for a CPU, or many too big.
	Over2MS int `json:"commands_over_2ms"`
	Over5MS int `json:"commands_over_5ms"`

	PingsIdle   int     `json:"pings_idle,omitempty"`
	PingsDuring int     `json:"pings_during,omitempty"`
	PingErrors  int     `json:"ping_errors,omitempty"`
	IdleP99MS   float64 `json:"ping_idle_p99_ms,omitempty"`
	P50MS       float64 `json:"ping_p50_ms,omitempty"` // during the move
	P99MS       float64 `json:"ping_p99_ms,omitempty"`
	MaxMS       float64 `json:"ping_max_ms,omitempty"` // the worst stall
}

// Probe bounds.
const (
	pingEvery   = time.Millisecond
	pingIdle    = time.Second // the idle window before the move
	pingTimeout = 30 * time.Second
	maxPings    = 4 << 20 // per source: over an hour at one per ms
)

// probe watches the sources of a run: total_forks before and after, and
// one goroutine per source with one connection of its own that PINGs,
// sleeps ~1 ms and PINGs again, from the idle window to the move's end.
type probe struct {
	srcs    []*pinger
	tgts    []*localcluster.Server
	moving  atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
	forks0  []int64
	latency bool
}

type pinger struct {
	srv          *localcluster.Server
	addr         string
	conn         net.Conn
	br           *bufio.Reader
	idle, during []time.Duration
	errs         int
}

// startProbe reads the sources' fork counts, has the sources' and the
// targets' latency monitors record every event of 1 ms or more, and, with
// latency, starts the
// pingers and lets them run for the idle window before it returns; the
// caller calls resetStalls and moveStarts right before the move and
// finish after it.
func startProbe(ctx context.Context, srvs, targets []*localcluster.Server, latency bool, bound time.Duration) (*probe, error) {
	p := &probe{stop: make(chan struct{}), latency: latency, tgts: targets}
	for _, srv := range append(slices.Clone(srvs), targets...) {
		for _, kv := range [][2]string{{"latency-monitor-threshold", "1"}, {"slowlog-log-slower-than", "1000"}, {"slowlog-max-len", "4096"}} {
			if err := onServer(ctx, srv, "CONFIG", "SET", kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	for _, srv := range srvs {
		n, _, err := forkStats(ctx, srv)
		if err != nil {
			return nil, err
		}
		p.forks0 = append(p.forks0, n)
		p.srcs = append(p.srcs, &pinger{srv: srv, addr: srv.Addr})
	}
	if !latency {
		return p, nil
	}
	deadline := time.Now().Add(pingIdle + bound + time.Minute)
	for _, s := range p.srcs {
		if err := s.dial(); err != nil {
			p.finish(ctx)
			return nil, fmt.Errorf("latency probe of %s: %w", s.addr, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s.loop(p, deadline)
		}()
	}
	select {
	case <-ctx.Done():
		p.finish(ctx)
		return nil, ctx.Err()
	case <-time.After(pingIdle):
	}
	return p, nil
}

// moveStarts sends the following PINGs' latencies to the move's bucket.
func (p *probe) moveStarts() { p.moving.Store(true) }

// resetStalls clears what the sources' and targets' latency monitors and
// slow logs saw before the move.
func (p *probe) resetStalls(ctx context.Context) error {
	srvs := slices.Clone(p.tgts)
	for _, s := range p.srcs {
		srvs = append(srvs, s.srv)
	}
	for _, srv := range srvs {
		if err := onServer(ctx, srv, "LATENCY", "RESET"); err != nil {
			return err
		}
		if err := onServer(ctx, srv, "SLOWLOG", "RESET"); err != nil {
			return err
		}
	}
	return nil
}

// finish stops the pingers (a PING in flight is waited for: a stall at the
// move's end counts), reads the fork counts again and the longest stalls,
// of the sources and of the targets.
func (p *probe) finish(ctx context.Context) (sources, targets []ServerProbe, err error) {
	close(p.stop)
	p.wg.Wait()
	out := make([]ServerProbe, len(p.srcs))
	var firstErr error
	for i, s := range p.srcs {
		if s.conn != nil {
			s.conn.Close()
		}
		sp := ServerProbe{Addr: s.addr, PingErrors: s.errs, PingsIdle: len(s.idle), PingsDuring: len(s.during)}
		sp.IdleP99MS = quantileMS(s.idle, 0.99)
		sp.P50MS = quantileMS(s.during, 0.50)
		sp.P99MS = quantileMS(s.during, 0.99)
		sp.MaxMS = quantileMS(s.during, 1)
		st, err := longestStall(ctx, s.srv)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		sp.StallMS, sp.StallEvent, sp.Over2MS, sp.Over5MS = st.ms, st.event, st.over2, st.over5
		if i < len(p.forks0) {
			n, latest, err := forkStats(ctx, s.srv)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil {
				sp.Forks = n - p.forks0[i]
				if sp.Forks > 0 {
					sp.LatestForkUS = latest
				}
			}
		}
		out[i] = sp
	}
	for _, srv := range p.tgts {
		st, err := longestStall(ctx, srv)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		targets = append(targets, ServerProbe{Addr: srv.Addr, StallMS: st.ms, StallEvent: st.event, Over2MS: st.over2, Over5MS: st.over5})
	}
	return out, targets, firstErr
}

var pingCmd = []byte("*1\r\n$4\r\nPING\r\n")

func (s *pinger) dial() error {
	conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		return err
	}
	s.conn, s.br = conn, bufio.NewReaderSize(conn, 64)
	return nil
}

// loop PINGs until stopped, the deadline or maxPings. A failed PING counts
// as an error and a sample of how long it took, and the connection is
// dialed again.
func (s *pinger) loop(p *probe, deadline time.Time) {
	for n := 0; n < maxPings; n++ {
		select {
		case <-p.stop:
			return
		default:
		}
		if time.Now().After(deadline) {
			return
		}
		moving := p.moving.Load()
		t0 := time.Now()
		err := s.ping(t0)
		d := time.Since(t0)
		if moving {
			s.during = append(s.during, d)
		} else {
			s.idle = append(s.idle, d)
		}
		if err != nil {
			s.errs++
			if s.conn != nil {
				s.conn.Close()
				s.conn = nil
			}
			time.Sleep(10 * time.Millisecond)
			if s.dial() != nil {
				s.conn = nil
			}
			continue
		}
		time.Sleep(pingEvery)
	}
}

func (s *pinger) ping(now time.Time) error {
	if s.conn == nil {
		return fmt.Errorf("not connected")
	}
	if err := s.conn.SetDeadline(now.Add(pingTimeout)); err != nil {
		return err
	}
	if _, err := s.conn.Write(pingCmd); err != nil {
		return err
	}
	line, err := s.br.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// quantileMS is the q-quantile (nearest rank) of ds in ms; 0 for none.
func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(float64(len(s))*q+0.999999) - 1
	k = min(max(k, 0), len(s)-1)
	return ms(s[k])
}

// forkStats reads a server's total_forks and latest_fork_usec.
func forkStats(ctx context.Context, s *localcluster.Server) (total, latestUS int64, err error) {
	addr := s.Addr
	c := s.Client()
	defer c.Close()
	st, err := info.Read(ctx, c, "stats")
	if err != nil {
		return 0, 0, fmt.Errorf("INFO stats on %s: %w", addr, err)
	}
	total, err = strconv.ParseInt(st["total_forks"], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("INFO stats on %s: total_forks %q", addr, st["total_forks"])
	}
	latestUS, _ = strconv.ParseInt(st["latest_fork_usec"], 10, 64)
	return total, latestUS, nil
}

// onServer runs one command on a server, on a connection of its own.
func onServer(ctx context.Context, s *localcluster.Server, args ...any) error {
	c := s.Client()
	defer c.Close()
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("%v on %s: %w", args, s.Addr, err)
	}
	return nil
}

// stall is what a server's latency monitor and slow log saw.
type stall struct {
	ms           int64
	event        string
	over2, over5 int
}

// longestStall reads a server's LATENCY LATEST: the largest of its events'
// maxima since the last LATENCY RESET, and that event's name, with the
// slowest command of its slow log when the event is a command; and how
// many commands of the slow log took 2 and 5 ms or more.
func longestStall(ctx context.Context, s *localcluster.Server) (st stall, err error) {
	c := s.Client()
	defer c.Close()
	events, err := c.Do(ctx, "LATENCY", "LATEST").Slice()
	if err != nil {
		return st, fmt.Errorf("LATENCY LATEST on %s: %w", s.Addr, err)
	}
	for _, e := range events {
		// name, time of the latest, latest ms, max ms
		f, _ := e.([]any)
		if len(f) < 4 {
			return st, fmt.Errorf("LATENCY LATEST on %s: event %v", s.Addr, e)
		}
		name, _ := f[0].(string)
		if top, _ := f[3].(int64); top > st.ms {
			st.ms, st.event = top, name
		}
	}
	logged, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return st, fmt.Errorf("SLOWLOG GET on %s: %w", s.Addr, err)
	}
	var slowest redis.SlowLog
	for _, l := range logged {
		if l.Duration > slowest.Duration && len(l.Args) > 0 {
			slowest = l
		}
		if l.Duration >= 2*time.Millisecond {
			st.over2++
		}
		if l.Duration >= 5*time.Millisecond {
			st.over5++
		}
	}
	if (st.event == "command" || st.event == "fast-command") && len(slowest.Args) > 0 {
		st.event += " (" + strings.ToUpper(slowest.Args[0]) + ")"
	}
	return st, nil
}
