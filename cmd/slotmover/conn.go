package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/slotmover/slotmover/mover"
)

// connFlags say how to reach Redis and how much to log; move, demo and fix share them.
type connFlags struct {
	user, password     string
	tlsOn, tlsInsecure bool
	tlsCA              string
	logLevel           string
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.user, "user", "", "ACL user for Redis (every node)")
	fs.StringVar(&f.password, "password", os.Getenv("SLOTMOVER_PASSWORD"), "password for Redis (default $SLOTMOVER_PASSWORD)")
	fs.BoolVar(&f.tlsOn, "tls", false, "connect to Redis with TLS")
	fs.StringVar(&f.tlsCA, "tls-ca-cert", "", "with --tls, trust the CA certificates in this PEM `file` (default the system's)")
	fs.BoolVar(&f.tlsInsecure, "tls-insecure", false, "with --tls, do not verify server certificates")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
}

// conn returns how to reach addr with these credentials.
func (f *connFlags) conn(addr string) (mover.Conn, error) {
	c := mover.Conn{Addr: addr, Username: f.user, Password: f.password}
	if !f.tlsOn {
		return c, nil
	}
	c.TLS = &tls.Config{InsecureSkipVerify: f.tlsInsecure, MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return c, fmt.Errorf("--tls-ca-cert: %w", err)
		}
		c.TLS.RootCAs = x509.NewCertPool()
		if !c.TLS.RootCAs.AppendCertsFromPEM(pem) {
			return c, fmt.Errorf("--tls-ca-cert: no certificate in %s", f.tlsCA)
		}
	}
	return c, nil
}

func (f *connFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}
