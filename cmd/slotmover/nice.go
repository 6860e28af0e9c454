package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/command"
)

// niceFlag is --nice of the commands that copy or remove keys from this
// process (move, a local apply, fix): run on a server's host, they yield
// the CPU to the servers as the sidecar does (its tasks.nice).
type niceFlag struct{ value int }

func (n *niceFlag) register(fs *pflag.FlagSet) {
	fs.IntVar(&n.value, "nice", config.DefaultNice, "raise this process's nice `value` to this (0-19; 0 leaves it), so that when CPU runs short the servers on this host run first")
}

// check refuses a value the kernel would not take as meant.
func (n niceFlag) check() error {
	if n.value < 0 || n.value > 19 {
		return fmt.Errorf("--nice %d: from 0 to 19", n.value)
	}
	return nil
}

// yield lowers the process's priority; failing that, the work runs at the
// priority it has, with a warning.
func (n niceFlag) yield(log *slog.Logger) {
	if err := command.YieldCPU(n.value); err != nil {
		log.Warn("keeping this process's CPU priority", "nice", n.value, "err", err)
	}
}
