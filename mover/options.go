package mover

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/slotmover/slotmover/chunk"
	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
	"github.com/slotmover/slotmover/throttle"
)

// Conn says how to reach a Redis node.
type Conn = cluster.Conn

// Options configure one move. Zero values take the defaults below.
type Options struct {
	TaskID         string // "" for a random one
	Source, Target Conn
	Slots          *slots.Set

	// MaxLag is how far (in replication-stream bytes) the target may trail
	// the source for a cutover to be tried: the fence then has that much to
	// drain inside the pause.
	MaxLag int64
	// PauseBudget is the CLIENT PAUSE timeout: writers on the source wait
	// at most this long, even if slotmover dies mid-cutover.
	PauseBudget time.Duration
	// FenceTimeout bounds the wait for the fence; past it the source is
	// unpaused and the cutover tried again later.
	FenceTimeout time.Duration
	MaxAttempts  int // cutover attempts before giving up and rolling back
	// MaxCatchUp bounds the catch-up phase: a target that never gets close
	// enough for a cutover (a write rate it cannot follow, keys that always
	// wait for a resync) fails the move instead of holding it forever.
	MaxCatchUp time.Duration

	// ReplicaWait bounds the wait, after the switch, for the target's
	// replicas to hold every moved key before the source's copies go.
	ReplicaWait time.Duration

	Window         int    // unanswered commands in flight to the target
	BigKeyElements uint64 // collections with at least this many elements are replayed as chunked commands
	Chunk          int    // elements per command for big keys, at most
	// ChunkTime bounds, by package chunk's cost model, each command that
	// carries a big key's elements: the source's scans and the target's
	// writes.
	ChunkTime time.Duration
	Cleanup   cutover.Pace
	// Budget is what the move may cost the source and the target, as
	// their clients see it: the copy and the cleanup hold while a probe's
	// round trip is over it (see package throttle). The zero value is
	// throttle.DefaultBudget.
	Budget throttle.Budget
	// ReplyPerKey takes the target's reply to every command of the snapshot,
	// instead of turning replies off and proving afterwards from the
	// target's error counts that none failed (faster; see verifyQuiet).
	ReplyPerKey bool

	// AllowEviction moves even when the keys look too big for the target's
	// maxmemory. Eviction on the target during the move still stops it.
	AllowEviction bool

	// Snapshot is how the keys are first copied: SnapshotAuto (""),
	// SnapshotRDB or SnapshotKeys.
	Snapshot string

	SpoolDir string
	// MaxSpool bounds what the replica link holds of the source's data,
	// unread by the target, in memory and spool files: a target that
	// trails by more fails (and rolls back) the move instead of filling
	// the disk. 0 for DefaultMaxSpool; negative for no bound.
	MaxSpool         int64
	KeepSourceConfig bool // leave the source's repl-diskless-sync-delay and rdbcompression alone during the sync

	Logger *slog.Logger
	// Progress, if set, is called about twice a second from the task's goroutine.
	Progress func(Progress)

	// Hooks let tests watch a move and break it on purpose; production
	// leaves them unset.
	Hooks Hooks
}

// Hooks are calls a test installs into a move; each is optional.
type Hooks struct {
	// OnCutover is called after each cutover attempt with its result.
	OnCutover func(cutover.Result, error)
	// AfterRelease runs right after the source released the slots; an
	// error ends the move there, as a crash would: no claim, no unpause,
	// no cleanup (the move ends stuck; slotmover fix finishes it).
	AfterRelease func() error
	// Fence wraps the wait for the target to catch up with the source.
	Fence func(cutover.Fence) cutover.Fence
	// Delta is asked about each stream command of the chosen slots before
	// it is applied; false drops it.
	Delta func(*stream.Command) bool
	// BeforeMarks runs where SETSLOT cannot go in a script (Valkey 8),
	// between the check that no slot is importing on the target and the
	// marks: where two moves of the same slots can pass each other.
	BeforeMarks func()
	// BigKeyStarted runs in the feeder, which waits for it, once the first
	// chunk of a big key read in chunks (keys path) is on its way to the
	// target: the key's read is under way, a few chunks ahead at most.
	BigKeyStarted func(key string)
}

// Defaults.
const (
	DefaultMaxLag         = 256 << 10
	DefaultPauseBudget    = 2 * time.Second
	DefaultFenceTimeout   = 250 * time.Millisecond
	DefaultMaxAttempts    = 5
	DefaultMaxCatchUp     = 10 * time.Minute
	DefaultReplicaWait    = time.Minute
	DefaultWindow         = 1000
	DefaultBigKeyElements = 8192
	DefaultChunk          = chunk.DefaultElements
	DefaultChunkTime      = chunk.DefaultTime
	// DefaultMaxSpool, 4 GiB, holds the whole RDB of a 4 GB source read
	// slower than the network brings it, or minutes of a busy stream
	// behind a stalled target, without filling a modest disk.
	DefaultMaxSpool = 4 << 30
)

// chunkLimit bounds the commands that carry a big key's elements.
func (o *Options) chunkLimit() chunk.Limit {
	return chunk.Limit{Time: o.ChunkTime, Elements: o.Chunk}
}

