// Command slotmover moves Redis Cluster hash slots between masters online
// and atomically. "slotmover --help" lists the commands; each command's
// --help lists its flags and what its exit codes mean.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
)

const (
	exitMoved   = 0
	exitFailed  = 1
	exitRefused = 2
	exitStuck   = 3
)

func main() {
	redis.SetLogger(goRedisLog{})
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(exitRefused)
	}
	switch name := os.Args[1]; name {
	case "-h", "--help", "help":
		if len(os.Args) > 2 { // help COMMAND: that command's --help
			if c := lookup(os.Args[2]); c != nil {
				os.Exit(c.run(os.Args[2], []string{"--help"}))
			}
		}
		usage(os.Stdout)
	default:
		c := lookup(name)
		if c == nil {
			fmt.Fprintf(os.Stderr, "slotmover: unknown command %q ('slotmover --help' lists them)\n", name)
			os.Exit(exitRefused)
		}
		os.Exit(c.run(name, os.Args[2:]))
	}
}

// A command is one verb of the CLI: its synopsis and what it does (the
// top help and its own), and how to run it.
type command struct {
	names    []string // the verbs it answers to
	synopsis string   // after "slotmover "
	about    string
	more     string // printed after about by the command's own help only
	exits    string // what its exit codes mean; empty: exitsDefault
	run      func(name string, args []string) int
}

// lookup returns the command of the verb name, or nil.
func lookup(name string) *command {
	for i := range commands {
		for _, n := range commands[i].names {
			if n == name {
				return &commands[i]
			}
		}
	}
	return nil
}

// one adapts a command that answers to one verb.
func one(run func(args []string) int) func(string, []string) int {
	return func(_ string, args []string) int { return run(args) }
}

// commands is filled in init: their run functions print the help, which
// reads commands.
var commands []command

func init() {
	sidecarVia := "[--admin HOST:PORT | --nats URL --node ID | --config FILE]"
	commands = []command{
		{names: []string{"move"}, run: one(moveCmd),
			synopsis: "move --source HOST:PORT --target HOST:PORT --slots SPEC [--json] [flags]",
			about:    "Move hash slots online from one master to another, from here.",
			exits: `  0  moved
  1  failed (or cancelled with Ctrl-C) and rolled back: the cluster is as it was
  2  refused before anything changed: bad input (the message says which check failed)
  3  failed in a state it could not undo: the message lists what is left and the
     slotmover fix command that repairs it`},
		{names: []string{"plan"}, run: one(planCmd),
			synopsis: "plan --cluster HOST:PORT (--add NODE… | --drain NODE… | --rebalance) [--by keys|memory] [--max-moves N] [--json] [-o plan.json]",
			about:    "Work out which slots to move where: add empty masters, drain masters, or even out keys or memory. Reads the cluster; changes nothing."},
		{names: []string{"apply"}, run: one(applyCmd),
			synopsis: "apply PLAN.json [--parallel N] [--dry-run] [--json] [--budget B] [--nats URL | --config FILE]",
			about:    "Run a plan's moves, from here or through the sidecars over NATS, each checked against the cluster first.",
			exits: `  0  every move moved (or, with --dry-run, would run)
  1  a move failed, was refused or was skipped: the table says which and why
  2  refused before any move started: bad input`},
		{names: []string{"fix"}, run: one(fixCmd),
			synopsis: "fix --cluster HOST:PORT [--slots SPEC] [--dry-run]",
			about:    "Finish or undo what moves that stopped half-way (a crash, a kill -9, a lost network) left in the cluster.",
			exits: `  0  repaired, or nothing to repair
  1  a repair failed
  2  refused before anything changed: bad input, a move under way, or slots
     claimed or imported by two masters (the message says which and what to check)
  3  something is left to an operator: the notes say what`},
		{names: []string{"serve"}, run: one(serveCmd),
			synopsis: "serve --node HOST:PORT [--config FILE] [--admin HOST:PORT] [--nats URL] [--metrics HOST:PORT]",
			about:    "Run the sidecar of one master: it imports into that master, driven by CLUSTER MIGRATION on its admin port and by NATS requests.",
			exits: `  0  stopped by SIGTERM or SIGINT, its tasks rolled back or finished
  2  refused to start: a bad setting, or another sidecar holds the node`},
		{names: []string{"status"}, run: one(statusCmd),
			synopsis: "status [ID] [--json] " + sidecarVia,
			about:    "Show a sidecar's tasks, over its admin port or NATS."},
		{names: []string{"cancel"}, run: one(cancelCmd),
			synopsis: "cancel ID|--all " + sidecarVia,
			about:    "Cancel a sidecar's task (it rolls back), or all of them."},
		{names: []string{"pause", "resume", "hold-cutover", "release-cutover"}, run: controlCmd,
			synopsis: "pause|resume|hold-cutover|release-cutover ID|--all " + sidecarVia,
			about:    "Hold a running move's copy, or its cutover (an operator's window), and let it go on."},
		{names: []string{"budget"}, run: controlCmd,
			synopsis: "budget off|default|max-event=D,max-rise=R ID|--all " + sidecarVia,
			about:    "Change a running move's impact budget."},
		{names: []string{"ls"}, run: one(lsCmd),
			synopsis: "ls (--nats URL | --config FILE) [--json] [--wait D]",
			about:    "List the sidecars that answer on NATS: node, alias, address, running tasks."},
		{names: []string{"demo"}, run: one(demoCmd),
			synopsis: "demo [--keys N] [--parallel N] [--keep]",
			about:    "Start a local cluster of 3 masters and an empty one with a sidecar each, load sample keys, and rebalance onto the empty master under a workload."},
		{names: []string{"bench"}, run: one(benchCmd),
			synopsis: "bench [flags]",
			about:    "Compare slotmover with redis-cli --cluster reshard/rebalance and the built-in migration on fresh local clusters.",
			more: `For each workload and method, starts a fresh cluster of 4 local redis-server
masters (3 holding every slot, 1 empty; none ever had a replica, as in a
cluster built for a cache; the fleet workload: --fleet-masters and
--fleet-new masters, each with a replica), fills it identically, times the move
(cleanup of the source included) while it counts the sources' forks and
PINGs them every ~1 ms, and checks the result. Prints one table with the
median of --runs runs.`,
			exits: `  0  every run moved and passed its checks
  1  a run failed or a check did not pass: the table says which
  2  bad input`},
		{names: []string{"soak"}, run: one(soakCmd),
			synopsis: "soak --cluster HOST:PORT --duration D [flags]",
			about:    "Move slots back and forth under a checked workload, then verify every key.",
			exits: `  0  no write lost, and every move moved or rolled back cleanly
  1  otherwise, or the soak could not run
  2  bad input`},
		{names: []string{"version"}, run: one(versionCmd),
			synopsis: "version",
			about:    "Print the build's version, Go version and platform."},
	}
}

// usage prints every command's synopsis.
func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: slotmover COMMAND [flags]   ('slotmover COMMAND --help' for each)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  slotmover %s\n      %s\n", c.synopsis, c.about)
	}
}

// printJSON writes v as indented JSON: the --json output of the commands
// that print a document (move prints its summary on one line instead).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
