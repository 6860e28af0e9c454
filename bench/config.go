// Package bench compares slotmover with `redis-cli --cluster reshard` on
// identical data: for every method and workload it builds a fresh local
// cluster of redis-server processes, fills it the same way, times the move
// from its start to its end (source cleanup included), checks the outcome
// against the data, and reports one side-by-side table.
package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Method names.
const (
	MethodReshard10   = "reshard10"   // redis-cli --cluster reshard --cluster-pipeline 10
	MethodReshard1000 = "reshard1000" // redis-cli --cluster reshard --cluster-pipeline 1000
	MethodSlotmover   = "slotmover"   // mover.Run, the code path of `slotmover move`
)

// Workload names.
const (
	// WorkloadSingle moves a whole shard (0-5460) from the first master to the empty one.
	WorkloadSingle = "single"
	// WorkloadScaleout moves 4096 slots to the empty master, the lowest slots
	// of each of the three sources in the shares reshard takes (3 → 4 masters).
	WorkloadScaleout = "scaleout"
)

// Methods and Workloads list every known name, in table order.
var (
	Methods   = []string{MethodReshard10, MethodReshard1000, MethodSlotmover}
	Workloads = []string{WorkloadSingle, WorkloadScaleout}
)

// Config says what to measure.
type Config struct {
	Keys      int // keys to fill (default 1,000,000)
	ValueSize int // bytes per string value (default 512)
	// Types mixes hashes, lists, sets, sorted sets and streams of a few
	// small elements into the keys, instead of strings only.
	Types bool
	// BigKeys adds, in the first slots of every source, one big list, set,
	// hash, sorted set and stream of BigElements elements each (plus a few
	// small keys of every type and encoding).
	BigKeys     bool
	BigElements int // default 100,000

	Workloads []string // default single, scaleout
	Methods   []string // default reshard10, reshard1000, slotmover
	Runs      int      // runs of each method and workload; the median is reported (default 1)

	// LoadRate is the INCRs per second a background client sends over all
	// slots while a move runs; 0 for none.
	LoadRate int

	Dir         string        // parent of the servers' working directories ("" for the system temp dir)
	KeepDirs    bool          // keep every run's directory (failed runs' are always kept)
	RedisCli    string        // redis-cli binary (default "redis-cli")
	MoveTimeout time.Duration // bound on one move (default 30 min)

	Logger *slog.Logger // progress; default slog.Default()
}

// Defaults.
const (
	DefaultKeys        = 1_000_000
	DefaultValueSize   = 512
	DefaultBigElements = 100_000
	DefaultMoveTimeout = 30 * time.Minute
)

func (c *Config) defaults() {
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.ValueSize == 0 {
		c.ValueSize = DefaultValueSize
	}
	if c.BigElements == 0 {
		c.BigElements = DefaultBigElements
	}
	if len(c.Workloads) == 0 {
		c.Workloads = Workloads
	}
	if len(c.Methods) == 0 {
		c.Methods = Methods
	}
	if c.Runs == 0 {
		c.Runs = 1
	}
	if c.RedisCli == "" {
		c.RedisCli = "redis-cli"
	}
	if c.MoveTimeout == 0 {
		c.MoveTimeout = DefaultMoveTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports bad input; Run calls it after filling in the defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.Keys < 0 {
		errs = append(errs, fmt.Errorf("keys must be at least 0, not %d", c.Keys))
	}
	if c.ValueSize < 1 || c.ValueSize > 1<<20 {
		errs = append(errs, fmt.Errorf("value size must be 1 B … 1 MiB, not %d", c.ValueSize))
	}
	if c.BigElements < 0 {
		errs = append(errs, fmt.Errorf("big elements must be at least 0, not %d", c.BigElements))
	}
	if c.Runs < 1 || c.Runs > 100 {
		errs = append(errs, fmt.Errorf("runs must be 1 … 100, not %d", c.Runs))
	}
	if c.LoadRate < 0 || c.LoadRate > 100_000 {
		errs = append(errs, fmt.Errorf("load rate must be 0 … 100000 ops/s, not %d", c.LoadRate))
	}
	for _, w := range c.Workloads {
		if !slices.Contains(Workloads, w) {
			errs = append(errs, fmt.Errorf("unknown workload %q (known: %v)", w, Workloads))
		}
	}
	for _, m := range c.Methods {
		if !slices.Contains(Methods, m) {
			errs = append(errs, fmt.Errorf("unknown method %q (known: %v)", m, Methods))
		}
	}
	return errors.Join(errs...)
}
