package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// A Secret is a password given by --NAME or --NAME-file (--password,
// --admin-password…), with an environment variable for neither. The
// variable is read when the secret is needed, never made a flag's
// default: --help prints the defaults.
type Secret struct {
	given givenSecret
	file  string
	name  string // "password", "admin-password"
	env   string
}

// Register adds --NAME and --NAME-file for the password of what.
func (s *Secret) Register(fs *pflag.FlagSet, name, what, env string) {
	s.name, s.env = name, env
	fs.Var(&s.given, name, "the `password` for "+what+" (default $"+env+"); other local users may see a command line: prefer --"+name+"-file")
	fs.StringVar(&s.file, name+"-file", "", "read the password for "+what+" from the first line of this `file`")
}

// Get returns the password: --NAME's, else the first line of
// --NAME-file's file, else the environment variable's.
func (s *Secret) Get() (string, error) {
	switch {
	case s.given.set && s.file != "":
		return "", fmt.Errorf("--%s and --%s-file: give one", s.name, s.name)
	case s.given.set:
		return s.given.value, nil
	case s.file != "":
		data, err := os.ReadFile(s.file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", s.name, err)
		}
		line, _, _ := strings.Cut(string(data), "\n")
		if line = strings.TrimSuffix(line, "\r"); line == "" {
			return "", fmt.Errorf("--%s-file %s: the first line is empty", s.name, s.file)
		}
		return line, nil
	}
	return os.Getenv(s.env), nil
}

// givenSecret is the value of --password. Its String is always empty:
// the flag package prints it as the default in usage texts.
type givenSecret struct {
	value string
	set   bool // given, even empty: --password "" overrides the environment
}

func (g *givenSecret) String() string { return "" }

func (g *givenSecret) Type() string { return "password" }

func (g *givenSecret) Set(v string) error {
	g.value, g.set = v, true
	return nil
}
