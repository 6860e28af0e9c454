package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
)

// unknownOutcome is an error after which a command may or may not have
// run: it was (perhaps) sent, and no reply came. It deliberately does not
// unwrap, so that go-redis does not resend a write that may have applied:
// the model then treats it as uncertain instead of seeing it twice.
type unknownOutcome struct{ err error }

func (e *unknownOutcome) Error() string { return e.err.Error() }

// redirectKinds are the cluster redirections and refusals worth counting.
var redirectKinds = []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"}

// redirects counts, on the client side, the error replies of every node
// client inside the cluster client, including those go-redis follows
// without telling the caller.
type redirects struct {
	n [4]atomic.Int64 // indexed like redirectKinds
}

func (r *redirects) count(err error) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return
	}
	msg := re.Error()
	for i, k := range redirectKinds {
		if strings.HasPrefix(msg, k+" ") || msg == k {
			r.n[i].Add(1)
		}
	}
}

func (r *redirects) snapshot() map[string]int64 {
	out := map[string]int64{}
	for i, k := range redirectKinds {
		out[k] = r.n[i].Load()
	}
	return out
}

// nodeHook sits on each node client of the cluster client.
type nodeHook struct{ r *redirects }

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.r.count(err)
		return atMostOnce(err)
	}
}

// ProcessPipelineHook counts; MULTI/EXEC in go-redis is resent only when
// writing it failed, and its MOVED replies to queued commands are handled
// inside, so some of those redirections are not seen here.
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.r.count(c.Err())
		}
		return err
	}
}

// atMostOnce turns an error that leaves the outcome unknown into one go-redis
// will not retry. Server replies (including MOVED/ASK, which go-redis must
// follow), failed dials and pool timeouts (nothing was sent) pass through.
func atMostOnce(err error) error {
	var re redis.Error
	var op *net.OpError
	switch {
	case err == nil, errors.As(err, &re):
		return err
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, redis.ErrPoolTimeout):
		return err
	}
	return &unknownOutcome{err: err}
}

// serverError returns the error reply of a server, or "" for another error.
func serverError(err error) string {
	var re redis.Error
	if errors.As(err, &re) {
		return re.Error()
	}
	return ""
}

// errKind names an error for the report: the reply's first word, or the
// transport fault.
func errKind(err error) string {
	if msg := serverError(err); msg != "" {
		word, _, _ := strings.Cut(msg, " ")
		return word
	}
	var uo *unknownOutcome
	if errors.As(err, &uo) {
		err = uo.err
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, redis.ErrClosed):
		return "closed"
	case strings.Contains(err.Error(), "connection refused"):
		return "refused"
	case strings.Contains(err.Error(), "connection reset"):
		return "reset"
	}
	return "network"
}

// newClusterClient builds the workload's client: RESP2 (replies have the
// same shapes through Do, MULTI and EVAL), no CLIENT SETINFO (Redis 7.0
// answers it with an error that would muddy the server's error stats), a
// read timeout well over a cutover's pause budget, and the hook above on
// every node client.
func newClusterClient(cfg *Config, r *redirects) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:           []string{cfg.Addr},
		Username:        cfg.Username,
		Password:        cfg.Password,
		Protocol:        2,
		DisableIdentity: true,
		ReadTimeout:     cfg.OpTimeout,
		WriteTimeout:    cfg.OpTimeout,
		PoolSize:        cfg.Workers + 2, // one command in flight per worker, plus room for go-redis itself
	})
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(nodeHook{r: r}) })
	return cc
}

// nodeClient is a short-lived client for one node (topology, INFO).
func nodeClient(cfg *Config, addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Username: cfg.Username, Password: cfg.Password,
		Protocol: 2, DisableIdentity: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
	})
}

// discovery finds the cluster's topology from any node it has heard of, so
// that it keeps working when the seed node turns into a replica.
type discovery struct {
	cfg   *Config
	known []string
}

func newDiscovery(cfg *Config) *discovery {
	return &discovery{cfg: cfg, known: []string{cfg.Addr}}
}

// load returns the view of the first reachable master, or of a replica
// when no master answers.
func (d *discovery) load(ctx context.Context) (*cluster.Topology, error) {
	var fallback *cluster.Topology
	var errs []error
	for _, addr := range d.known {
		c := nodeClient(d.cfg, addr)
		top, err := cluster.Load(ctx, c)
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.learn(top)
		if top.Myself.Is("master") {
			return top, nil
		}
		if fallback == nil {
			fallback = top
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, fmt.Errorf("no node of the cluster answered CLUSTER NODES: %w", errors.Join(errs...))
}

func (d *discovery) learn(top *cluster.Topology) {
	for _, n := range top.Nodes {
		if n.Addr == "" || strings.HasPrefix(n.Addr, ":") {
			continue
		}
		seen := false
		for _, a := range d.known {
			seen = seen || a == n.Addr
		}
		if !seen {
			d.known = append(d.known, n.Addr)
		}
	}
}

// usableMasters returns the masters a move may involve: connected, not
// failing, not in handshake.
func usableMasters(top *cluster.Topology) []*cluster.Node {
	var out []*cluster.Node
	for _, n := range top.Masters() {
		if n.Connected && !n.Is("fail?") && !n.Is("handshake") && !n.Is("noaddr") {
			out = append(out, n)
		}
	}
	return out
}

// errorStats reads INFO errorstats from each node: addr → error prefix → count.
// A node that does not answer is left out and named in the error.
func errorStats(ctx context.Context, cfg *Config, addrs []string) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	var errs []error
	for _, addr := range addrs {
		c := nodeClient(cfg, addr)
		f, err := info.Read(ctx, c, "errorstats")
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[addr] = f.ErrorStats()
	}
	return out, errors.Join(errs...)
}
