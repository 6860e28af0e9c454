// Package bench compares slotmover with `redis-cli --cluster reshard` on
// identical data: for every method and workload it builds a fresh local
// cluster of redis-server processes, fills it the same way, times the move
// from its start to its end (source cleanup included), checks the outcome
// against the data, and reports one side-by-side table.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
)

// Method names.
const (
	MethodReshard10   = "reshard10"   // redis-cli --cluster reshard --cluster-pipeline 10
	MethodReshard1000 = "reshard1000" // redis-cli --cluster reshard --cluster-pipeline 1000
	MethodSlotmover   = "slotmover"   // mover.Run, the code path of `slotmover move` (snapshot path auto)
	// MethodSlotmoverRDB is mover.Run with the RDB snapshot path (the source forks).
	MethodSlotmoverRDB = "slotmover-rdb"
	// MethodSlotmoverKeys is mover.Run with the keys snapshot path (no fork).
	MethodSlotmoverKeys = "slotmover-keys"
	// MethodASM is Redis's built-in atomic slot migration (CLUSTER
	// MIGRATION IMPORT on the target), on a cluster of the ASM build
	// (Config.ASMBuild); skipped when there is none.
	MethodASM = "asm"
	// MethodSlotmoverOff is slotmover (snapshot path auto) with its
	// impact budget off: as fast as it goes.
	MethodSlotmoverOff = "slotmover-off"
	// MethodRebalance is redis-cli --cluster rebalance
	// --cluster-use-empty-masters (the fleet workload's legacy method).
	MethodRebalance = "rebalance"
	// MethodNoMove is the fleet with its sidecars and its writer for
	// Config.NoMoveFor, moving nothing: what the host alone costs the
	// client and the masters' events over a window as long as a move.
	MethodNoMove = "nomove"
)

// Workload names.
const (
	// WorkloadSingle moves a whole shard (0-5460) from the first master to the empty one.
	WorkloadSingle = "single"
	// WorkloadScaleout moves 4096 slots to the empty master, the lowest slots
	// of each of the three sources in the shares reshard takes (3 → 4 masters).
	WorkloadScaleout = "scaleout"
	// WorkloadSmall moves a few slots (0-54, about 1% of its keys; see
	// Config.SmallSlots) from the first master to the empty one.
	WorkloadSmall = "small"
	// WorkloadFleet is a scale-out of a cluster with replicas: FleetMasters
	// masters with a replica each hold every slot, with a sorted set of
	// BigElements members at each end of every master's range; FleetNew
	// empty masters with replicas join, and the cluster is rebalanced onto
	// them while a client writes and measures its own latency. slotmover
	// runs as `plan --add` + `apply --nats --parallel` through a sidecar
	// beside every master.
	WorkloadFleet = "fleet"
)

// Methods and Workloads list every known name, in table order.
var (
	Methods   = []string{MethodReshard10, MethodReshard1000, MethodNoMove, MethodRebalance, MethodSlotmover, MethodSlotmoverOff, MethodSlotmoverRDB, MethodSlotmoverKeys, MethodASM}
	Workloads = []string{WorkloadSmall, WorkloadSingle, WorkloadScaleout, WorkloadFleet}
	// DefaultWorkloads leaves out the fleet, which starts dozens of servers.
	DefaultWorkloads = []string{WorkloadSmall, WorkloadSingle, WorkloadScaleout}
)

// applies reports whether method runs on workload: reshard moves a given
// number of slots to one node, rebalance spreads a cluster over its
// masters, so each has its own workloads.
func applies(workload, method string) bool {
	switch method {
	case MethodReshard10, MethodReshard1000:
		return workload != WorkloadFleet
	case MethodRebalance, MethodNoMove:
		return workload == WorkloadFleet
	}
	return true
}

// DefaultSmallSlots is the slots the small workload moves by default.
const DefaultSmallSlots = "0-54"

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
	BigElements int      // default 100,000
	BigTypes    []string // the big keys' types (localcluster.BigTypeNames); nil for all

	Workloads []string // default DefaultWorkloads
	Methods   []string // default all of Methods; each runs on the workloads it applies to
	// SmallSlots is the small workload's slots of the first master: a
	// range from 0 ("0-272"), the slots reshard takes for --cluster-slots
	// of its size (default 0-54).
	SmallSlots string
	Runs       int // runs of each method and workload; the median is reported (default 1)

	// LoadRate is the INCRs per second a background client sends over all
	// slots while a move runs; 0 for none (the fleet always has a writer:
	// DefaultFleetLoadRate then).
	LoadRate int

	// Budget is slotmover's impact budget in its moves (the default's by
	// default); slotmover-off runs without one.
	Budget throttle.Budget

	// The fleet workload: masters holding every slot (default 12), empty
	// ones that join (default 3), each with a replica, and the moves at
	// once (apply --parallel, default 3). Keys are spread over the
	// masters, BigElements is the size of each sorted set at the ends of
	// their ranges.
	FleetMasters, FleetNew, Parallel int
	// NoMoveFor is how long the nomove method watches the fleet
	// (default 30 s, about as long as a default-budget rebalance).
	NoMoveFor time.Duration
	// Sidecars starts a slotmover sidecar beside each of nodes, reachable
	// on the NATS server at natsURL, logging into dir; stop ends them.
	// The fleet's slotmover methods need it (SidecarsNeeded;
	// `slotmover-lab bench` runs `slotmover serve` processes); without it
	// they fail. stop, if not
	// nil, is called also after an error.
	Sidecars func(ctx context.Context, natsURL string, nodes []string, dir string) (stop func(), err error)

	Dir      string // parent of the servers' working directories ("" for the system temp dir)
	KeepDirs bool   // keep every run's directory (failed runs' are always kept)
	RedisCli string // redis-cli binary (default "redis-cli")
	// ASMBuild is the folder of a Redis build with atomic slot migration
	// (its redis-server); the asm method's whole cluster runs it. "" or a
	// folder without redis-server skips the asm method, with a note.
	ASMBuild string
	// NoLatency turns off the PING latency probe of the sources (on by
	// default: one client and one goroutine per source, a PING every ~1 ms).
	NoLatency   bool
	MoveTimeout time.Duration // bound on one move (default 30 min)

	Logger *slog.Logger // progress; default slog.Default()
}

