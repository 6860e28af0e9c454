package config

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
)

// Off loopback the admin port needs a password: no host, 0.0.0.0, :: and
// any other address are reachable from elsewhere.
func TestAdminOffLoopbackNeedsAPassword(t *testing.T) {
	for _, tc := range []struct {
		listen   string
		loopback bool
	}{
		{"127.0.0.1:7100", true},
		{"127.0.0.1:0", true},
		{"127.8.9.10:7100", true},
		{"[::1]:7100", true},
		{"[::ffff:127.0.0.1]:7100", true},
		{"localhost:7100", true},
		{"LocalHost:7100", true},
		{":7100", false},
		{"0.0.0.0:7100", false},
		{"[::]:7100", false},
		{"10.0.0.4:7100", false},
		{"[fe80::1]:7100", false},
		{"128.0.0.1:7100", false},
		{"sidecar.internal:7100", false},
		{"localhost.example.com:7100", false},
	} {
		for _, password := range []string{"", "pw"} {
			args := []string{"--node", "127.0.0.1:7004", "--admin", tc.listen, "--admin-password", password}
			_, err := Load(args, nil)
			switch want := tc.loopback || password != ""; {
			case want && err != nil:
				t.Errorf("%s, password %q: %v", tc.listen, password, err)
			case !want && err == nil:
				t.Errorf("%s without a password: accepted", tc.listen)
			case !want:
				wantErr(t, err, "admin.listen (from --admin): "+tc.listen+" is not a loopback address: set admin.password")
			}
		}
	}
}

// admin.tls.cert and .key turn TLS on for the admin port, and client_ca
// makes it ask for client certificates; from a flag, a variable or the
// file alike.
func TestAdminTLS(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	node := []string{"--node", "127.0.0.1:7004"}

	c, err := Load(node, nil)
	if err != nil {
		t.Fatal(err)
	}
	if conf, err := c.Admin.TLS.Config(); err != nil || conf != nil {
		t.Fatalf("TLS is on by default: %+v, %v", conf, err)
	}

	file := writeFile(t, dir, "admin.yaml", "admin:\n  tls:\n    cert: client.pem\n    key: client-key.pem\n")
	for name, load := range map[string]func() (*Serve, error){
		"flags": func() (*Serve, error) {
			return Load(append(node, "--admin-tls-cert", p.cert, "--admin-tls-key", p.key, "--admin-tls-client-ca", p.ca), nil)
		},
		"env": func() (*Serve, error) {
			return Load(node, envMap(map[string]string{"SLOTMOVER_ADMIN_TLS_CERT": p.cert, "SLOTMOVER_ADMIN_TLS_KEY": p.key, "SLOTMOVER_ADMIN_TLS_CLIENT_CA": p.ca}))
		},
		"file": func() (*Serve, error) {
			return Load(append(node, "--config", file, "--admin-tls-client-ca", p.ca), nil)
		},
	} {
		c, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		conf, err := c.Admin.TLS.Config()
		if err != nil || conf == nil || len(conf.Certificates) != 1 || conf.MinVersion < tls.VersionTLS12 ||
			conf.ClientAuth != tls.RequireAndVerifyClientCert || conf.ClientCAs == nil {
			t.Fatalf("%s: %+v, %v", name, conf, err)
		}
	}
	c, err = Load(append(node, "--admin-tls-cert", p.cert, "--admin-tls-key", p.key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if conf, err := c.Admin.TLS.Config(); err != nil || conf == nil || conf.ClientAuth != tls.NoClientCert {
		t.Fatalf("without client_ca: %+v, %v", conf, err)
	}

	notPEM := writeFile(t, dir, "not.pem", "hello\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-tls-cert", p.cert}, "admin.tls.cert (from --admin-tls-cert): TLS needs both admin.tls.cert and admin.tls.key"},
		{[]string{"--admin-tls-key", p.key}, "admin.tls.cert: TLS needs both"},
		{[]string{"--admin-tls-client-ca", p.ca}, "admin.tls.client_ca (from --admin-tls-client-ca): is set but the port has no certificate"},
		{[]string{"--admin-tls-cert", filepath.Join(dir, "none.pem"), "--admin-tls-key", p.key}, "admin.tls.cert (from --admin-tls-cert): open "},
		{[]string{"--admin-tls-cert", p.cert, "--admin-tls-key", p.ca}, "admin.tls.cert (from --admin-tls-cert): " + p.cert + " and " + p.ca},
		{[]string{"--admin-tls-cert", p.cert, "--admin-tls-key", p.key, "--admin-tls-client-ca", notPEM},
			"admin.tls.client_ca (from --admin-tls-client-ca): no PEM certificate in " + notPEM},
	} {
		_, err := Load(append(node, tc.args...), nil)
		wantErr(t, err, tc.want)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":        "nats://127.0.0.1:4222",
		"nats://user:hunter2@h:4222":   "nats://user:xxxxx@h:4222",
		"tls://s3cr3t-token@h:4222":    "tls://xxxxx@h:4222",
		"nats://user:p@ss:w@rd@h:4222": "nats://user:xxxxx@h:4222",
		"ws://user:p%2Fw@h:80/path":    "ws://user:xxxxx@h:80/path",
		"s3cr3t-token@h:4222":          "xxxxx@h:4222",
		"user:hunter2@h:4222":          "user:xxxxx@h:4222",
		"nats://user:hunter2@h:x/%zz":  "nats://user:xxxxx@h:x/%zz",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// A NATS server that carries credentials is never shown with them, in any
// error about it.
func TestNATSErrorsHideCredentials(t *testing.T) {
	node := []string{"--node", "127.0.0.1:7004"}
	for _, server := range []string{
		"http://user:hunter2@h:4222",   // scheme
		"nats://user:hunter2@:4222",    // no host
		"nats://user:hunter2@h:port",   // no parse
		"nats://hunter2@:4222",         // a token, no host
		"user:hunter2@h",               // bare, no port
		"hunter2@h",                    // bare token, no port
		"nats://user:hunter2 x@h:4222", // no parse
	} {
		_, err := Load(append(node, "--nats", server), nil)
		if err == nil {
			t.Errorf("%q: accepted", server)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the secret: %v", server, err)
		}
	}
	dir := t.TempDir()
	_, err := Load(append(node, "--config", writeFile(t, dir, "s.yaml", "nats: nats://user:hunter2@h:4222\n")), nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "nats://user:xxxxx@h:4222") {
		t.Errorf("a URL in place of the nats section: %v", err)
	}
	for _, server := range []string{"nats://user:hunter2@h:4222", "tls://hunter2@h:4222", "hunter2@h:4222"} {
		if _, err := Load(append(node, "--nats", server), nil); err != nil {
			t.Errorf("%q: %v", server, err)
		}
	}
}
