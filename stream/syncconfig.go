package stream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// An override is a source setting changed for as long as a link needs it.
type override struct{ name, value string }

var (
	// fullSyncOverrides make a full sync fast: no 5 s wait for other
	// replicas before a diskless sync starts, and no LZF compression of
	// the snapshot, which costs the source more CPU than the bytes it saves
	// on a local network (and is attempted, mostly in vain, on every value
	// of more than 20 bytes).
	fullSyncOverrides = []override{{"repl-diskless-sync-delay", "0"}, {"rdbcompression", "no"}}
	// partialSyncOverrides serve the keys path, which has no full sync but
	// DUMPs every key it moves, and DUMP compresses as the RDB does.
	partialSyncOverrides = []override{{"rdbcompression", "no"}}
)

// configLease is one link's hold on the settings it overrides on its source.
// Holds are counted per source and setting, so that concurrent links restore
// the operator's value of a setting only when the last one that needs it is
// done, whichever settings each of them needs.
type configLease struct {
	once  sync.Once
	cfg   Config
	names []string // the settings held
}

type heldSetting struct {
	original string
	count    int
}

var leases = struct {
	sync.Mutex
	held map[[2]string]*heldSetting // by source address and setting name
}{held: map[[2]string]*heldSetting{}}

// tuneSource applies overrides on the source until the lease is released.
func tuneSource(ctx context.Context, cfg Config, overrides []override, log *slog.Logger) (*configLease, error) {
	leases.Lock()
	defer leases.Unlock()
	l := &configLease{cfg: cfg}
	c := cfg.Client()
	defer c.Close()
	var set, was []string
	for _, o := range overrides {
		key := [2]string{cfg.Addr, o.name}
		if h := leases.held[key]; h != nil {
			h.count++
			l.names = append(l.names, o.name)
			continue
		}
		got, err := c.ConfigGet(ctx, o.name).Result()
		if err != nil {
			l.dropLocked(c, log)
			return nil, fmt.Errorf("read %s on source %s: %w", o.name, cfg.Addr, err)
		}
		old, ok := got[o.name]
		if !ok || old == o.value {
			continue
		}
		// One setting a call: CONFIG SET takes several only from 7.0 on.
		if err := c.ConfigSet(ctx, o.name, o.value).Err(); err != nil {
			l.dropLocked(c, log)
			return nil, fmt.Errorf("set %s on source %s: %w", o.name, cfg.Addr, err)
		}
		leases.held[key] = &heldSetting{original: old, count: 1}
		l.names = append(l.names, o.name)
		set, was = append(set, o.name, o.value), append(was, o.name, old)
	}
	if len(set) > 0 {
		log.Info("tuned the source for the sync", "set", set, "was", was)
	}
	return l, nil
}

// release gives the lease back, restoring each setting it was the last to
// hold. A nil lease is fine.
func (l *configLease) release(log *slog.Logger) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		leases.Lock()
		defer leases.Unlock()
		l.dropLocked(nil, log)
	})
}

// dropLocked drops the lease's holds and restores, through c or a client of
// its own, each setting no other lease holds.
func (l *configLease) dropLocked(c *redis.Client, log *slog.Logger) {
	var original []string
	for _, name := range l.names {
		key := [2]string{l.cfg.Addr, name}
		h := leases.held[key]
		if h.count--; h.count > 0 {
			continue
		}
		delete(leases.held, key)
		original = append(original, name, h.original)
	}
	l.names = nil
	if len(original) == 0 {
		return
	}
	if c == nil {
		c = l.cfg.Client()
		defer c.Close()
	}
	restore(c, original, log)
}

func restore(c *redis.Client, original []string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < len(original); i += 2 {
		if err := c.ConfigSet(ctx, original[i], original[i+1]).Err(); err != nil {
			log.Error("could not restore a source setting; set it back by hand", "name", original[i], "value", original[i+1], "error", err)
			continue
		}
		log.Info("restored source setting", "name", original[i], "value", original[i+1])
	}
}
