package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/mover"
	"go.yaml.in/yaml/v3"
)

// configsDir holds the example configurations.
const configsDir = "../../configs"

// Every example in configs/ loads. The files it names that this machine
// lacks (certificates, password files, the spool folder) are made in a
// temporary folder and given through their environment variables, which
// override the file as they would on a host; nothing else is overridden,
// so the rest of each example is loaded and checked as written.
func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example in %s: %v", configsDir, err)
	}
	expect := map[string]func(t *testing.T, c *Serve){
		"local-demo.yaml": func(t *testing.T, c *Serve) {
			if c.Node.Address != "127.0.0.1:7004" || c.Node.TLS.Enabled || c.Node.Password != "" ||
				!reflect.DeepEqual(c.NATS.Servers, []string{"nats://127.0.0.1:4222"}) || c.NATS.TLS.Enabled ||
				c.Admin.Listen != "127.0.0.1:7100" || c.Admin.Password != "" || c.Admin.TLS != (ServerTLS{}) || c.Metrics.Listen != "127.0.0.1:7101" {
				t.Errorf("%+v", c)
			}
			if conn, err := c.Node.Conn(); err != nil || conn.TLS != nil {
				t.Errorf("node conn %+v %v", conn, err)
			}
		},
		"production.yaml": func(t *testing.T, c *Serve) {
			if !c.Node.TLS.Enabled || c.Node.User == "" || c.Node.Password != "secret" || !c.NATS.TLS.Enabled ||
				c.NATS.CredsFile == "" || c.Admin.Password != "secret" || c.Metrics.Listen == "" || c.Log.Format != "json" {
				t.Errorf("%+v", c)
			}
			conn, err := c.Node.Conn()
			if err != nil || conn.TLS == nil || conn.TLS.RootCAs == nil || len(conn.TLS.Certificates) != 1 || conn.Username != c.Node.User {
				t.Errorf("node conn %+v %v", conn, err)
			}
			if tc, err := c.NATS.TLS.Config(); err != nil || tc == nil || tc.RootCAs == nil {
				t.Errorf("NATS TLS %+v %v", tc, err)
			}
			if tc, err := c.Admin.TLS.Config(); err != nil || tc == nil || len(tc.Certificates) != 1 {
				t.Errorf("admin TLS %+v %v", tc, err)
			}
			// The move section shows the defaults.
			if c.Move.SpoolDir == "" {
				t.Error("no spool_dir")
			}
			c.Move.SpoolDir = ""
			if c.Move != Defaults().Move {
				t.Errorf("move: %+v\nwant the defaults %+v", c.Move, Defaults().Move)
			}
		},
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			raw, err := load([]string{"--config", file}, nil)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			p := newPKI(t, dir)
			env := map[string]string{}
			for _, k := range keys {
				named := k.field(raw).String()
				if !k.file || named == "" || raw.Origin(k.path) == "default" {
					continue
				}
				if _, err := os.Stat(named); err == nil {
					continue
				}
				var fixture string
				switch {
				case strings.HasSuffix(k.path, ".tls.ca"), strings.HasSuffix(k.path, ".tls.client_ca"):
					fixture = p.ca
				case strings.HasSuffix(k.path, ".tls.cert"):
					fixture = p.cert
				case strings.HasSuffix(k.path, ".tls.key"):
					fixture = p.key
				case k.path == "move.spool_dir", k.path == "state.dir":
					fixture = t.TempDir()
				default: // a password, token, nkey seed or creds file
					fixture = writeFile(t, dir, strings.ReplaceAll(k.path, ".", "-"), "secret\n")
				}
				env[envName(k.flag)] = fixture
				t.Logf("%s: %s stands for %s", k.path, fixture, named)
			}
			c, err := Load([]string{"--config", file}, envMap(env))
			if err != nil {
				t.Fatal(err)
			}
			if c.File() != file {
				t.Errorf("File() = %q", c.File())
			}
			if check := expect[name]; check != nil {
				check(t, c)
			} else {
				t.Errorf("no expectations for %s: add them to this test", name)
			}
			if _, err := c.Log.Logger(os.Stderr); err != nil {
				t.Error(err)
			}
			if o := c.Move.Options(mover.Options{}); o.PauseBudget < 2*o.FenceTimeout || o.Window <= 0 {
				t.Errorf("mover options %+v", o)
			}
		})
	}
	for name := range expect {
		if _, err := os.Stat(filepath.Join(configsDir, name)); err != nil {
			t.Errorf("expected example %s: %v", name, err)
		}
	}
}

// production.yaml shows every key, set or commented out ("# key: value"),
// so that it documents them all: a key added to the table must be added
// there too.
func TestProductionShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(configsDir, "production.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	commented := regexp.MustCompile(`(?m)^(\s*)# ([a-z_]+:(?: |$))`)
	var doc yaml.Node
	if err := yaml.Unmarshal(commented.ReplaceAll(data, []byte("$1$2")), &doc); err != nil {
		t.Fatalf("production.yaml with its keys uncommented: %v", err)
	}
	shown := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n.Kind != yaml.MappingNode {
			shown[path] = true
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			walk(n.Content[i+1], p)
		}
	}
	walk(doc.Content[0], "")
	for _, k := range keys {
		if !shown[k.path] {
			t.Errorf("production.yaml does not show %s", k.path)
		}
		delete(shown, k.path)
	}
	for p := range shown {
		t.Errorf("production.yaml shows %s, which is no key", p)
	}
}
