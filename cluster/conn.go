package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/slotmover/slotmover/internal/resp"
)

// Conn says how to reach a Redis node.
type Conn struct {
	Addr     string
	Username string // ACL user; empty for the default user
	Password string
	TLS      *tls.Config // nil for plain TCP
	// Name is set on every connection (CLIENT SETNAME), so that CLIENT LIST
	// shows who holds it: a move names its connections after its task.
	Name string
}

// NamePrefix starts the connection name of every move ("slotmover:<task>").
const NamePrefix = "slotmover:"

// With returns the same credentials for another address: the other masters
// of a cluster are reached the way the source is.
func (c Conn) With(addr string) Conn {
	c.Addr = addr
	return c
}

// Client returns a go-redis client for the node. It never retries on its
// own (a move decides what to retry) and sends neither CLIENT SETINFO nor
// CLIENT MAINT_NOTIFICATIONS, which servers before 7.2 and 8 answer with an
// error that lands in the operator's errorstats.
func (c Conn) Client() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: c.Addr, Username: c.Username, Password: c.Password, TLSConfig: c.TLS,
		MaxRetries: -1, PoolSize: 4, DisableIdentity: true, ClientName: c.Name,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Dial opens a raw connection for protocols go-redis does not speak (the
// replication stream, a windowed pipeline), authenticated when a password
// is set and named when a Name is.
func (c Conn) Dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.Addr, err)
	}
	if c.TLS != nil {
		conf := c.TLS
		if conf.ServerName == "" {
			// Verify the certificate for the host dialled, as go-redis does.
			conf = conf.Clone()
			conf.ServerName, _, _ = net.SplitHostPort(c.Addr)
		}
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", c.Addr, err)
		}
		conn = tc
	}
	var setup [][]string
	if c.Password != "" {
		args := []string{"AUTH", c.Password}
		if c.Username != "" {
			args = []string{"AUTH", c.Username, c.Password}
		}
		setup = append(setup, args)
	}
	if c.Name != "" {
		setup = append(setup, []string{"CLIENT", "SETNAME", c.Name})
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	for _, args := range setup {
		if err := expectOK(conn, args); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s on %s: %w", args[0], c.Addr, err)
		}
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// expectOK sends a command and reads its reply, which must be +OK. The
// reply is read a byte at a time (bufio fills from one Read at a time), so
// that nothing the caller reads next from conn is consumed here.
func expectOK(conn net.Conn, args []string) error {
	if _, err := conn.Write(resp.Append(nil, args...)); err != nil {
		return err
	}
	line, err := resp.ReadLine(bufio.NewReaderSize(byteReader{conn}, 1024))
	if err != nil {
		return err
	}
	if string(line) != "+OK" {
		return fmt.Errorf("%s", line)
	}
	return nil
}

// byteReader reads at most one byte per Read.
type byteReader struct{ r io.Reader }

func (b byteReader) Read(p []byte) (int, error) { return b.r.Read(p[:min(len(p), 1)]) }

// MoveTasks lists the tasks of the moves with a connection open on c (their
// names, after NamePrefix), from CLIENT LIST.
func MoveTasks(ctx context.Context, c *redis.Client) ([]string, error) {
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST on %s: %w", c.Options().Addr, err)
	}
	var tasks []string
	for _, line := range strings.Split(list, "\n") {
		for _, field := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(field, "name="+NamePrefix); ok {
				tasks = append(tasks, name)
			}
		}
	}
	return tasks, nil
}
