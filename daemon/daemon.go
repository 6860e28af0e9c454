// Package daemon is the sidecar: the local master's imports (sidecar),
// driven from the admin port (admin) and NATS (natsapi), with their
// records in the state directory, /metrics, and a shutdown that lets
// cutovers finish.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotmover/slotmover/admin"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/metrics"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
)

// ShutdownGrace bounds how long the end of Serve's context waits for tasks
// to roll back or finish their cutover before what is left is stopped (a
// cleanup under way ends stuck; the next start repairs it from its record,
// or slotmover fix).
const ShutdownGrace = 2 * time.Minute

// Options are what Serve takes beside the configuration.
type Options struct {
	Version string // shown on /metrics, by the admin port's INFO and on NATS
	// Ready, if not nil, is called with the admin and metrics ports'
	// addresses once they serve.
	Ready func(admin, metrics string)
}

// Serve runs the sidecar of c.Node until ctx ends.
func Serve(ctx context.Context, c *config.Serve, log *slog.Logger, o Options) error {
	node, err := c.Node.Conn()
	if err != nil {
		return err
	}
	client := node.Client()
	top, err := cluster.Load(ctx, client)
	if err != nil {
		client.Close()
		return fmt.Errorf("the local master %s: %w", node.Addr, err)
	}
	if !top.Myself.Master() {
		client.Close()
		return fmt.Errorf("%s is not a master", node.Addr)
	}
	defer client.Close()
	adminTLS, err := c.Admin.TLS.Config()
	if err != nil {
		return fmt.Errorf("admin.tls: %w", err)
	}

	// Listen before anything starts: a port in use refuses the start.
	// Closing a listener twice is harmless: the servers close them too.
	adminLn, err := net.Listen("tcp", c.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin port: %w", err)
	}
	defer adminLn.Close()
	var metricsLn net.Listener
	if c.Metrics.Listen != "" {
		if metricsLn, err = net.Listen("tcp", c.Metrics.Listen); err != nil {
			return fmt.Errorf("metrics port: %w", err)
		}
		defer metricsLn.Close()
	}

	// The state directory's lock and records come first: they refuse a
	// second sidecar sharing it, and repair what the last run left even
	// without NATS.
	stateDir, err := c.State.DirOrDefault(os.Getenv)
	if err == nil {
		stateDir, err = filepath.Abs(stateDir)
	}
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	me := natsapi.Holder{Host: host, PID: os.Getpid(), Admin: adminLn.Addr().String(), StateDir: stateDir, Since: time.Now()}
	journal, err := sidecar.OpenJournal(stateDir, top.Myself.ID, me.String())
	if err != nil {
		return err
	}
	defer journal.Close()

	var bus atomic.Pointer[natsapi.Server]
	var m *sidecar.Local
	var nc *nats.Conn
	natsUp := func() bool { return nc != nil && nc.IsConnected() }
	version := o.Version
	src := metrics.Sources{Tasks: func() []sidecar.Task { ts, _ := m.Status(""); return ts }, Version: version}
	if len(c.NATS.Servers) > 0 {
		src.NATSLost = func() int64 {
			if b := bus.Load(); b != nil {
				return b.Lost()
			}
			return 0
		}
		src.NATSConnected = natsUp
	}
	mets := metrics.New(src)
	m = sidecar.New(sidecar.Config{
		Node: node, MaxTasks: c.Tasks.Max, Move: c.Move.Options(mover.Options{}), Logger: log,
		OnChange: func(t sidecar.Task) {
			if err := journal.Keep(t); err != nil {
				log.Error("task record not saved in the state directory", "task", t.ID, "error", err)
			}
			if b := bus.Load(); b != nil {
				b.Publish(t)
			}
			mets.Observe(t)
		},
	})

	var wg sync.WaitGroup
	recs := journal.Records()
	var link atomic.Pointer[natsLink]
	attachTo := func(ctx context.Context) (*natsLink, error) {
		return attachNATS(ctx, nc, natsapi.Config{Prefix: c.NATS.SubjectPrefix, NodeID: top.Myself.ID, Alias: c.NATS.Alias, Addr: node.Addr, Version: version, Logger: log}, me)
	}
	if len(c.NATS.Servers) > 0 {
		nc, err = natsapi.Connect(c.NATS, "slotmover sidecar", log)
		if natsapi.Unreachable(err) {
			log.Warn("NATS unreachable: repairing from the state directory alone and serving the admin port; NATS is taken up once it answers",
				"nats", natsapi.ServerList(c.NATS.Servers), "error", err)
			nc, err = natsapi.Connect(c.NATS, "slotmover sidecar", log, nats.RetryOnFailedConnect(true))
		}
		if err != nil {
			return err
		}
		defer func() {
			if nc.Drain() != nil {
				nc.Close()
			}
		}()
		// Before the drain (defers run last first): unsubscribe, release.
		defer func() {
			if a := link.Load(); a != nil {
				a.close()
			}
		}()
		if nc.IsConnected() {
			a, err := attachTo(ctx)
			if err != nil {
				return err
			}
			link.Store(a)
			bus.Store(a.bus)
			// The bucket's records of tasks the state directory lacks
			// (it is new, or was lost): the local ones are as fresh.
			fromBucket, err := a.bus.Records(ctx)
			if err != nil {
				log.Warn("task records not read from NATS; those the state directory lacks are not repaired (run slotmover fix)", "error", err)
			}
			recs = merge(recs, fromBucket)
		}
	}
	// Tasks an earlier run left unfinished are repaired before any request
	// is taken: a new import's connections would make fix refuse. A record
	// drives fix: only this node's sound ones are acted on.
	for _, rec := range m.Recover(ctx, sidecar.Usable(recs, top.Myself.ID, log)) {
		if err := journal.Keep(rec); err != nil {
			log.Error("task record not saved in the state directory", "task", rec.ID, "error", err)
		}
		if b := bus.Load(); b != nil {
			b.Publish(rec)
		}
		mets.Observe(rec)
	}
	if a := link.Load(); a != nil {
		if err := a.bus.Serve(m); err != nil {
			return err
		}
	}
	if nc != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keepNATS(ctx, nc, &link, &bus, attachTo, m, journal, log)
		}()
	}

	var stopping atomic.Bool // read by /readyz
	var metricsSrv *http.Server
	if metricsLn != nil {
		ready := func(ctx context.Context) error {
			var errs []error
			if stopping.Load() {
				errs = append(errs, errors.New("shutting down"))
			}
			if err := client.Ping(ctx).Err(); err != nil {
				errs = append(errs, fmt.Errorf("the local master %s: %w", node.Addr, err))
			}
			switch {
			case nc == nil:
			case !natsUp():
				errs = append(errs, fmt.Errorf("NATS %s: not connected", natsapi.ServerList(c.NATS.Servers)))
			case bus.Load() == nil:
				errs = append(errs, errors.New("NATS: connected, not answering (not taken up yet, or another sidecar serves this node)"))
			}
			return errors.Join(errs...)
		}
		metricsSrv = &http.Server{Handler: mets.Handler(ready, c.Metrics.Pprof), ReadHeaderTimeout: 10 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "error", err)
			}
		}()
	}
	adminCtx, stopAdmin := context.WithCancel(context.Background())
	defer stopAdmin()
	adm := admin.New(admin.Config{Password: c.Admin.Password, TLS: adminTLS, Version: version}, m, log)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := adm.Serve(adminCtx, adminLn); err != nil {
			log.Error("admin port", "error", err)
		}
	}()
	metricsAddr := "" // the port taken, also when asked for :0
	if metricsLn != nil {
		metricsAddr = metricsLn.Addr().String()
	}
	log.Info("serving", "node", node.Addr, "node_id", top.Myself.ID, "admin", adminLn.Addr().String(), "admin_tls", adminTLS != nil,
		"metrics", metricsAddr, "pprof", metricsLn != nil && c.Metrics.Pprof, "nats", natsapi.ServerList(c.NATS.Servers), "max_tasks", c.Tasks.Max)
	if o.Ready != nil {
		o.Ready(adminLn.Addr().String(), metricsAddr)
	}

	<-ctx.Done()
	stopping.Store(true)
	log.Info("stopping: no new tasks; copies roll back, cutovers finish")
	gctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	m.Close(gctx)
	cancel()
	stopAdmin()
	if metricsSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		metricsSrv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	log.Info("stopped")
	return nil
}

