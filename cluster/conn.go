package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
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
}

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
		MaxRetries: -1, PoolSize: 4, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Dial opens a raw connection for protocols go-redis does not speak (the
// replication stream, a windowed pipeline), authenticated when a password
// is set.
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
	if c.Password == "" {
		return conn, nil
	}
	args := []string{"AUTH", c.Password}
	if c.Username != "" {
		args = []string{"AUTH", c.Username, c.Password}
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	err = auth(conn, args)
	conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("AUTH on %s: %w", c.Addr, err)
	}
	return conn, nil
}

// auth sends AUTH and reads its one-line reply byte by byte, so that nothing
// the caller reads next is consumed here.
func auth(conn net.Conn, args []string) error {
	if _, err := conn.Write(resp.Append(nil, args...)); err != nil {
		return err
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) < 1024 {
		if _, err := conn.Read(b); err != nil {
			return err
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	reply := string(line)
	if len(reply) > 0 && reply[len(reply)-1] == '\r' {
		reply = reply[:len(reply)-1]
	}
	if reply != "+OK" {
		return fmt.Errorf("%s", reply)
	}
	return nil
}
