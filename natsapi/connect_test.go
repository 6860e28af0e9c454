package natsapi

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/daemon/config"
)

// Connect's errors hide the credentials of the URLs they name, one
// nats.go could not parse included.
func TestConnectErrorsHideCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, server := range []string{
		"nats://sidecar:hunter2@" + closed,
		"nats://hunter2@" + closed,
		"nats://sidecar:hunter2 x@" + closed,
	} {
		nc, err := Connect(config.NATS{Servers: []string{server}}, "test", slog.New(slog.DiscardHandler))
		if err == nil {
			nc.Close()
			t.Fatalf("%q: connected", server)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the secret: %v", server, err)
		}
	}
}
