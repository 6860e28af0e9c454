package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/lab/bench"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/throttle"
)

// benchCmd compares slotmover with redis-cli --cluster reshard on fresh
// local clusters and prints one table (or JSON).
func benchCmd(args []string) int {
	fs := cli.NewFlagSet("bench")
	var cfg bench.Config
	fs.IntVar(&cfg.Keys, "keys", bench.DefaultKeys, "keys to fill")
	fs.IntVar(&cfg.ValueSize, "value-size", bench.DefaultValueSize, "`bytes` per value (per collection with --types)")
	fs.BoolVar(&cfg.Types, "types", false, "mix small hashes, lists, sets, zsets and streams into the keys")
	fs.BoolVar(&cfg.BigKeys, "big-keys", false, "add big keys (list, set, hash, zset, stream) in the moved slots of every source")
	fs.IntVar(&cfg.BigElements, "big-elements", bench.DefaultBigElements, "elements per big key with --big-keys")
	bigTypes := fs.String("big-types", strings.Join(localcluster.BigTypeNames, ","), "comma-separated types of the big keys with --big-keys (the keys path reads no big list or stream)")
	workloads := fs.String("workloads", strings.Join(bench.DefaultWorkloads, ","), "comma-separated workloads: small (--slots of the first master to the empty one), single (0-5460 to the empty master), scaleout (4096 slots from 3 masters to the empty one), fleet (--fleet-masters with replicas rebalanced onto --fleet-new more, --keys over them and a sorted set of --big-elements at each end of every master's range, while a client writes)")
	fs.StringVar(&cfg.SmallSlots, "slots", bench.DefaultSmallSlots, "the small workload's `slots`: a range 0-N of the first master (0-5460), what reshard takes for --cluster-slots N+1")
	methods := fs.String("methods", strings.Join(bench.Methods, ","), "comma-separated methods, each run on the workloads it fits: reshard10, reshard1000 (redis-cli --cluster reshard with that --cluster-pipeline; not the fleet), rebalance (redis-cli --cluster rebalance --cluster-use-empty-masters; the fleet only), nomove (the fleet, its sidecars and its writer for --nomove-for, moving nothing: what the host alone costs), slotmover (snapshot path auto, --budget), slotmover-off (auto, no budget), slotmover-rdb, slotmover-keys (that snapshot path), asm (Redis's atomic slot migration on a cluster of the --asm-build; skipped if there is none)")
	fs.StringVar(&cfg.ASMBuild, "asm-build", bench.DefaultASMBuild(), "`folder` of a Redis build with atomic slot migration (its redis-server) for the asm method ($"+bench.ASMBuildEnv+", else ../shared/redis-builds/redis-unstable-asm beside the repository)")
	fs.BoolVar(&cfg.NoLatency, "no-ping", false, "do not PING the sources every ~1 ms during the move (the latency columns stay empty)")
	fs.IntVar(&cfg.Runs, "runs", 1, "runs of each method and workload; the median is reported")
	fs.IntVar(&cfg.LoadRate, "load-rate", 0, "INCRs per second a client sends over all slots during each move (0 for none; the fleet's writer then sends 2000)")
	fs.IntVar(&cfg.FleetMasters, "fleet-masters", bench.DefaultFleetMasters, "the fleet's masters holding every slot at the start")
	fs.IntVar(&cfg.FleetNew, "fleet-new", bench.DefaultFleetNew, "the fleet's empty masters that join")
	fs.IntVar(&cfg.Parallel, "parallel", bench.DefaultParallel, "the fleet's moves at once (apply --parallel)")
	fs.DurationVar(&cfg.NoMoveFor, "nomove-for", bench.DefaultNoMoveFor, "how long the nomove method watches the fleet")
	fs.Func("budget", "slotmover's impact budget: `default`, off, or max-event=DURATION,max-rise=RATIO (see slotmover move --help)", func(v string) (err error) {
		cfg.Budget, err = throttle.ParseBudget(v)
		return err
	})
	serverBin := fs.String("server-bin", localcluster.ServerBin, "redis-server binary to start (another build of Redis)")
	slotmoverBin := fs.String("slotmover", "", "the slotmover binary whose `serve` runs the fleet's sidecars (default: beside slotmover-lab, else on the PATH)")
	fs.StringVar(&cfg.RedisCli, "redis-cli", "redis-cli", "redis-cli binary for reshard")
	fs.StringVar(&cfg.Dir, "dir", "", "parent directory of the servers' working directories (default the system temp dir)")
	fs.BoolVar(&cfg.KeepDirs, "keep", false, "keep every run's directory (failed runs' are always kept)")
	fs.DurationVar(&cfg.MoveTimeout, "move-timeout", bench.DefaultMoveTimeout, "give up a move after this long")
	jsonOut := fs.Bool("json", false, "print the report as JSON instead of a table")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr (--log-level warn)")
	var lf command.LogFlags
	lf.Register(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the moves, the fills and the checks; not the servers) to this `file`, for go tool pprof; -tagfocus phase=move keeps the moves'")
	words, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("bench", words, 0, command.FlagsOnly) {
		return command.ExitRefused
	}
	cfg.Workloads, cfg.Methods, cfg.BigTypes = splitList(*workloads), splitList(*methods), splitList(*bigTypes)
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab bench: %v\n", err)
		return command.ExitRefused
	}
	localcluster.ServerBin = *serverBin
	if *quiet {
		lf.Level = "warn"
	}
	var err error
	if cfg.Logger, err = lf.Logger(os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab bench: %v\n", err)
		return command.ExitRefused
	}
	if cfg.SidecarsNeeded() {
		exe, err := findSlotmover(*slotmoverBin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "slotmover-lab bench: %v\n", err)
			return command.ExitRefused
		}
		cfg.Sidecars = func(_ context.Context, natsURL string, nodes []string, dir string) (func(), error) {
			sp, err := startSidecarProcs(exe, natsURL, nodes, dir)
			return sp.stop, err
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "slotmover-lab bench: CPU profile: %v\n", err)
			return command.ExitRefused
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if rep != nil {
		var werr error
		if *jsonOut {
			werr = rep.WriteJSON(os.Stdout)
		} else {
			werr = rep.WriteTable(os.Stdout)
		}
		if werr != nil {
			fmt.Fprintf(os.Stderr, "slotmover-lab bench: %v\n", werr)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover-lab bench: %v\n", err)
		return command.ExitFailed
	}
	if !rep.OK() {
		fmt.Fprintln(os.Stderr, "slotmover-lab bench: some runs failed or did not pass their checks (see the table)")
		return command.ExitFailed
	}
	return command.ExitDone
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