// Defaults.
const (
	DefaultKeys        = 1_000_000
	DefaultValueSize   = 512
	DefaultBigElements = 100_000
	DefaultMoveTimeout = 30 * time.Minute

	DefaultFleetMasters  = 12
	DefaultFleetNew      = 3
	DefaultParallel      = 3
	DefaultFleetLoadRate = 2000
	DefaultNoMoveFor     = 30 * time.Second
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
		c.Workloads = DefaultWorkloads
	}
	if c.FleetMasters == 0 {
		c.FleetMasters = DefaultFleetMasters
	}
	if c.FleetNew == 0 {
		c.FleetNew = DefaultFleetNew
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.NoMoveFor == 0 {
		c.NoMoveFor = DefaultNoMoveFor
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
	if c.SmallSlots == "" {
		c.SmallSlots = DefaultSmallSlots
	}
}

// ASMBuildEnv names the environment variable that points to the ASM build.
const ASMBuildEnv = "SLOTMOVER_ASM_BUILD"

// DefaultASMBuild is $SLOTMOVER_ASM_BUILD, else
// ../shared/redis-builds/redis-unstable-asm beside the repository root
// (the nearest folder up from the working directory holding go.mod), else "".
func DefaultASMBuild() string {
	if v := os.Getenv(ASMBuildEnv); v != "" {
		return v
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for range 64 {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(dir), "shared", "redis-builds", "redis-unstable-asm")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

// asmServer returns the ASM build's redis-server, or why there is none.
func (c *Config) asmServer() (string, error) {
	if c.ASMBuild == "" {
		return "", errors.New("no ASM build given (--asm-build or " + ASMBuildEnv + ")")
	}
	bin := filepath.Join(c.ASMBuild, "redis-server")
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("no ASM build: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("no ASM build: %s is not an executable file", bin)
	}
	return bin, nil
}

// smallSlots parses SmallSlots: one range from slot 0 inside the first
// master's slots, so that reshard's lowest-slots-first choice matches.
func smallSlots(spec string) (int, error) {
	set, err := slots.Parse(spec)
	if err != nil {
		return 0, fmt.Errorf("small workload's slots %q: %w", spec, err)
	}
	r := set.Ranges()
	if len(r) != 1 || r[0].Start != 0 || r[0].End > 5460 {
		return 0, fmt.Errorf("small workload's slots %q: want one range 0-N with N at most 5460 (the first master's lowest slots, as reshard takes them)", spec)
	}
	return set.Len(), nil
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
	for _, t := range c.BigTypes {
		if !slices.Contains(localcluster.BigTypeNames, t) {
			errs = append(errs, fmt.Errorf("big key type %q: want one of %s", t, strings.Join(localcluster.BigTypeNames, ", ")))
		}
	}
	if c.Runs < 1 || c.Runs > 100 {
		errs = append(errs, fmt.Errorf("runs must be 1 … 100, not %d", c.Runs))
	}
	if c.LoadRate < 0 || c.LoadRate > 100_000 {
		errs = append(errs, fmt.Errorf("load rate must be 0 … 100000 ops/s, not %d", c.LoadRate))
	}
	if c.FleetMasters < 1 || c.FleetMasters > 64 || c.FleetNew < 1 || c.FleetNew > 64 {
		errs = append(errs, fmt.Errorf("the fleet's masters and new masters must be 1 … 64 each, not %d and %d", c.FleetMasters, c.FleetNew))
	}
	if c.Parallel < 1 || c.Parallel > 64 {
		errs = append(errs, fmt.Errorf("parallel moves must be 1 … 64, not %d", c.Parallel))
	}
	if c.NoMoveFor < time.Second || c.NoMoveFor > time.Hour {
		errs = append(errs, fmt.Errorf("the nomove window must be 1s … 1h, not %s", c.NoMoveFor))
	}
	if c.SmallSlots != "" {
		if _, err := smallSlots(c.SmallSlots); err != nil {
			errs = append(errs, err)
		}
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
	for _, w := range c.Workloads {
		if len(c.Methods) > 0 && !slices.ContainsFunc(c.Methods, func(m string) bool { return applies(w, m) }) {
			errs = append(errs, fmt.Errorf("no method given runs on the %s workload (reshard runs on the others, rebalance on the fleet)", w))
		}
	}
	return errors.Join(errs...)
}

// SidecarsNeeded says whether the run needs Sidecars: the fleet workload
// with a method that runs them.
func (c *Config) SidecarsNeeded() bool {
	return slices.Contains(c.Workloads, WorkloadFleet) && slices.ContainsFunc(c.Methods, func(m string) bool {
		return runsSidecars(m) && applies(WorkloadFleet, m)
	})
}

// runsSidecars says whether the fleet runs a sidecar beside every master
// for method: slotmover's methods, and nomove (the sidecars there, idle).
func runsSidecars(method string) bool { return method != MethodRebalance && method != MethodASM }
