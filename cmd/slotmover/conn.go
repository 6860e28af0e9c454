package main

import (
	"crypto/tls"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/cli"
	"github.com/slotmover/slotmover/internal/command"
	"github.com/slotmover/slotmover/mover"
)

// connFlags say how to reach Redis and how much to log; move, plan,
// apply and fix share them.
type connFlags struct {
	user     string
	password cli.Secret
	tls      tlsFlags
	command.LogFlags
}

func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.user, "user", "", "ACL user for Redis (every node)")
	f.password.Register(fs, "password", "Redis", "SLOTMOVER_PASSWORD")
	f.tls.register(fs, "tls", "Redis", "for servers with tls-auth-clients")
	f.LogFlags.Register(fs)
}

// conn returns how to reach addr with these credentials.
func (f *connFlags) conn(addr string) (mover.Conn, error) {
	password, err := f.password.Get()
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
