package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slotmover/slotmover/natsapi"
)

// lsCmd lists the sidecars that answer on NATS.
func lsCmd(args []string) int {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	var d daemonFlags
	d.register(fs)
	asJSON := fs.Bool("json", false, "print the answers as JSON")
	wait := fs.Duration("wait", time.Second, "how long to gather answers")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: slotmover ls [--json] [--wait D] (--nats URL | --config FILE) [--subject-prefix P]")
		return exitRefused
	}
	if refuseExtra("ls", pos, 0, flagsOnly) {
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
		printJSON(os.Stdout, found)
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
