package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/daemon"
	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/command"
)

// serveCmd runs the sidecar: imports into the local master, driven from
// the admin port and NATS, until SIGTERM or SIGINT.
func serveCmd(args []string) int {
	c, err := config.Load(args, os.Getenv)
	if errors.Is(err, pflag.ErrHelp) {
		config.Usage(os.Stdout)
		prog.PrintExits(os.Stdout, "serve")
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover serve:", err)
		return exitRefused
	}
	log, err := c.Log.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slotmover serve:", err)
		return exitRefused
	}
	command.SetLogger(log)
	if err := command.YieldCPU(c.Tasks.Nice); err != nil {
		log.Warn("the sidecar keeps its CPU priority", "nice", c.Tasks.Nice, "err", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := daemon.Serve(ctx, c, log, daemon.Options{Version: command.Version(version)}); err != nil {
		log.Error("slotmover serve: " + err.Error())
		return exitRefused
	}
	return 0
}
