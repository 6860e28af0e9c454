package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/throttle"
)

// Conn is how to reach the local master (and, With another address, the
// sources: every master of the cluster is reached the same way).
func (n Node) Conn() (cluster.Conn, error) {
	c := cluster.Conn{Addr: n.Address, Username: n.User, Password: n.Password}
	var err error
	if c.TLS, err = n.TLS.Config(); err != nil {
		return c, fmt.Errorf("node.tls: %w", err)
	}
	return c, nil
}

// Config is the TLS configuration of the section; nil when TLS is off.
func (t TLS) Config() (*tls.Config, error) { return keyAtFault(t.config()) }

// keyAtFault names the key at fault (sub) in a config method's error.
func keyAtFault(conf *tls.Config, sub string, err error) (*tls.Config, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sub, err)
	}
	return conf, nil
}

// config builds the TLS configuration; on error, sub names the key at fault.
func (t TLS) config() (conf *tls.Config, sub string, err error) {
	if !t.Enabled {
		return nil, "", nil
	}
	conf = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, "ca", err
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, "ca", fmt.Errorf("no PEM certificate in %s", t.CA)
		}
	}
	if t.Cert != "" || t.Key != "" {
		if err := readableFile(t.Cert); err != nil {
			return nil, "cert", err
		}
		if err := readableFile(t.Key); err != nil {
			return nil, "key", err
		}
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, "cert", fmt.Errorf("%s and %s: %w", t.Cert, t.Key, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, "", nil
}

// Config is the TLS configuration of the port; nil when TLS is off.
func (t ServerTLS) Config() (*tls.Config, error) { return keyAtFault(t.config()) }

// config builds the port's TLS configuration; on error, sub names the key
// at fault.
func (t ServerTLS) config() (conf *tls.Config, sub string, err error) {
	if t.Cert == "" && t.Key == "" {
		return nil, "", nil
	}
	if err := readableFile(t.Cert); err != nil {
		return nil, "cert", err
	}
	if err := readableFile(t.Key); err != nil {
		return nil, "key", err
	}
	pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, "cert", fmt.Errorf("%s and %s: %w", t.Cert, t.Key, err)
	}
	conf = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, "client_ca", err
		}
		conf.ClientCAs = x509.NewCertPool()
		if !conf.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, "client_ca", fmt.Errorf("no PEM certificate in %s", t.ClientCA)
		}
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return conf, "", nil
}

// Options returns base with the move's tunables set from the section.
// base brings what the section does not hold: the task ID, the source and
// target, the slots, the logger, the progress callback.
func (m Move) Options(base mover.Options) mover.Options {
	base.MaxLag = m.MaxLag
	base.PauseBudget = m.PauseBudget
	base.FenceTimeout = m.FenceTimeout
	base.MaxAttempts = m.MaxAttempts
	base.MaxCatchUp = m.MaxCatchUp
	base.ReplicaWait = m.ReplicaWait
	base.Window = m.Window
	base.BigKeyElements = m.BigKeyElements
	base.Chunk = m.Chunk
	base.ChunkTime = m.ChunkTime
	base.ReplyPerKey = m.ReplyPerKey
	base.Cleanup = cutover.Pace{Batch: m.CleanupBatch, Sleep: m.CleanupSleep}
	base.SpoolDir = m.SpoolDir
	base.MaxSpool = m.MaxSpool
	base.AllowEviction = m.AllowEviction
	base.KeepSourceConfig = m.KeepSourceConfig
	base.Snapshot = m.Snapshot
	base.Budget, _ = throttle.ParseBudget(m.Budget) // Check read it
	return base
}

// Logger returns the daemon's logger, writing to w in the section's format
// from its level up.
func (l Log) Logger(w io.Writer) (*slog.Logger, error) {
	level, err := ParseLogLevel(l.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	if err := CheckLogFormat(l.Format); err != nil {
		return nil, fmt.Errorf("log.format: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// ParseLogLevel reads debug, info, warn or error (slog's names, in any
// case, with an offset such as warn+1).
func ParseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("want debug, info, warn or error, not %q", s)
	}
	return level, nil
}

// CheckLogFormat accepts text (or empty, the default) and json.
func CheckLogFormat(s string) error {
	if s != "text" && s != "json" && s != "" {
		return fmt.Errorf("want text or json, not %q", s)
	}
	return nil
}
