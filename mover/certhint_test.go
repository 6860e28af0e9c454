package mover

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
)

func TestCertHint(t *testing.T) {
	reset := fmt.Errorf("write tcp: %w", syscall.ECONNRESET)
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	for _, tc := range []struct {
		name string
		tc   *tls.Config
		err  error
		hint bool
	}{
		{"TLS, no certificate, reset", &tls.Config{}, reset, true},
		{"TLS, no certificate, EOF", &tls.Config{}, io.EOF, true},
		{"TLS, no certificate, another error", &tls.Config{}, errors.New("connection refused"), false},
		{"TLS with a certificate", withCert, reset, false},
		{"plain TCP", nil, reset, false},
	} {
		if got := certHint(tc.tc, tc.err) != ""; got != tc.hint {
			t.Errorf("%s: hint %v, want %v", tc.name, got, tc.hint)
		}
	}
}
