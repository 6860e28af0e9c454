// Package admin is the sidecar's admin port: a RESP server that answers the
// words of Redis 8.4's atomic slot migration (CLUSTER MIGRATION IMPORT,
// STATUS, CANCEL) by driving a sidecar.Manager, so that an operator's script
// runs unchanged against slotmover's sidecar and against an 8.4 server. It
// also answers what redis-cli and go-redis send when they connect (HELLO,
// AUTH, CLIENT SETNAME/SETINFO, COMMAND DOCS), PING, ECHO, INFO and QUIT,
// with Redis's error wording for unknown commands, wrong arity and missing
// authentication. As Redis, it closes unanswered a connection that sends an
// HTTP request (a command named POST or Host:). It serves TLS only when
// Config.TLS is set.
//
// The server speaks RESP2 only: HELLO 3 is refused with -NOPROTO, which
// clients (go-redis, redis-cli -3) take as "stay on RESP2".
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/slotmover/slotmover/sidecar"
)

// DefaultRequestTimeout bounds a Manager.Import call when
// Config.RequestTimeout is zero.
const DefaultRequestTimeout = 30 * time.Second

// Config says how the admin port behaves.
type Config struct {
	// Password, when set, is required as Redis's requirepass is: before a
	// successful AUTH (or HELLO … AUTH) every command but AUTH, HELLO and
	// QUIT is answered -NOAUTH. Empty: no authentication.
	Password string
	// Username is a user name accepted by AUTH <user> <pass> and HELLO …
	// AUTH <user> <pass> besides "default" (which AUTH <pass> means). All
	// accepted names share Password.
	Username string
	// RequestTimeout bounds the context given to Manager.Import (the call,
	// not the tasks it starts). Zero means DefaultRequestTimeout; negative,
	// no bound other than the server's own context.
	RequestTimeout time.Duration
	// Version is reported by HELLO and INFO ("dev" when empty).
	Version string
	// TLS, when set, makes the port speak TLS only: Serve wraps its
	// listener, and a client that does not start with a TLS handshake
	// fails it and is closed, unanswered. Set ClientAuth and ClientCAs to
	// require client certificates.
	TLS *tls.Config
}

// Server is the admin port. Create it with New and run it with Serve.
// Its handlers call the Manager from one goroutine per connection, so the
// Manager must be safe for concurrent use.
type Server struct {
	cfg     Config
	m       sidecar.Manager
	log     *slog.Logger
	started time.Time

	serving atomic.Bool
	ctx     context.Context // Serve's context; the base of every Manager call's

	conns    sync.WaitGroup // one per accepted connection, done when its goroutine ends
	nclients atomic.Int64
	nextID   atomic.Int64
	port     int

	acceptBackoff time.Duration // touched only on redcon's accept loop
}

// New returns a server that drives m. A nil logger discards the logs.
func New(cfg Config, m sidecar.Manager, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	return &Server{cfg: cfg, m: m, log: logger, started: time.Now(), ctx: context.Background()}
}

// session is one connection's state.
type session struct {
	id      int64
	addr    string
	laddr   string
	authed  bool
	name    string
	libName string
	libVer  string
	closing bool // QUIT was answered: later pipelined commands are not run
}