// natsLink is the sidecar on NATS: its claim on the node (nil without
// JetStream) and its server.
type natsLink struct {
	claim *natsapi.Claim
	bus   *natsapi.Server
}

func (l *natsLink) close() {
	l.bus.Close()
	if l.claim != nil {
		l.claim.Release()
	}
}

// attachNATS claims the node on nc (natsapi.ErrClaimed if another live
// sidecar serves it) and opens the task bucket; nothing is served yet.
func attachNATS(ctx context.Context, nc *nats.Conn, cfg natsapi.Config, me natsapi.Holder) (*natsLink, error) {
	claim, err := natsapi.ClaimNode(ctx, nc, natsapi.ClaimConfig{NodeID: cfg.NodeID, Holder: me, Logger: cfg.Logger})
	if errors.Is(err, natsapi.ErrNoClaimStore) {
		cfg.Logger.Warn("a second sidecar for this node is noticed only if it shares the state directory", "error", err)
	} else if err != nil {
		return nil, err
	}
	return &natsLink{claim: claim, bus: natsapi.New(ctx, nc, cfg)}, nil
}

// keepNATS takes NATS up once it answers, if the sidecar started without
// it, and stops answering on NATS if another sidecar takes the node over
// (a claim that lapsed during an outage), until ctx ends.
func keepNATS(ctx context.Context, nc *nats.Conn, link *atomic.Pointer[natsLink], bus *atomic.Pointer[natsapi.Server],
	attach func(context.Context) (*natsLink, error), m *sidecar.Local, journal *sidecar.Journal, log *slog.Logger) {
	a := link.Load()
	if a == nil {
		for !nc.IsConnected() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
		var err error
		if a, err = attach(ctx); err != nil {
			log.Error("NATS not taken up: the sidecar serves its admin port alone", "error", err)
			return
		}
		// The bucket learns how the tasks of the outage ended: no later
		// change of theirs will put them. Their events are not replayed.
		for _, t := range journal.Records() {
			if t.Over() {
				a.bus.Keep(t)
			}
		}
		if err := a.bus.Serve(m); err != nil {
			a.close()
			log.Error("NATS not taken up: the sidecar serves its admin port alone", "error", err)
			return
		}
		link.Store(a)
		bus.Store(a.bus)
		log.Info("NATS taken up", "nats", config.RedactURL(nc.ConnectedUrl()))
	}
	if a.claim == nil {
		return
	}
	select {
	case <-ctx.Done():
	case <-a.claim.Lost():
		bus.Store(nil)
		a.bus.Close()
		log.Error("another sidecar serves this node now: this one no longer answers on NATS (stop one of them)")
	}
}

// merge adds to local the records of other whose task it lacks.
func merge(local, other []sidecar.Task) []sidecar.Task {
	known := map[string]bool{}
	for _, t := range local {
		known[t.ID] = true
	}
	for _, t := range other {
		if !known[t.ID] {
			local = append(local, t)
		}
	}
	return local
}
