// Command slotmover moves Redis Cluster hash slots between masters online
// and atomically.
//
//	slotmover move --source H:P --target H:P --slots 0-5460[,a-b…] [--json]
//	slotmover plan --cluster H:P (--add N… | --drain N… | --rebalance) [--by keys|memory] [--max-moves N] [--json] [-o F]
//	slotmover apply PLAN.json [--parallel N] [--dry-run] [--json] [--budget B]
//	slotmover fix --node H:P [--dry-run]
//	slotmover serve --node H:P [--config FILE] [--admin H:P] [--nats URL] [--metrics H:P]
//	slotmover status [ID] [--json] / slotmover cancel ID|--all
//	slotmover ls --nats URL [--json]
//	slotmover demo
//	slotmover version
//
// Exit codes of move: 0 moved; 1 failed and rolled back (the cluster as it
// was); 2 refused before anything changed; 3 failed in a state it could not
// undo (the message says what is left and how to repair it).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/slotmover/slotmover/sidecar"
)

const (
	exitMoved   = 0
	exitFailed  = 1
	exitRefused = 2
	exitStuck   = 3
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitRefused)
	}
	redis.SetLogger(goRedisLog{})
	var code int
	switch os.Args[1] {
	case "move":
		code = moveCmd(os.Args[2:])
	case "fix":
		code = fixCmd(os.Args[2:])
	case "plan":
		code = planCmd(os.Args[2:])
	case "apply":
		code = applyCmd(os.Args[2:])
	case "demo":
		code = demoCmd(os.Args[2:])
	case "bench":
		code = benchCmd(os.Args[2:])
	case "soak":
		code = soakCmd(os.Args[2:])
	case "serve":
		code = serveCmd(os.Args[2:])
	case "status":
		code = statusCmd(os.Args[2:])
	case "cancel":
		code = cancelCmd(os.Args[2:])
	case "pause", "resume", "hold-cutover", "release-cutover", "budget":
		code = controlCmd(sidecar.Action(os.Args[1]), os.Args[2:])
	case "ls":
		code = lsCmd(os.Args[2:])
	case "version":
		code = versionCmd(os.Args[2:])
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "slotmover: unknown command %q\n", os.Args[1])
		usage()
		code = exitRefused
	}
	os.Exit(code)
}

// printJSON writes v as indented JSON: the --json output of the commands
// that print a document (move prints its summary on one line instead).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// flagsOnly is what a command that takes no positional argument takes.
const flagsOnly = "only flags (a flag's value is one word: a list is comma-separated)"

// refuseExtra reports whether args, the positional arguments given to
// cmd, are more than the n it takes, after printing one line that names
// the surplus and says what cmd takes. Ignored, they would have the
// command do less than asked: "move --slots 0-10 20-30" moved 0-10 alone.
func refuseExtra(cmd string, args []string, n int, takes string) bool {
	if len(args) <= n {
		return false
	}
	extra := args[n:]
	quoted := make([]string, len(extra))
	for i, a := range extra {
		quoted[i] = strconv.Quote(a)
	}
	plural := ""
	if len(extra) > 1 {
		plural = "s"
	}
	fmt.Fprintf(os.Stderr, "slotmover %s: unexpected argument%s %s: %s takes %s\n", cmd, plural, strings.Join(quoted, " "), cmd, takes)
	return true
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  slotmover move --source HOST:PORT --target HOST:PORT --slots SPEC [--json] [flags]
      move hash slots online; 'slotmover move -h' lists the tunables
  slotmover serve --node HOST:PORT [--config FILE] [--admin HOST:PORT] [--nats URL] [--metrics HOST:PORT]
      the sidecar: imports into the local master, driven by CLUSTER MIGRATION on the admin port
      and by NATS requests; 'slotmover serve -h' lists every setting
  slotmover status [ID] [--json] [--admin HOST:PORT | --nats URL --node ID]
  slotmover cancel ID|--all [--admin HOST:PORT | --nats URL --node ID]
      a sidecar's tasks, over its admin port (or NATS)
  slotmover pause|resume|hold-cutover|release-cutover ID|--all [--admin HOST:PORT | --nats URL --node ID]
  slotmover budget off|default|max-event=D,max-rise=R ID|--all [--admin HOST:PORT | --nats URL --node ID]
      hold a running move's copy, or its cutover (an operator's window); change its impact budget
  slotmover ls (--nats URL | --config FILE) [--json] [--wait D]
      the sidecars that answer on NATS: node, alias, address, running tasks
  slotmover plan --cluster HOST:PORT (--add NODE… | --drain NODE… | --rebalance) [--by keys|memory] [--max-moves N] [--json] [-o plan.json]
      work out which slots to move where: add empty masters, drain masters, or even out keys or memory
  slotmover apply PLAN.json [--parallel N] [--dry-run] [--json] [--budget B]
      run a plan's moves from here, each checked against the cluster first
  slotmover fix --node HOST:PORT [--dry-run]
      finish or undo what moves that stopped half-way (crash, kill) left in the cluster
  slotmover demo
      start a local 4-master cluster, load sample keys, move slots 0-5460, print the summary
  slotmover bench [flags]
      compare slotmover with redis-cli --cluster reshard on fresh local clusters
  slotmover soak --cluster HOST:PORT --duration D [flags]
      move slots back and forth under a checked workload; report lost writes
  slotmover version
      the build's version, Go version and platform
`)
}
