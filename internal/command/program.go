// Package command is what the slotmover binaries share around their
// verbs: the table of commands and their help, the handling of flags and
// extra words, the exit codes, the logging flags and the version.
package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/internal/cli"
)

// The exit codes every command keeps to: move's contract, the others use
// the first three.
const (
	ExitDone    = 0
	ExitFailed  = 1
	ExitRefused = 2 // bad input: nothing was done or changed
	ExitStuck   = 3 // failed in a state it could not undo
)

// A Program is a binary: its name and its verbs.
type Program struct {
	Name     string
	Commands []Command
}

// A Command is one verb: its synopsis and what it does (the top help and
// its own), and how to run it.
type Command struct {
	Names    []string // the verbs it answers to
	Synopsis string   // after the program's name
	About    string
	More     string // printed after About by the command's own help only
	Exits    string // what its exit codes mean; empty: ExitsDefault
	Run      func(name string, args []string) int
}

// One adapts a command that answers to one verb.
func One(run func(args []string) int) func(string, []string) int {
	return func(_ string, args []string) int { return run(args) }
}

// ExitsDefault are the exit codes of the commands that change nothing, or
// whose failure leaves nothing behind.
const ExitsDefault = `  0  done
  1  failed (the message says why)
  2  refused before anything was done or changed: bad input`

// FlagsOnly is what a command that takes no positional argument takes.
const FlagsOnly = "only flags (a flag's value is one word: a list is comma-separated)"

// Main runs the verb args[0] with the rest and returns the exit code:
// "help" and --help list the verbs, "help VERB" is VERB --help.
func (p *Program) Main(args []string) int {
	if len(args) == 0 {
		p.Usage(os.Stderr)
		return ExitRefused
	}
	switch name := args[0]; name {
	case "-h", "--help", "help":
		if len(args) > 1 {
			if c := p.Lookup(args[1]); c != nil {
				return c.Run(args[1], []string{"--help"})
			}
		}
		p.Usage(os.Stdout)
		return ExitDone
	default:
		c := p.Lookup(name)
		if c == nil {
			fmt.Fprintf(os.Stderr, "%s: unknown command %q ('%s --help' lists them)\n", p.Name, name, p.Name)
			return ExitRefused
		}
		return c.Run(name, args[1:])
	}
}

// Lookup returns the command of the verb name, or nil.
func (p *Program) Lookup(name string) *Command {
	for i := range p.Commands {
		for _, n := range p.Commands[i].Names {
			if n == name {
				return &p.Commands[i]
			}
		}
	}
	return nil
}

// Usage prints every command's synopsis.
func (p *Program) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s COMMAND [flags]   ('%s COMMAND --help' for each)\n\n", p.Name, p.Name)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %s %s\n      %s\n", p.Name, c.Synopsis, c.About)
	}
}

// ParseFlags parses args into fs, named after its verb, and returns the
// words that are not flags. When ok is false the command returns code at
// once: 0 after -h or --help printed its help on stdout, 2 after one line
// on stderr named a bad flag or value.
func (p *Program) ParseFlags(fs *pflag.FlagSet, args []string) (words []string, code int, ok bool) {
	err := cli.Parse(fs, args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		p.PrintHelp(os.Stdout, fs)
		return nil, ExitDone, false
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s %s: %v ('%s %s --help' lists the flags)\n", p.Name, fs.Name(), err, p.Name, fs.Name())
		return nil, ExitRefused, false
	}
	return fs.Args(), ExitDone, true
}

// PrintHelp prints a command's synopsis, what it does, its flags and its
// exit codes.
func (p *Program) PrintHelp(w io.Writer, fs *pflag.FlagSet) {
	c := p.Lookup(fs.Name())
	fmt.Fprintf(w, "usage: %s %s\n\n%s\n", p.Name, c.Synopsis, c.About)
	if c.More != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.More))
	}
	if usages := fs.FlagUsagesWrapped(100); usages != "" {
		fmt.Fprintf(w, "\nflags:\n%s", usages)
	}
	p.PrintExits(w, fs.Name())
}

// PrintExits prints what the exit codes of the verb name mean.
func (p *Program) PrintExits(w io.Writer, name string) {
	exits := p.Lookup(name).Exits
	if exits == "" {
		exits = ExitsDefault
	}
	fmt.Fprintf(w, "\nexit codes:\n%s\n", exits)
}

// RefuseExtra reports whether args, the positional arguments given to
// the verb cmd, are more than the n it takes, after printing one line
// that names the surplus and says what cmd takes. Ignored, they would
// have the command do less than asked: "move --slots 0-10 20-30" moved
// 0-10 alone.
func (p *Program) RefuseExtra(cmd string, args []string, n int, takes string) bool {
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
	fmt.Fprintf(os.Stderr, "%s %s: unexpected argument%s %s: %s takes %s\n", p.Name, cmd, plural, strings.Join(quoted, " "), cmd, takes)
	return true
}

// PrintJSON writes v as indented JSON: the --json output of the commands
// that print a document.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