func (o *Options) defaults() {
	if o.TaskID == "" {
		var b [6]byte
		rand.Read(b[:])
		o.TaskID = hex.EncodeToString(b[:])
	}
	// Named connections show in CLIENT LIST that a move is under way
	// (fix looks for them before it touches anything).
	o.Source.Name = cluster.NamePrefix + o.TaskID
	o.Target.Name = cluster.NamePrefix + o.TaskID
	if o.MaxLag <= 0 {
		o.MaxLag = DefaultMaxLag
	}
	if o.PauseBudget <= 0 {
		o.PauseBudget = DefaultPauseBudget
	}
	if o.FenceTimeout <= 0 {
		o.FenceTimeout = DefaultFenceTimeout
	}
	if o.FenceTimeout > o.PauseBudget/2 {
		o.FenceTimeout = o.PauseBudget / 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxCatchUp <= 0 {
		o.MaxCatchUp = DefaultMaxCatchUp
	}
	if o.ReplicaWait <= 0 {
		o.ReplicaWait = DefaultReplicaWait
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.BigKeyElements == 0 {
		o.BigKeyElements = DefaultBigKeyElements
	}
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	if o.ChunkTime <= 0 {
		o.ChunkTime = DefaultChunkTime
	}
	if o.MaxSpool == 0 {
		o.MaxSpool = DefaultMaxSpool
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Snapshot == "" {
		o.Snapshot = SnapshotAuto
	}
}

// Progress is a move's state for a progress line or a status query.
type Progress struct {
	TaskID        string
	Phase         Phase
	KeysCopied    int64
	BytesCopied   int64
	BigKeys       int64
	DeltaCommands int64
	RDBBytes      int64 // snapshot bytes received from the source
	SpoolBytes    int64 // what the replica link holds unread, in memory and spool files (bounded by MaxSpool)
	Lag           int64 // source offset minus the offset acknowledged by the target; -1 before catch-up
	Elapsed       time.Duration
	Budget        string        // the budget in force (throttle.Budget.String)
	Holding       []string      // why the copy holds now, if it does (over budget, paused)
	Throttled     time.Duration // held over budget so far
	Paused        time.Duration // held by an operator so far
	CutoverHeld   bool          // the cutover waits for Move.HoldCutover(false)
}

// Summary is the outcome of a move; `slotmover move --json` prints it.
type Summary struct {
	TaskID   string `json:"task_id"`
	Source   string `json:"source"`
	Target   string `json:"target"`
	TargetID string `json:"target_id,omitempty"`
	// TargetRunID is the target's run_id when the move began: while it is
	// unchanged, the target has held every key of the slots it claimed
	// (see fix.Held).
	TargetRunID    string   `json:"target_run_id,omitempty"`
	Slots          string   `json:"slots"`
	Result         string   `json:"result"` // moved, refused, rolled_back, cancelled, stuck
	Phase          Phase    `json:"phase"`
	Error          string   `json:"error,omitempty"`
	Repair         []string `json:"repair,omitempty"`
	KeysCopied     int64    `json:"keys_copied"`
	BytesCopied    int64    `json:"bytes_copied"`
	BigKeys        int64    `json:"big_keys"`
	DeltaCommands  int64    `json:"delta_commands"`
	KeysResynced   int64    `json:"keys_resynced"`   // keys of multi-key writes copied again from the source
	Snapshot       string   `json:"snapshot"`        // the path the snapshot took: rdb or keys
	SnapshotReason string   `json:"snapshot_reason"` // why
	// Prediction is what the cost model predicted of the move by each
	// path, where the preflight got that far; TotalMS is what it took.
	Prediction      *PathPrediction `json:"prediction,omitempty"`
	RDBBytes        int64           `json:"rdb_bytes"`
	SpoolPeakBytes  int64           `json:"spool_peak_bytes"` // the most the replica link held unread, in memory and spool files
	SnapshotMS      int64           `json:"snapshot_ms"`
	CatchupMS       int64           `json:"catchup_ms"`
	PauseMS         float64         `json:"pause_ms"`
	NoOwnerMS       float64         `json:"no_owner_ms"`  // the bound on the instant neither node served the slots (cutover.Result.NoOwner)
	SwitchMS        int64           `json:"switch_ms"`    // from the start until the target served the slots
	CleanupMS       int64           `json:"cleanup_ms"`   // removing the orphans from the source, after the switch
	ThrottledMS     int64           `json:"throttled_ms"` // held because the servers were over the budget
	PausedMS        int64           `json:"paused_ms"`    // held by an operator (Move.Pause)
	Budget          string          `json:"budget"`
	TotalMS         int64           `json:"total_ms"`
	CutoverAttempts int             `json:"cutover_attempts"`
	FenceOffset     int64           `json:"fence_offset"`   // the source's offset when its write pause began
	ReleaseOffset   int64           `json:"release_offset"` // its offset at the release, which the target reached before it claimed
	// ReleaseRefusals counts the guarded releases (Valkey 8) that the
	// source refused because writes came through a broken pause.
	ReleaseRefusals int   `json:"release_refusals"`
	OrphansRemoved  int64 `json:"orphans_removed"`
}

// Results.
const (
	ResultMoved      = "moved"
	ResultRefused    = "refused"
	ResultRolledBack = "rolled_back"
	ResultCancelled  = "cancelled"
	ResultStuck      = "stuck"
)
