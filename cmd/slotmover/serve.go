package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotmover/slotmover/admin"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/config"
	"github.com/slotmover/slotmover/metrics"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
)

// shutdownGrace bounds how long SIGTERM waits for tasks to roll back or
// finish their cutover before what is left is stopped (a cleanup under way
// ends stuck; the next start repairs it from its record, or slotmover fix).
const shutdownGrace = 2 * time.Minute

// serveCmd runs the sidecar: imports into the local master, driven from
// the admin port and NATS, until SIGTERM or SIGINT.
func serveCmd(args []string) int {
	c, err := config.Load(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover serve:", err)
		return exitRefused
	}
	log, err := c.Log.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover serve:", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, c, log, nil); err != nil {
		log.Error("slotmover serve: " + err.Error())
		return exitRefused
	}
	return 0
}

// serve runs the sidecar until ctx ends. ready, if not nil, is called
// with the admin and metrics ports' addresses once they serve.
func serve(ctx context.Context, c *config.Serve, log *slog.Logger, ready func(admin, metrics string)) error {
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
	adminLn, err := net.Listen("tcp", c.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin port: %w", err)
	}
	var metricsLn net.Listener
	if c.Metrics.Listen != "" {
		if metricsLn, err = net.Listen("tcp", c.Metrics.Listen); err != nil {
			adminLn.Close()
			return fmt.Errorf("metrics port: %w", err)
		}
	}

	var bus atomic.Pointer[natsapi.Server]
	var m *sidecar.Local
	mets := metrics.New(func() []sidecar.Task { ts, _ := m.Status(""); return ts }, func() int64 {
		if b := bus.Load(); b != nil {
			return b.Lost()
		}
		return 0
	})
	m = sidecar.New(sidecar.Config{
		Node: node, MaxTasks: c.Tasks.Max, Move: c.Move.Options(mover.Options{}), Logger: log,
		OnChange: func(t sidecar.Task) {
			if b := bus.Load(); b != nil {
				b.Publish(t)
			}
			mets.Observe(t)
		},
	})

	var nc *nats.Conn
	if len(c.NATS.Servers) > 0 {
		if nc, err = connectNATS(c.NATS, "slotmover sidecar", log); err != nil {
			adminLn.Close()
			if metricsLn != nil {
				metricsLn.Close()
			}
			return fmt.Errorf("%w (start without --nats to serve the admin port alone)", err)
		}
		defer nc.Drain()
		b := natsapi.New(ctx, nc, natsapi.Config{Prefix: c.NATS.SubjectPrefix, NodeID: top.Myself.ID, Alias: c.NATS.Alias, Addr: node.Addr, Logger: log})
		defer b.Close()
		bus.Store(b)
		// Tasks an earlier run left unfinished are repaired before any
		// request is taken: a new import's connections would make fix
		// refuse.
		recs, err := b.Records(ctx)
		if err != nil {
			log.Warn("task records not read; interrupted tasks are not repaired (run slotmover fix)", "error", err)
		}
		// A record from the bucket drives fix: only this node's sound
		// ones are acted on.
		for _, rec := range m.Recover(ctx, sidecar.Usable(recs, top.Myself.ID, log)) {
			b.Publish(rec)
			mets.Observe(rec)
		}
		if err := b.Serve(m); err != nil {
			adminLn.Close()
			if metricsLn != nil {
				metricsLn.Close()
			}
			return err
		}
	}

	var wg sync.WaitGroup
	var metricsSrv *http.Server
	if metricsLn != nil {
		metricsSrv = &http.Server{Handler: mets.Handler(func(ctx context.Context) error { return client.Ping(ctx).Err() }), ReadHeaderTimeout: 10 * time.Second}
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
	adm := admin.New(admin.Config{Password: c.Admin.Password, TLS: adminTLS}, m, log)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := adm.Serve(adminCtx, adminLn); err != nil {
			log.Error("admin port", "error", err)
		}
	}()
	log.Info("serving", "node", node.Addr, "node_id", top.Myself.ID, "admin", adminLn.Addr().String(), "admin_tls", adminTLS != nil,
		"metrics", c.Metrics.Listen, "nats", natsServers(c.NATS.Servers), "max_tasks", c.Tasks.Max)
	if ready != nil {
		metricsAddr := ""
		if metricsLn != nil {
			metricsAddr = metricsLn.Addr().String()
		}
		ready(adminLn.Addr().String(), metricsAddr)
	}

	<-ctx.Done()
	log.Info("stopping: no new tasks; copies roll back, cutovers finish")
	gctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
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

// connectNATS connects with the configured credentials and TLS. The client
// reconnects by itself for ever once connected; unreachable at the start
// is an error (the sidecar does not start: nothing was changed).
func connectNATS(n config.NATS, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected; reconnecting", "error", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", config.RedactURL(c.ConnectedUrl())) }),
	}
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("NATS nkey: %w", err)
		}
		opts = append(opts, o)
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	tlsConf, err := n.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	if tlsConf != nil {
		opts = append(opts, nats.Secure(tlsConf))
	}
	nc, err := nats.Connect(strings.Join(n.Servers, ","), opts...)
	if err != nil {
		// A URL nats.go could not parse is quoted whole in its error.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			uerr.URL = config.RedactURL(uerr.URL)
		}
		return nil, fmt.Errorf("NATS %s unreachable: %w", natsServers(n.Servers), err)
	}
	return nc, nil
}

// natsServers lists the servers for a log or an error: a URL's
// credentials (user:password@, token@) are hidden.
func natsServers(servers []string) string {
	shown := make([]string, len(servers))
	for i, s := range servers {
		shown[i] = config.RedactURL(s)
	}
	return strings.Join(shown, ",")
}
