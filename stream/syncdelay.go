package stream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// delayLease is this process's hold on a lowered repl-diskless-sync-delay.
// Leases on one source are counted, so that concurrent syncs restore the
// operator's value only when the last one is done.
type delayLease struct {
	once sync.Once
	cfg  Config
}

var delays = struct {
	sync.Mutex
	held map[string]*heldDelay
}{held: map[string]*heldDelay{}}

type heldDelay struct {
	original string
	leases   int
}

func newControlClient(cfg Config) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: cfg.Addr, Username: cfg.Username, Password: cfg.Password,
		TLSConfig: cfg.TLS, MaxRetries: -1, PoolSize: 1,
	})
}

// lowerSyncDelay sets the source's repl-diskless-sync-delay to 0 until the
// lease is released, so the full sync starts at once instead of after 5 s.
func lowerSyncDelay(ctx context.Context, cfg Config, log *slog.Logger) (*delayLease, error) {
	delays.Lock()
	defer delays.Unlock()
	if h := delays.held[cfg.Addr]; h != nil {
		h.leases++
		return &delayLease{cfg: cfg}, nil
	}
	c := newControlClient(cfg)
	defer c.Close()
	got, err := c.ConfigGet(ctx, "repl-diskless-sync-delay").Result()
	if err != nil {
		return nil, fmt.Errorf("read repl-diskless-sync-delay on source %s: %w", cfg.Addr, err)
	}
	original := got["repl-diskless-sync-delay"]
	if original == "0" {
		return nil, nil
	}
	if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return nil, fmt.Errorf("lower repl-diskless-sync-delay on source %s: %w", cfg.Addr, err)
	}
	log.Info("lowered repl-diskless-sync-delay for the sync", "was", original)
	delays.held[cfg.Addr] = &heldDelay{original: original, leases: 1}
	return &delayLease{cfg: cfg}, nil
}

// release gives the lease back; the last one restores the original value. A
// nil lease (nothing was lowered) is fine.
func (d *delayLease) release(log *slog.Logger) {
	if d == nil {
		return
	}
	d.once.Do(func() {
		delays.Lock()
		defer delays.Unlock()
		h := delays.held[d.cfg.Addr]
		if h == nil {
			return
		}
		if h.leases--; h.leases > 0 {
			return
		}
		delete(delays.held, d.cfg.Addr)
		c := newControlClient(d.cfg)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", h.original).Err(); err != nil {
			log.Error("could not restore repl-diskless-sync-delay; set it back by hand", "value", h.original, "error", err)
			return
		}
		log.Info("restored repl-diskless-sync-delay", "value", h.original)
	})
}
