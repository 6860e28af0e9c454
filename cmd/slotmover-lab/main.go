// Command slotmover-lab is slotmover's laboratory: a demo on a local
// cluster, the benchmark against redis-cli and the built-in migration, and
// the soak. It starts redis-server and NATS servers of its own, so it is
// kept out of the production binary, which starts neither.
package main

import (
	"os"

	"github.com/slotmover/slotmover/internal/command"
)

// version is set by a release build (-ldflags "-X main.version=v1.2.3").
var version string

// prog is the binary's verbs, filled in init: their run functions print
// the help, which reads them.
var prog = &command.Program{Name: "slotmover-lab"}

func main() {
	command.RedisLogToSlog()
	os.Exit(prog.Main(os.Args[1:]))
}

func init() {
	prog.Commands = []command.Command{
		{Names: []string{"demo"}, Run: command.One(demoCmd),
			Synopsis: "demo [--keys N] [--parallel N] [--keep]",
			About:    "Start a local cluster of 3 masters and an empty one with a sidecar each, load sample keys, and rebalance onto the empty master under a workload."},
		{Names: []string{"bench"}, Run: command.One(benchCmd),
			Synopsis: "bench [flags]",
			About:    "Compare slotmover with redis-cli --cluster reshard/rebalance and the built-in migration on fresh local clusters.",
			More: `For each workload and method, starts a fresh cluster of 4 local redis-server
masters (3 holding every slot, 1 empty; none ever had a replica, as in a
cluster built for a cache; the fleet workload: --fleet-masters and
--fleet-new masters, each with a replica), fills it identically, times the move
(cleanup of the source included) while it counts the sources' forks and
PINGs them every ~1 ms, and checks the result. Prints one table with the
median of --runs runs.`,
			Exits: `  0  every run moved and passed its checks
  1  a run failed or a check did not pass: the table says which
  2  bad input`},
		{Names: []string{"soak"}, Run: command.One(soakCmd),
			Synopsis: "soak --cluster HOST:PORT --duration D [flags]",
			About:    "Move slots back and forth under a checked workload, then verify every key.",
			Exits: `  0  no write lost, and every move moved or rolled back cleanly
  1  otherwise, or the soak could not run
  2  bad input`},
		prog.VersionCommand(version),
	}
}