// Serve answers connections accepted on ln until ctx ends; then it closes
// ln and every connection, waits until each connection's goroutine has
// returned (a handler inside a Manager call finishes that call first:
// Import's context ends with ctx, Status and Cancel take none) and returns
// nil. If ln fails first, Serve closes the connections, waits likewise and
// returns an error. Serve may be called once per Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if !s.serving.CompareAndSwap(false, true) {
		return errors.New("admin: Serve called twice")
	}
	s.ctx = ctx
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		s.port = a.Port
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	rs := redcon.NewServer(ln.Addr().String(), s.handle, s.accept, s.closed)
	rs.AcceptError = func(err error) {
		// Called in the accept loop, which retries at once: a listener
		// whose Accept keeps failing (out of file descriptors) is waited
		// on, as net/http does, and a closed one ends the loop.
		if ctx.Err() != nil {
			rs.Close()
			return
		}
		b := &s.acceptBackoff
		if *b == 0 {
			*b = 5 * time.Millisecond
		} else if *b *= 2; *b > time.Second {
			*b = time.Second
		}
		s.log.Warn("admin: accept failed", "err", err, "retry_in", *b)
		time.Sleep(*b)
	}
	done := make(chan error, 1)
	go func() { done <- rs.Serve(ln) }()
	s.log.Info("admin: serving", "addr", ln.Addr().String(), "auth", s.cfg.Password != "", "tls", s.cfg.TLS != nil)

	var err error
	select {
	case <-ctx.Done():
		// rs.Close sets the server's done flag; if rs.Serve has not yet
		// taken ln, closing ln makes its first Accept end the loop.
		rs.Close()
		ln.Close()
		<-done
	case err = <-done:
		if err == nil {
			err = errors.New("admin: listener closed")
		}
		err = fmt.Errorf("admin: serve %s: %w", ln.Addr(), err)
	}
	// redcon's accept loop has returned, so no connection is added any
	// more, and it closed those it had: wait for their goroutines.
	s.conns.Wait()
	s.log.Info("admin: stopped", "addr", ln.Addr().String())
	return err
}

func (s *Server) accept(c redcon.Conn) bool {
	s.acceptBackoff = 0
	s.conns.Add(1)
	s.nclients.Add(1)
	sess := &session{id: s.nextID.Add(1), addr: c.RemoteAddr()}
	if nc := c.NetConn(); nc != nil {
		sess.laddr = nc.LocalAddr().String()
	}
	c.SetContext(sess)
	s.log.Debug("admin: connection", "id", sess.id, "addr", sess.addr)
	return true
}

func (s *Server) closed(c redcon.Conn, err error) {
	defer s.conns.Done()
	s.nclients.Add(-1)
	if sess, ok := c.Context().(*session); ok {
		s.log.Debug("admin: connection closed", "id", sess.id, "addr", sess.addr, "err", err)
	}
}

// handle runs one command. A panic in a handler (or in the Manager) is
// answered as an error on that connection and logged, not the process's end.
func (s *Server) handle(c redcon.Conn, cmd redcon.Command) {
	sess, _ := c.Context().(*session)
	if sess == nil || sess.closing || len(cmd.Args) == 0 {
		return
	}
	if crossProtocol(cmd.Args[0]) {
		s.refuseHTTP(c, sess, cmd.Args[0])
		return
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("admin: handler panicked", "id", sess.id, "command", string(cmd.Args[0]), "panic", p, "stack", string(debug.Stack()))
			c.WriteError(fmt.Sprintf("ERR internal error: %v", p))
		}
	}()
	s.dispatch(c, sess, cmd.Args)
}

// crossProtocol says whether a command's name is one no RESP client sends
// but every HTTP request does: the method POST, or the header Host:. A web
// page can make a browser send such a request to this port, and the inline
// protocol would read its lines, body included, as commands.
func crossProtocol(name []byte) bool {
	return strings.EqualFold(string(name), "post") || strings.EqualFold(string(name), "host:")
}

// refuseHTTP does what Redis's securityWarningCommand does: it closes the
// connection at once, unanswered (replies not yet sent are dropped too),
// and the commands read after this one, in the same read, are not run.
func (s *Server) refuseHTTP(c redcon.Conn, sess *session, name []byte) {
	s.log.Warn("admin: possible cross-protocol attack: a client sent an HTTP request (POST or Host:); connection closed",
		"id", sess.id, "addr", sess.addr, "command", strings.ToUpper(string(name)))
	sess.closing = true
	if w := redcon.BaseWriter(c); w != nil {
		w.SetBuffer(nil)
	}
	c.Close()
}

// requestContext is the context of one Manager call: it ends with Serve's.
func (s *Server) requestContext() (context.Context, context.CancelFunc) {
	if s.cfg.RequestTimeout < 0 {
		return context.WithCancel(s.ctx)
	}
	return context.WithTimeout(s.ctx, s.cfg.RequestTimeout)
}
