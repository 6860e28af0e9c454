package config

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/slotmover/slotmover/internal/cli"
	"github.com/spf13/pflag"
)

// Load builds the configuration of `slotmover serve` from its arguments
// (the flags after "serve") and the environment (os.Getenv, or a map's
// lookup in tests): the defaults, then the YAML file named by --config or
// $SLOTMOVER_CONFIG, then every SLOTMOVER_* variable that is set and not
// empty, then the flags given. It checks the result and reads the password
// and token files, so that what it returns is ready to use. -h or --help
// returns pflag.ErrHelp (print Usage then). Every error names the key, and
// where its value came from.
func Load(args []string, env func(string) string) (*Serve, error) {
	c, err := load(args, env)
	if err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// load is Load without the checks.
func load(args []string, env func(string) string) (*Serve, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	fs, given := flagSet()
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: serve takes flags only", fs.Arg(0))
	}
	c := Defaults()
	file := env(envName(configFlag))
	if f := fs.Lookup(configFlag); f.Value.String() != "" {
		file = f.Value.String()
	}
	if file != "" {
		if err := c.readFile(file); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, k := range keys {
		name := envName(k.flag)
		s := env(name)
		if s == "" && k.old != "" {
			name = envName(k.old)
			s = env(name)
		}
		if s == "" {
			continue
		}
		v, err := parseValue(k.typ, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("$%s (%s): %v", name, k.path, err))
			continue
		}
		c.set(k, v, origin{fromEnv, "$" + name})
	}
	// NATS_URL, which the nats tools read, names the servers when neither
	// the file nor $SLOTMOVER_NATS does (--nats, applied next, wins too).
	if u := env("NATS_URL"); u != "" && c.Origin("nats.servers") == "default" {
		k := keyByPath["nats.servers"]
		if v, err := parseValue(k.typ, u); err != nil {
			errs = append(errs, fmt.Errorf("$NATS_URL (%s): %v", k.path, err))
		} else {
			c.set(k, v, origin{fromEnv, "$NATS_URL"})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, g := range *given {
		c.set(g.key, g.value, origin{fromFlag, "--" + g.key.flag})
	}
	return c, nil
}

// flagSet returns the flags of serve: --config and one flag per key. The
// flags given are recorded in order in *given, checked but not applied:
// they go on top of the file and the environment, which are read after.
func flagSet() (*pflag.FlagSet, *[]givenFlag) {
	fs := cli.NewFlagSet("serve") // Load returns the errors; Usage prints the help
	fs.String(configFlag, "", "read the configuration from this YAML `file`")
	given := new([]givenFlag)
	def := Defaults()
	renamed := map[string]string{}
	for _, k := range keys {
		if k.old != "" {
			renamed[k.old] = k.flag
		}
		f := fs.VarPF(&flagValue{key: k, given: given, def: format(k.field(def))}, k.flag, "", k.usage)
		if k.typ.Kind() == reflect.Bool {
			f.NoOptDefVal = "true" // --tls alone turns it on
		}
	}
	cli.Rename(fs, renamed)
	return fs, given
}

type givenFlag struct {
	key   *key
	value reflect.Value
}

// flagValue is the pflag.Value of a key.
type flagValue struct {
	key   *key
	given *[]givenFlag
	def   string
}

func (f *flagValue) String() string {
	if f == nil {
		return ""
	}
	return f.def
}

func (f *flagValue) Set(s string) error {
	v, err := parseValue(f.key.typ, s)
	if err != nil {
		return err
	}
	*f.given = append(*f.given, givenFlag{f.key, v})
	return nil
}

// Type names the value in the help where the usage has no `word`.
func (f *flagValue) Type() string {
	switch {
	case f.key.typ == durationType:
		return "duration"
	case f.key.typ.Kind() == reflect.Bool:
		return "bool" // pflag prints no value for it
	case f.key.typ.Kind() == reflect.String:
		return "string"
	}
	return "n"
}

// Usage prints the flags of serve, each with its YAML key, its
// environment variable and its default.
func Usage(w io.Writer) {
	fmt.Fprint(w, `usage: slotmover serve [--config FILE] [flags]

Run the sidecar of one master. Settings come from the defaults, then the
YAML file, then SLOTMOVER_* environment variables, then the flags given.

`)
	fs, _ := flagSet()
	section := ""
	printFlag(w, fs.Lookup(configFlag), nil)
	for _, k := range keys {
		if s, _, _ := strings.Cut(k.path, "."); s != section {
			section = s
			fmt.Fprintf(w, "\n%s:\n", section)
		}
		printFlag(w, fs.Lookup(k.flag), k)
	}
}

// printFlag prints one flag; k is nil for --config.
func printFlag(w io.Writer, f *pflag.Flag, k *key) {
	name, usage := pflag.UnquoteUsage(f)
	if name != "" {
		name = " " + name
	}
	fmt.Fprintf(w, "  --%s%s\n      %s\n      ", f.Name, name, usage)
	if k != nil {
		fmt.Fprintf(w, "%s, ", k.path)
	}
	fmt.Fprintf(w, "$%s", envName(f.Name))
	if f.DefValue != "" && f.DefValue != "false" {
		fmt.Fprintf(w, "; default %s", f.DefValue)
	}
	fmt.Fprintln(w)
}
