package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/natsapi"
	"github.com/slotmover/slotmover/sidecar"
)

// controlCmd changes a sidecar's running tasks: pause, resume,
// hold-cutover, release-cutover, and budget (which takes the budget
// first).
func controlCmd(cmd string, args []string) int {
	action := sidecar.Action(cmd)
	fs := cli.NewFlagSet(cmd)
	var d daemonFlags
	d.register(fs)
	all := fs.Bool("all", false, "every running task")
	takes, budget := "one task ID, or --all", ""
	if action == sidecar.ActionBudget {
		takes = "a budget (off, default, or max-event=DURATION,max-rise=RATIO), then one task ID or --all"
	}
	pos, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if action == sidecar.ActionBudget {
		if len(pos) == 0 {
			fmt.Fprintf(os.Stderr, "slotmover %s: give %s\n", cmd, takes)
			return exitRefused
		}
		budget, pos = pos[0], pos[1:]
	}
	ids := 1
	if *all {
		ids = 0
	}
	if prog.RefuseExtra(cmd, pos, ids, takes) || refuseAdminFlags(cmd, &d) {
		return exitRefused
	}
	id := strings.Join(pos, "")
	if (id == "") == !*all {
		fmt.Fprintf(os.Stderr, "slotmover %s: give %s\n", cmd, takes)
		return exitRefused
	}
	if _, err := sidecar.ParseControl(cmd, budget); err != nil {
		fmt.Fprintf(os.Stderr, "slotmover %s: %v\n", cmd, err)
		return exitRefused
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := d.control(ctx, action, budget, id)
	if err != nil {
		fmt.Fprintf(os.Stderr, "slotmover %s: %v\n", cmd, err)
		return exitFailed
	}
	fmt.Printf("%s: %d running task(s) changed ('slotmover status' shows them)\n", cmd, n)
	return 0
}

// control sends one control to the sidecar and returns how many running
// tasks it changed.
func (d *daemonFlags) control(ctx context.Context, action sidecar.Action, budget, id string) (int, error) {
	if d.natsURL != "" || d.config != "" {
		bus, err := d.bus("slotmover " + string(action))
		if err != nil {
			return 0, err
		}
		defer bus.NC.Close()
		if d.node == "" {
			return 0, errNoNode
		}
		tasks, err := bus.Control(ctx, d.node, natsapi.ControlRequest{ID: id, Action: string(action), Budget: budget})
		return len(tasks), err
	}
	verb := []string{strings.ToUpper(string(action))}
	if action == sidecar.ActionBudget {
		verb = append(verb, budget)
	}
	reply, err := d.askAdmin(ctx, verb, id)
	if err != nil {
		return 0, err
	}
	if len(reply) == 1 {
		if n, ok := reply[0]["count"].(int64); ok {
			return int(n), nil
		}
	}
	return 0, fmt.Errorf("%s on %s: the reply is not a count: %v", action, d.admin, reply)
}
