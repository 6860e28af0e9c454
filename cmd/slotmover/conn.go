package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/internal/config"
	"github.com/slotmover/slotmover/mover"
)

// connFlags say how to reach Redis and how much to log; move, plan,
// apply and fix share them.
type connFlags struct {
	user     string
	password secretFlags
	tls      tlsFlags
	logFlags
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.user, "user", "", "ACL user for Redis (every node)")
	f.password.register(fs, "password", "Redis", "SLOTMOVER_PASSWORD")
	f.tls.register(fs, "tls", "Redis", "for servers with tls-auth-clients")
	f.logFlags.register(fs)
}

// conn returns how to reach addr with these credentials.
func (f *connFlags) conn(addr string) (mover.Conn, error) {
	password, err := f.password.get()
	if err != nil {
		return mover.Conn{}, err
	}
	c := mover.Conn{Addr: addr, Username: f.user, Password: password}
	c.TLS, err = f.tls.config()
	return c, err
}

// tlsFlags are --NAME, --NAME-ca-cert, --NAME-cert, --NAME-key and
// --NAME-insecure: how a client reaches a server over TLS.
type tlsFlags struct {
	name          string // "tls", "admin-tls"
	on, insecure  bool
	ca, cert, key string
}

func (t *tlsFlags) register(fs *pflag.FlagSet, name, what, clientCertFor string) {
	t.name = name
	fs.BoolVar(&t.on, name, false, "connect to "+what+" with TLS")
	fs.StringVar(&t.ca, name+"-ca-cert", "", "with --"+name+", trust the CA certificates in this PEM `file` (default the system's)")
	fs.StringVar(&t.cert, name+"-cert", "", "with --"+name+", present the client certificate in this PEM `file` (with --"+name+"-key), "+clientCertFor)
	fs.StringVar(&t.key, name+"-key", "", "with --"+name+", the private key of --"+name+"-cert, in this PEM `file`")
	fs.BoolVar(&t.insecure, name+"-insecure", false, "with --"+name+", do not verify the server's certificate")
}

// config returns the client's TLS configuration, nil without --NAME.
func (t *tlsFlags) config() (*tls.Config, error) {
	n := t.name
	if (t.cert == "") != (t.key == "") {
		return nil, fmt.Errorf("--%s-cert and --%s-key go together", n, n)
	}
	if !t.on {
		// A command that names certificates must not run in plain text.
		if t.ca != "" || t.cert != "" || t.key != "" {
			return nil, fmt.Errorf("--%s-ca-cert, --%s-cert and --%s-key go with --%s", n, n, n, n)
		}
		return nil, nil
	}
	c, err := config.TLS{Enabled: true, CA: t.ca, Cert: t.cert, Key: t.key, InsecureSkipVerify: t.insecure}.Config()
	if err != nil {
		return nil, fmt.Errorf("TLS %w", err)
	}
	return c, nil
}

// secretFlags are --password and --password-file (or with a prefix:
// --admin-password…), with an environment variable for neither. The
// variable is read when the secret is needed, never made a flag's
// default: --help prints the defaults.
type secretFlags struct {
	given givenSecret
	file  string
	name  string // "password", "admin-password"
	env   string
}

// register adds --NAME and --NAME-file for the password of what.
func (s *secretFlags) register(fs *pflag.FlagSet, name, what, env string) {
	s.name, s.env = name, env
	fs.Var(&s.given, name, "the `password` for "+what+" (default $"+env+"); other local users may see a command line: prefer --"+name+"-file")
	fs.StringVar(&s.file, name+"-file", "", "read the password for "+what+" from the first line of this `file`")
}

// get returns the password: --NAME's, else the first line of
// --NAME-file's file, else the environment variable's.
func (s *secretFlags) get() (string, error) {
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
