package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/natsapi"
)

// lsCmd lists the sidecars that answer on NATS.
func lsCmd(args []string) int {
	fs := cli.NewFlagSet("ls")
	var d daemonFlags
	d.register(fs)
	asJSON := fs.Bool("json", false, "print the answers as JSON")
	wait := fs.Duration("wait", time.Second, "how long to gather answers")
	pos, code, ok := prog.ParseFlags(fs, args)
	if !ok {
		return code
	}
	if prog.RefuseExtra("ls", pos, 0, command.FlagsOnly) {
		return exitRefused
	}
	if d.natsURL == "" && d.config == "" {
		fmt.Fprintln(os.Stderr, "slotmover ls: give --nats URL or --config FILE (the sidecars answer on NATS)")
		return exitRefused
	}
	if *wait <= 0 {
		fmt.Fprintln(os.Stderr, "slotmover ls: --wait must be positive")
		return exitRefused
	}
	bus, err := d.bus("slotmover ls")
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover ls:", err)
		return exitRefused
	}
	defer bus.NC.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *wait+15*time.Second)
	defer cancel()
	found, err := bus.Sidecars(ctx, *wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover ls:", err)
		return exitFailed
	}
	slices.SortFunc(found, func(a, b natsapi.PingReply) int { return strings.Compare(a.Addr, b.Addr) })
	if *asJSON {
		if found == nil {
			found = []natsapi.PingReply{} // none is [], not null
		}
		command.PrintJSON(os.Stdout, found)
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tALIAS\tADDR\tRUNNING")
	for _, p := range found {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", p.Node, p.Alias, p.Addr, p.Tasks)
	}
	tw.Flush()
	if len(found) == 0 {
		fmt.Fprintf(os.Stderr, "slotmover ls: no sidecar answered within %s\n", *wait)
	}
	return 0
}
