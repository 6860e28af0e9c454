// Package cli holds what every slotmover command's flags share: pflag
// sets that print nothing themselves, parsed so that scripts written for
// package flag's one-dash long flags keep working.
package cli

import (
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// NewFlagSet returns an empty set of the command name's flags. pflag, as in
// most Go CLIs: flags and words mix in any order, "--" ends the flags, and
// an error is one line. It prints nothing: the caller prints the help it
// wants and the errors Parse returns.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// Parse parses args into fs, taking -name as --name for its long flags
// (package flag's form, which releases before pflag took). It returns
// pflag.ErrHelp for -h and --help.
func Parse(fs *pflag.FlagSet, args []string) error {
	return fs.Parse(doubleDash(fs, args))
}

// doubleDash rewrites -name[=value] to --name[=value] where name is a long
// flag of fs. A word after "--", and a value such as -1, stay as they are.
func doubleDash(fs *pflag.FlagSet, args []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(name) > 1 && fs.Lookup(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
}

// Rename keeps the old names of renamed flags working, hidden, for
// scripts written before: old → new.
func Rename(fs *pflag.FlagSet, renamed map[string]string) {
	prev := fs.GetNormalizeFunc()
	fs.SetNormalizeFunc(func(fs *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := renamed[name]; ok {
			name = n
		}
		return prev(fs, name)
	})
}
