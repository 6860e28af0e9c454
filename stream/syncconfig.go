package stream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncOverrides are the source settings that make a full sync fast, applied
// for the sync only: no 5 s wait for other replicas before a diskless sync
// starts, and no LZF compression of the snapshot, which costs the source
// more CPU than the bytes it saves on a local network (and is attempted,
// mostly in vain, on every value of more than 20 bytes; DUMP tries it too).
var syncOverrides = []string{"repl-diskless-sync-delay", "0", "rdbcompression", "no"}

// configLease is this process's hold on the source's overridden settings.
// Leases on one source are counted, so that concurrent syncs restore the
// operator's values only when the last one is done.
type configLease struct {
	once sync.Once
	cfg  Config
}

var leases = struct {
	sync.Mutex
	held map[string]*heldConfig
}{held: map[string]*heldConfig{}}

type heldConfig struct {
	original []string // name, value, … as they were
	count    int
}

// tuneSource applies syncOverrides on the source until the lease is released.
func tuneSource(ctx context.Context, cfg Config, log *slog.Logger) (*configLease, error) {
	leases.Lock()
	defer leases.Unlock()
	if h := leases.held[cfg.Addr]; h != nil {
		h.count++
		return &configLease{cfg: cfg}, nil
	}
	c := cfg.Client()
	defer c.Close()
	var original, changed []string
	for i := 0; i < len(syncOverrides); i += 2 {
		name, value := syncOverrides[i], syncOverrides[i+1]
		got, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			return nil, fmt.Errorf("read %s on source %s: %w", name, cfg.Addr, err)
		}
		if old, ok := got[name]; ok && old != value {
			original = append(original, name, old)
			changed = append(changed, name, value)
		}
	}
	if len(changed) == 0 {
		return nil, nil
	}
	if err := c.ConfigSet(ctx, changed[0], changed[1]).Err(); err != nil {
		return nil, fmt.Errorf("set %s on source %s: %w", changed[0], cfg.Addr, err)
	}
	// CONFIG SET takes several pairs at once only from Redis 7.0 on.
	for i := 2; i < len(changed); i += 2 {
		if err := c.ConfigSet(ctx, changed[i], changed[i+1]).Err(); err != nil {
			restore(c, original[:i], log)
			return nil, fmt.Errorf("set %s on source %s: %w", changed[i], cfg.Addr, err)
		}
	}
	log.Info("tuned the source for the sync", "set", changed, "was", original)
	leases.held[cfg.Addr] = &heldConfig{original: original, count: 1}
	return &configLease{cfg: cfg}, nil
}

// release gives the lease back; the last one restores the original values.
// A nil lease (nothing was changed) is fine.
func (l *configLease) release(log *slog.Logger) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		leases.Lock()
		defer leases.Unlock()
		h := leases.held[l.cfg.Addr]
		if h == nil {
			return
		}
		if h.count--; h.count > 0 {
			return
		}
		delete(leases.held, l.cfg.Addr)
		c := l.cfg.Client()
		defer c.Close()
		restore(c, h.original, log)
	})
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
