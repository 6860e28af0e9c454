package stream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/internal/resp"
)

// ErrBacklogNeedsFork says a source's backlog cannot be started without a
// fork; the error wrapping it says why.
var ErrBacklogNeedsFork = errors.New("the source cannot start a replication backlog without a fork")

// StartBacklog makes a source that keeps no replication backlog (no replica
// ever attached: a cache cluster, a fresh one) keep one, without a fork,
// so that a partial sync (Config.From) can continue its history.
//
// A master creates its backlog when a replica asks it for a full sync,
// before it forks; a diskless sync forks only after
// repl-diskless-sync-delay, for more replicas to join. So StartBacklog asks
// for a full sync, waits for the backlog, and leaves long before the delay
// is over: with no replica left waiting, nothing forks. For the few
// milliseconds this takes, the source syncs diskless with a delay of at
// least 5 s and does not start as soon as one replica waits
// (repl-diskless-sync, repl-diskless-sync-delay,
// repl-diskless-sync-max-replicas), set back right after; a replica of the
// source's own that asks for a full sync meanwhile waits those 5 s. Where
// it would fork all the same (Config.KeepSourceConfig with settings that
// fork at once, or a move's full sync holding the delay at 0), it returns
// ErrBacklogNeedsFork. The new backlog starts a new replication
// ID, as a master's first replica always does, and stays
// repl-backlog-ttl (an hour by default) after the last replica leaves.
// It returns the source's total_forks before and after.
func StartBacklog(ctx context.Context, cfg Config) (forksBefore, forksAfter int64, err error) {
	cfg.defaults()
	log := cfg.Logger.With("source", cfg.Addr)
	c := cfg.Client()
	defer c.Close()
	repl, err := info.Read(ctx, c, "replication")
	if err != nil {
		return 0, 0, err
	}
	if repl["repl_backlog_active"] == "1" {
		return 0, 0, nil
	}
	if forksBefore, err = info.ReadInt(ctx, c, "stats", "total_forks"); err != nil {
		return 0, 0, err
	}
	got, err := c.ConfigGet(ctx, "repl-diskless-sync*").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("read the sync settings of source %s: %w", cfg.Addr, err)
	}
	var overrides []override
	if got["repl-diskless-sync"] != "yes" {
		overrides = append(overrides, override{"repl-diskless-sync", "yes"})
	}
	if d, err := strconv.Atoi(got["repl-diskless-sync-delay"]); err != nil || d < backlogDelay {
		overrides = append(overrides, override{"repl-diskless-sync-delay", strconv.Itoa(backlogDelay)})
	}
	if got["repl-diskless-sync-max-replicas"] == "1" { // absent before 7.0
		overrides = append(overrides, override{"repl-diskless-sync-max-replicas", "0"})
	}
	if cfg.KeepSourceConfig {
		overrides = nil // then only settings that fork later will do
	}
	lease, err := tuneSource(ctx, cfg, overrides, log)
	if err != nil {
		return forksBefore, forksBefore, err
	}
	defer lease.release(log)
	// A setting another link holds keeps that link's value.
	now, err := c.ConfigGet(ctx, "repl-diskless-sync*").Result()
	if err != nil {
		return forksBefore, forksBefore, err
	}
	delay, _ := strconv.Atoi(now["repl-diskless-sync-delay"])
	if now["repl-diskless-sync"] != "yes" || delay < 1 || now["repl-diskless-sync-max-replicas"] == "1" {
		return forksBefore, forksBefore, fmt.Errorf("%w: with repl-diskless-sync %s, delay %s and max-replicas %q it would fork at once (its settings left alone, or a move's full sync holding them)",
			ErrBacklogNeedsFork, now["repl-diskless-sync"], now["repl-diskless-sync-delay"], now["repl-diskless-sync-max-replicas"])
	}
	if err := askFullSyncAndLeave(ctx, cfg, c, time.Duration(delay)*time.Second/2); err != nil {
		return forksBefore, forksBefore, err
	}
	if forksAfter, err = info.ReadInt(ctx, c, "stats", "total_forks"); err != nil {
		return forksBefore, forksBefore, err
	}
	size, _ := c.ConfigGet(ctx, "repl-backlog-size").Result()
	log.Info("started a replication backlog on the source, without a fork", "repl_backlog_size", size["repl-backlog-size"], "total_forks", forksAfter)
	if forksAfter != forksBefore {
		log.Warn("the source forked meanwhile (another BGSAVE or sync?)", "total_forks_before", forksBefore, "total_forks_after", forksAfter)
	}
	return forksBefore, forksAfter, nil
}

// backlogDelay is the diskless sync delay, in seconds, that StartBacklog
// has left before a fork: it leaves within milliseconds.
const backlogDelay = 5

// askFullSyncAndLeave asks the source for a full sync as a replica, and
// hangs up once the source keeps a backlog, within half its diskless
// delay; then waits until the source has let the replica go.
func askFullSyncAndLeave(ctx context.Context, cfg Config, c *redis.Client, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	conn, err := cfg.Dial(ctx)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(within))
	br := bufio.NewReader(conn)
	for _, args := range [][]string{{"REPLCONF", "listening-port", "0"}, {"REPLCONF", "capa", "eof", "capa", "psync2"}} {
		if _, err := conn.Write(resp.Append(nil, args...)); err != nil {
			return fmt.Errorf("%s on source %s: %w", args[0], cfg.Addr, err)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("%s on source %s: %w", args[0], cfg.Addr, err)
		}
		if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("%s on source %s: %s", args[0], cfg.Addr, strings.TrimSpace(line))
		}
	}
	if _, err := conn.Write(resp.Append(nil, "PSYNC", "?", "-1")); err != nil {
		return fmt.Errorf("PSYNC on source %s: %w", cfg.Addr, err)
	}
	if err := pollReplication(ctx, c, func(f info.Fields) bool { return f["repl_backlog_active"] == "1" }); err != nil {
		return fmt.Errorf("source %s: no backlog after a full sync was asked: %w", cfg.Addr, err)
	}
	conn.Close()
	// Gone once no replica listening nowhere waits for the sync's start
	// (a move's own links also say port 0, but they are online).
	return pollReplication(ctx, c, func(f info.Fields) bool {
		for name := range f {
			if r := f.Sub(name); strings.HasPrefix(name, "slave") && r["port"] == "0" && r["state"] == "wait_bgsave" {
				return false
			}
		}
		return true
	})
}

// pollReplication reads INFO replication until ok says so.
func pollReplication(ctx context.Context, c *redis.Client, ok func(info.Fields) bool) error {
	for {
		f, err := info.Read(ctx, c, "replication")
		if err != nil {
			return err
		}
		if ok(f) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
