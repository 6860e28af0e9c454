package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/spf13/pflag"
)

// parseFlags parses args into fs and returns the words that are not
// flags. When ok is false the command returns code at once: 0 after -h or
// --help printed its help on stdout, 2 after one line on stderr named a
// bad flag or value.
func parseFlags(fs *pflag.FlagSet, args []string) (words []string, code int, ok bool) {
	err := cli.Parse(fs, args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		printHelp(os.Stdout, fs)
		return nil, 0, false
	case err != nil:
		fmt.Fprintf(os.Stderr, "slotmover %s: %v ('slotmover %s --help' lists the flags)\n", fs.Name(), err, fs.Name())
		return nil, exitRefused, false
	}
	return fs.Args(), 0, true
}

// printHelp prints a command's synopsis, what it does, its flags and its
// exit codes.
func printHelp(w io.Writer, fs *pflag.FlagSet) {
	c := lookup(fs.Name())
	fmt.Fprintf(w, "usage: slotmover %s\n\n%s\n", c.synopsis, c.about)
	if c.more != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.more))
	}
	if usages := fs.FlagUsagesWrapped(100); usages != "" {
		fmt.Fprintf(w, "\nflags:\n%s", usages)
	}
	printExits(w, c)
}

// printExits prints what the exit codes of c mean.
func printExits(w io.Writer, c *command) {
	exits := c.exits
	if exits == "" {
		exits = exitsDefault
	}
	fmt.Fprintf(w, "\nexit codes:\n%s\n", exits)
}

// exitsDefault are the exit codes of the commands that change nothing, or
// whose failure leaves nothing behind.
const exitsDefault = `  0  done
  1  failed (the message says why)
  2  refused before anything was done or changed: bad input`

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
