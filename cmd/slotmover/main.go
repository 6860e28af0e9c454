// Command slotmover moves Redis Cluster hash slots between masters online
// and atomically. "slotmover --help" lists the commands; each command's
// --help lists its flags and what its exit codes mean.
package main

import (
	"os"

	"github.com/slotmover/slotmover/internal/command"
)

const (
	exitMoved   = command.ExitDone
	exitFailed  = command.ExitFailed
	exitRefused = command.ExitRefused
	exitStuck   = command.ExitStuck
)

// version is set by a release build (-ldflags "-X main.version=v1.2.3").
var version string

// prog is the binary's verbs, filled in init: their run functions print
// the help, which reads them.
var prog = &command.Program{Name: "slotmover"}

func main() {
	command.RedisLogToSlog()
	os.Exit(prog.Main(os.Args[1:]))
}

func init() {
	sidecarVia := "[--admin HOST:PORT | --nats URL --node ID | --config FILE]"
	prog.Commands = []command.Command{
		{Names: []string{"move"}, Run: command.One(moveCmd),
			Synopsis: "move --source HOST:PORT --target HOST:PORT --slots SPEC [--json] [flags]",
			About:    "Move hash slots online from one master to another, from here.",
			Exits: `  0  moved
  1  failed (or cancelled with Ctrl-C) and rolled back: the cluster is as it was
  2  refused before anything changed: bad input (the message says which check failed)
  3  failed in a state it could not undo: the message lists what is left and the
     slotmover fix command that repairs it`},
		{Names: []string{"plan"}, Run: command.One(planCmd),
			Synopsis: "plan --cluster HOST:PORT (--add NODE… | --drain NODE… | --rebalance) [--by keys|memory] [--max-moves N] [--json] [-o plan.json]",
			About:    "Work out which slots to move where: add empty masters, drain masters, or even out keys or memory. Reads the cluster; changes nothing."},
		{Names: []string{"apply"}, Run: command.One(applyCmd),
			Synopsis: "apply PLAN.json [--parallel N] [--dry-run] [--json] [--budget B] [--nats URL | --config FILE]",
			About:    "Run a plan's moves, from here or through the sidecars over NATS, each checked against the cluster first.",
			Exits: `  0  every move moved (or, with --dry-run, would run)
  1  a move failed, was refused or was skipped: the table says which and why
  2  refused before any move started: bad input`},
		{Names: []string{"fix"}, Run: command.One(fixCmd),
			Synopsis: "fix --cluster HOST:PORT [--slots SPEC] [--dry-run]",
			About:    "Finish or undo what moves that stopped half-way (a crash, a kill -9, a lost network) left in the cluster.",
			Exits: `  0  repaired, or nothing to repair
  1  a repair failed
  2  refused before anything changed: bad input, a move under way, or slots
     claimed or imported by two masters (the message says which and what to check)
  3  something is left to an operator: the notes say what`},
		{Names: []string{"serve"}, Run: command.One(serveCmd),
			Synopsis: "serve --node HOST:PORT [--config FILE] [--admin HOST:PORT] [--nats URL] [--metrics HOST:PORT]",
			About:    "Run the sidecar of one master: it imports into that master, driven by CLUSTER MIGRATION on its admin port and by NATS requests.",
			Exits: `  0  stopped by SIGTERM or SIGINT, its tasks rolled back or finished
  2  refused to start: a bad setting, or another sidecar holds the node`},
		{Names: []string{"status"}, Run: command.One(statusCmd),
			Synopsis: "status [ID] [--json] " + sidecarVia,
			About:    "Show a sidecar's tasks, over its admin port or NATS."},
		{Names: []string{"cancel"}, Run: command.One(cancelCmd),
			Synopsis: "cancel ID|--all " + sidecarVia,
			About:    "Cancel a sidecar's task (it rolls back), or all of them."},
		{Names: []string{"pause", "resume", "hold-cutover", "release-cutover"}, Run: controlCmd,
			Synopsis: "pause|resume|hold-cutover|release-cutover ID|--all " + sidecarVia,
			About:    "Hold a running move's copy, or its cutover (an operator's window), and let it go on."},
		{Names: []string{"budget"}, Run: controlCmd,
			Synopsis: "budget off|default|max-event=D,max-rise=R ID|--all " + sidecarVia,
			About:    "Change a running move's impact budget."},
		{Names: []string{"ls"}, Run: command.One(lsCmd),
			Synopsis: "ls (--nats URL | --config FILE) [--json] [--wait D]",
			About:    "List the sidecars that answer on NATS: node, alias, address, running tasks."},
		prog.VersionCommand(version),
	}
}
