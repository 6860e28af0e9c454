// Package localcluster starts real redis-server processes on free loopback
// ports, forms them into clusters, fills them with keys of every type and
// compares them, and stops them by PID. The demo, the benchmark and the
// tests use it; the helpers bound to package testing live in tests/harness.
package localcluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ServerBin is the redis-server binary the harness starts. SLOTMOVER_REDIS_SERVER overrides it.
var ServerBin = envOr("SLOTMOVER_REDIS_SERVER", "redis-server")

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Options say how to start one server.
type Options struct {
	Cluster bool
	TLS     bool // serve TLS only, with a self-signed certificate; Server.TLS trusts it
	// Config holds extra redis.conf directives, one per entry ("maxmemory 100mb").
	Config []string
	// Bin is the redis-server binary to start; "" for ServerBin. The
	// benchmark starts a whole cluster of another build with it.
	Bin string
}

// bin is the binary the options start.
func (o Options) bin() string {
	if o.Bin != "" {
		return o.Bin
	}
	return ServerBin
}

// Server is one running redis-server process.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string // its working directory (dump.rdb, nodes.conf, log)
	PID  int
	TLS  *tls.Config // for clients, when the server speaks TLS
	Bin  string      // the redis-server binary it runs

	cmd    *exec.Cmd
	exited chan struct{}
	// stopRequested is set by Stop: an exit without it is a crash.
	stopRequested atomic.Bool
}

// StartServer starts a redis-server in a new directory under dir and waits
// until it answers PING. Ports are picked free; a lost race for a port is retried.
func StartServer(ctx context.Context, dir string, opts Options) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(opts.Cluster)
		if err != nil {
			return nil, err
		}
		s, err := startOn(ctx, dir, port, opts)
		if err == nil {
			return s, nil
		}
		lastErr = err
		var conf *configError
		if errors.As(err, &conf) || errors.Is(err, ErrNoTLS) {
			break // the same configuration fails on every port
		}
	}
	return nil, lastErr
}

// ErrNoTLS is returned (wrapped) by StartServer for Options.TLS when the
// server binary was built without TLS; ServerT and ClusterT skip the test.
var ErrNoTLS = errors.New("this server build has no TLS support (built without BUILD_TLS=yes)")

// configError is a server that refused its configuration: trying another
// port would not help.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func startOn(ctx context.Context, dir string, port int, opts Options) (*Server, error) {
	sdir := filepath.Join(dir, "redis-"+strconv.Itoa(port))
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return nil, err
	}
	conf := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + sdir,
		"save \"\"",
		"appendonly no",
		"daemonize no",
		"logfile " + filepath.Join(sdir, "redis.log"),
		"protected-mode no",
	}
	if v, err := VersionOf(opts.bin()); err != nil || v.AtLeast(7, 0) {
		// DEBUG (DIGEST, DIGEST-VALUE) is allowed by default before 7.0,
		// and 6.2 refuses to start with this directive.
		conf = append(conf, "enable-debug-command yes")
	}
	if opts.Cluster {
		conf = append(conf,
			"cluster-enabled yes",
			"cluster-config-file nodes.conf",
			"cluster-node-timeout 5000",
			"cluster-require-full-coverage yes",
			"cluster-allow-replica-migration no",
		)
	}
	var tlsConf *tls.Config
	if opts.TLS {
		lines, tc, err := tlsSetup(sdir, port)
		if err != nil {
			return nil, err
		}
		conf, tlsConf = append(conf, lines...), tc
	}
	conf = append(conf, opts.Config...)
	confPath := filepath.Join(sdir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	// What the server prints before its log file is open (a refused
	// directive) goes to stderr.log, for the error message.
	out, err := os.Create(filepath.Join(sdir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child holds its own descriptor
	cmd := exec.Command(opts.bin(), confPath)
	cmd.Dir = sdir
	cmd.Stdout, cmd.Stderr = out, out
	// The server must not outlive a test binary that crashes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("start %s: %w: %s", opts.bin(), err, installHint)
		}
		return nil, fmt.Errorf("start %s: %w", opts.bin(), err)
	}
	s := &Server{
		Addr:   "127.0.0.1:" + strconv.Itoa(port),
		Port:   port,
		Dir:    sdir,
		PID:    cmd.Process.Pid,
		TLS:    tlsConf,
		Bin:    opts.bin(),
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() { cmd.Wait(); close(s.exited) }()

	c := s.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// NOAUTH also means the server is up, when the test asked for requirepass.
		if err := c.Ping(ctx).Err(); err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, s.startError()
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s: %s", port, s.LogTail(5))
		}
	}
}

// Client returns a new single-node client for the server; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, MaxRetries: -1, ReadTimeout: 30 * time.Second,
		DisableIdentity: true, MaintNotificationsConfig: noMaintNotifications})
}

// noMaintNotifications keeps go-redis from sending CLIENT MAINT_NOTIFICATIONS,
// which 7.x servers count as an error: tests compare error statistics.
var noMaintNotifications = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

// Stop ends the process by PID: SIGTERM, then SIGKILL if it lingers.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	s.stopRequested.Store(true)
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(s.PID, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(s.PID, syscall.SIGKILL)
		<-s.exited
	}
}

// Alive reports whether the process is still running.
func (s *Server) Alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Died reports how a server that nobody stopped ended (a crash, an OOM
// kill) and the start of its bug report or the end of its log, which goes
// away with its directory; "" while it runs or after Stop.
func (s *Server) Died() string {
	if s.Alive() || s.stopRequested.Load() {
		return ""
	}
	return fmt.Sprintf("server %s (pid %d) exited (%v); its log:\n%s", s.Addr, s.PID, s.cmd.ProcessState, s.crashExcerpt())
}

// crashExcerpt is the start of the server's bug report (the assertion or
// signal and the stack trace) if its log has one, else the log's last lines.
func (s *Server) crashExcerpt() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.Contains(l, "BUG REPORT START") {
			continue
		}
		var out []string
		for _, l := range lines[i:] {
			if strings.Contains(l, "argv[") || strings.TrimSpace(l) == "" {
				continue
			}
			if out = append(out, l); len(out) == 40 {
				break
			}
		}
		return strings.Join(out, "\n")
	}
	return strings.ReplaceAll(s.LogTail(40), " | ", "\n")
}

// LogTail returns the last n lines of the server's log, for error messages.
func (s *Server) LogTail(n int) string {
	f, err := os.Open(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, " | ")
}

// startError says why the server exited at start, from its stderr and log.
func (s *Server) startError() error {
	stderr, _ := os.ReadFile(filepath.Join(s.Dir, "stderr.log"))
	text := strings.TrimSpace(string(stderr))
	logTail := s.LogTail(5)
	msg := fmt.Sprintf("%s on port %d exited at start: %s", s.Bin, s.Port, strings.Join(strings.Fields(text+" | "+logTail), " "))
	switch {
	case s.TLS != nil && (strings.Contains(logTail, "TLS support") || strings.Contains(text, "'tls-")):
		return fmt.Errorf("%s: %w", msg, ErrNoTLS)
	case strings.Contains(text, "FATAL CONFIG FILE ERROR"):
		return &configError{msg}
	}
	return errors.New(msg)
}

// freePort finds a loopback port that is free; in cluster mode the bus port
// (port+10000) must be free too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !cluster {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bl.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port pair found")
}
