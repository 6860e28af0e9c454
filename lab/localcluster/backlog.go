package localcluster

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/internal/resp"
)

// KeepBacklog makes every node of c keep a replication backlog, as a
// master with a replica does: a replica asks it for a full sync, which
// creates the backlog, and goes before the sync begins (a diskless sync
// waits repl-diskless-sync-delay first), so nothing forks. A master keeps
// the backlog for repl-backlog-ttl (an hour by default) after its last
// replica left.
func (c *Cluster) KeepBacklog(ctx context.Context) error {
	for _, s := range c.Nodes {
		if err := keepBacklog(ctx, s); err != nil {
			return fmt.Errorf("keep a backlog on %s: %w", s.Addr, err)
		}
	}
	return nil
}

func keepBacklog(ctx context.Context, s *Server) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := cluster.Conn{Addr: s.Addr, TLS: s.TLS}.Dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for _, args := range [][]string{{"REPLCONF", "listening-port", "0"}, {"REPLCONF", "capa", "eof", "capa", "psync2"}} {
		if _, err := conn.Write(resp.Append(nil, args...)); err != nil {
			return err
		}
		if line, err := br.ReadString('\n'); err != nil {
			return err
		} else if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("%s: %s", args[0], strings.TrimSpace(line))
		}
	}
	if _, err := conn.Write(resp.Append(nil, "PSYNC", "?", "-1")); err != nil {
		return err
	}
	c := s.Client()
	defer c.Close()
	if err := waitReplication(ctx, c, func(repl info.Fields) bool { return repl["repl_backlog_active"] == "1" }); err != nil {
		return err
	}
	conn.Close()
	return waitReplication(ctx, c, func(repl info.Fields) bool { return repl["connected_slaves"] == "0" })
}

// waitReplication polls INFO replication until ok says so.
func waitReplication(ctx context.Context, c *redis.Client, ok func(info.Fields) bool) error {
	for {
		repl, err := info.Read(ctx, c, "replication")
		if err != nil {
			return err
		}
		if ok(repl) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the replica link: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
