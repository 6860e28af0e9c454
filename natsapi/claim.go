package natsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClaimBucket is the key-value bucket where each sidecar claims its node:
// the key is the node ID, the value the Holder.
const ClaimBucket = "slotmover_sidecars"

// Errors of ClaimNode.
var (
	// ErrClaimed refuses a sidecar for a node that another live sidecar
	// serves: two would both act on every request to the node.
	ErrClaimed = errors.New("another sidecar serves this node")
	// ErrNoClaimStore: without JetStream no claim can be kept.
	ErrNoClaimStore = errors.New("no JetStream key-value bucket for the node claims")
)

// Default timing of a claim.
const (
	DefaultHeartbeat = 2 * time.Second
	DefaultLapse     = 3 * DefaultHeartbeat
)

// Holder says who claims a node; a refused sidecar names it.
type Holder struct {
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Admin    string    `json:"admin"`     // its admin port
	StateDir string    `json:"state_dir"` // absolute
	Since    time.Time `json:"since"`
}

func (h Holder) String() string {
	return fmt.Sprintf("pid %d on %s, admin port %s, state %s, since %s", h.PID, h.Host, h.Admin, h.StateDir, h.Since.Format(time.RFC3339))
}

// ClaimConfig is what ClaimNode claims, and how.
type ClaimConfig struct {
	NodeID string
	// Holder is this sidecar. A claim by the same host and state directory
	// is taken over at once: the caller holds that directory's lock
	// (sidecar.OpenJournal), which its earlier holder held while alive.
	Holder Holder
	// Heartbeat is how often the claim is renewed; Lapse how long a claim
	// must go unrenewed before it is taken for a dead sidecar's. Zero:
	// DefaultHeartbeat and three heartbeats.
	Heartbeat, Lapse time.Duration
	Logger           *slog.Logger
}

// Claim is a sidecar's hold on its node, renewed every heartbeat with a
// revision check until Release: a renewal that finds another revision
// means another sidecar took the node over (it found the claim lapsed,
// as during a NATS outage), and Lost is closed. Claims of sidecars that
// died are not deleted; the next sidecar takes them over once lapsed.
type Claim struct {
	kv    jetstream.KeyValue
	key   string
	me    []byte
	every time.Duration
	log   *slog.Logger

	rev  uint64 // the claim's revision: the heartbeat's until done closes
	lost chan struct{}
	stop chan struct{}
	done chan struct{}
}

// ClaimNode claims cfg.NodeID for this sidecar, or answers ErrClaimed
// naming the live sidecar that holds it. A claim that is not renewed
// within the lapse is a dead sidecar's, and is taken over (a revision
// check: of two sidecars taking it at once, one wins).
func ClaimNode(ctx context.Context, nc *nats.Conn, cfg ClaimConfig) (*Claim, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Lapse <= 0 {
		cfg.Lapse = 3 * cfg.Heartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoClaimStore, err)
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	kv, err := js.CreateOrUpdateKeyValue(kctx, jetstream.KeyValueConfig{Bucket: ClaimBucket, Description: "slotmover: the sidecar serving each node", History: 1})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoClaimStore, err)
	}
	me, err := json.Marshal(cfg.Holder)
	if err != nil {
		return nil, err
	}
	c := &Claim{kv: kv, key: cfg.NodeID, me: me, every: cfg.Heartbeat, log: cfg.Logger,
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if c.rev, err = c.take(ctx, cfg); err != nil {
		return nil, err
	}
	go c.heartbeat()
	return c, nil
}

// take creates the claim, or takes over a dead sidecar's.
func (c *Claim) take(ctx context.Context, cfg ClaimConfig) (uint64, error) {
	rev, err := c.kv.Create(ctx, c.key, c.me)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		if err != nil {
			return 0, fmt.Errorf("claim node %s: %w", c.key, err)
		}
		return rev, nil
	}
	e, err := c.kv.Get(ctx, c.key)
	if err != nil {
		return 0, fmt.Errorf("read the claim of node %s: %w", c.key, err)
	}
	var other Holder
	if err := json.Unmarshal(e.Value(), &other); err != nil {
		c.log.Warn("unreadable claim of this node: taken over once lapsed", "error", err)
	}
	if other.Host != cfg.Holder.Host || other.StateDir != cfg.Holder.StateDir {
		c.log.Info("this node is claimed by another sidecar: waiting to see whether it lives", "holder", other.String(), "lapse", cfg.Lapse)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(cfg.Lapse):
		}
		now, err := c.kv.Get(ctx, c.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Released meanwhile: start over, once.
			if rev, err = c.kv.Create(ctx, c.key, c.me); err == nil {
				return rev, nil
			}
			return 0, fmt.Errorf("%w: %s claimed it as it let go (%v)", ErrClaimed, c.key, err)
		case err != nil:
			return 0, fmt.Errorf("read the claim of node %s: %w", c.key, err)
		case now.Revision() != e.Revision():
			_ = json.Unmarshal(now.Value(), &other)
			return 0, fmt.Errorf("%w (node %s): %s", ErrClaimed, c.key, other)
		}
	}
	rev, err = c.kv.Update(ctx, c.key, c.me, e.Revision())
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w (node %s): another sidecar took it over at the same time", ErrClaimed, c.key)
	}
	if err != nil {
		return 0, fmt.Errorf("take over the claim of node %s: %w", c.key, err)
	}
	c.log.Warn("took over the claim of a sidecar that no longer renews it", "node", c.key, "was", other.String())
	return rev, nil
}

// heartbeat renews the claim until Release, or until another sidecar
// holds it. A renewal NATS cannot take (it is away) is tried again.
func (c *Claim) heartbeat() {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.every)
		rev, err := c.kv.Update(ctx, c.key, c.me, c.rev)
		cancel()
		switch {
		case err == nil:
			c.rev = rev
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
			c.log.Error("another sidecar took this node over while the claim was not renewed", "node", c.key, "error", err)
			close(c.lost)
			return
		default:
			c.log.Warn("claim of the node not renewed; trying again", "node", c.key, "error", err)
		}
	}
}

// Lost is closed when another sidecar has taken the node over.
func (c *Claim) Lost() <-chan struct{} { return c.lost }

// Release stops the heartbeat and deletes the claim if it is still this
// sidecar's, so that the next sidecar need not wait for it to lapse.
func (c *Claim) Release() {
	close(c.stop)
	<-c.done
	select {
	case <-c.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.kv.Delete(ctx, c.key, jetstream.LastRevision(c.rev)); err != nil {
		c.log.Warn("claim of the node not released: the next sidecar waits for it to lapse", "node", c.key, "error", err)
	}
}
