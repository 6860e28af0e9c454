package config

import (
	"crypto/tls"
	"path/filepath"
	"testing"
)

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
