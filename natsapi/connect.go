package natsapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/slotmover/slotmover/daemon/config"
)

// Connect connects with the configured credentials and TLS, and extra
// options. The client reconnects by itself for ever once connected;
// unreachable at the start is an error, unless extra has
// nats.RetryOnFailedConnect.
func Connect(n config.NATS, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected; reconnecting", "error", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", config.RedactURL(c.ConnectedUrl())) }),
	}
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(n.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("NATS nkey: %w", err)
		}
		opts = append(opts, o)
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	tlsConf, err := n.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("NATS TLS: %w", err)
	}
	if tlsConf != nil {
		opts = append(opts, nats.Secure(tlsConf))
	}
	nc, err := nats.Connect(strings.Join(n.Servers, ","), append(opts, extra...)...)
	if err != nil {
		// A URL nats.go could not parse is quoted whole in its error.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			uerr.URL = config.RedactURL(uerr.URL)
		}
		return nil, fmt.Errorf("NATS %s unreachable: %w", ServerList(n.Servers), err)
	}
	return nc, nil
}

// ServerList lists the servers for a log or an error: a URL's
// credentials (user:password@, token@) are hidden.
func ServerList(servers []string) string {
	shown := make([]string, len(servers))
	for i, s := range servers {
		shown[i] = config.RedactURL(s)
	}
	return strings.Join(shown, ",")
}

// Unreachable says whether Connect's error means that no NATS server
// answered, as opposed to one refusing the sidecar (credentials, TLS),
// which is a mistake to report.
func Unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.As(err, &ne)
}
