package config

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/throttle"
	"github.com/spf13/pflag"
)

func TestDefaults(t *testing.T) {
	c, err := Load([]string{"--node", "127.0.0.1:7004"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Node.Address = "127.0.0.1:7004"
	if !reflect.DeepEqual(c.Node, want.Node) || !reflect.DeepEqual(c.NATS, want.NATS) || c.Admin != want.Admin ||
		c.Metrics != want.Metrics || c.Tasks != want.Tasks || c.Move != want.Move || c.Log != want.Log {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if c.Admin.Listen != "127.0.0.1:7100" || c.Metrics.Listen != "127.0.0.1:7101" || c.Tasks.Max != 2 ||
		c.NATS.SubjectPrefix != "slotmover" || len(c.NATS.Servers) != 0 || c.Log.Level != "info" || c.Log.Format != "text" {
		t.Fatalf("defaults: %+v", c)
	}
	// The move's defaults are `slotmover move`'s.
	m := c.Move
	if m.MaxLag != mover.DefaultMaxLag || m.PauseBudget != mover.DefaultPauseBudget || m.FenceTimeout != mover.DefaultFenceTimeout ||
		m.MaxAttempts != mover.DefaultMaxAttempts || m.MaxCatchUp != mover.DefaultMaxCatchUp || m.ReplicaWait != mover.DefaultReplicaWait ||
		m.Window != mover.DefaultWindow || m.BigKeyElements != mover.DefaultBigKeyElements || m.Chunk != mover.DefaultChunk ||
		m.CleanupBatch != cutover.DefaultBatch || m.CleanupSleep != time.Millisecond ||
		m.ReplyPerKey || m.AllowEviction || m.KeepSourceConfig || m.SpoolDir != "" {
		t.Fatalf("move defaults: %+v", m)
	}
	if c.File() != "" || c.Origin("admin.listen") != "default" || c.Origin("node.address") != "--node" {
		t.Fatalf("file %q, origins %q %q", c.File(), c.Origin("admin.listen"), c.Origin("node.address"))
	}
}

// The command line runs with no file.
func TestFlagsOnly(t *testing.T) {
	c, err := Load(strings.Fields("--node 127.0.0.1:7004 --admin 127.0.0.1:7100 --nats nats://127.0.0.1:4222 --metrics 127.0.0.1:7101"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Address != "127.0.0.1:7004" || c.Admin.Listen != "127.0.0.1:7100" || c.Metrics.Listen != "127.0.0.1:7101" ||
		!reflect.DeepEqual(c.NATS.Servers, []string{"nats://127.0.0.1:4222"}) {
		t.Fatalf("%+v", c)
	}
	c, err = Load([]string{"-node=127.0.0.1:7004", "--nats", "nats://a:4222, tls://b:4222", "--allow-eviction", "--max-lag", "1000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.NATS.Servers, []string{"nats://a:4222", "tls://b:4222"}) || !c.Move.AllowEviction || c.Move.MaxLag != 1000 {
		t.Fatalf("%+v", c)
	}
}

const fullFile = `# every section
node:
  address: 10.0.0.4:6379
  user: mover
  password: "0123"      # kept as written, not read as a number
  tls:
    enabled: false
nats:
  servers:
    - nats://10.0.0.9:4222
    - nats://10.0.0.10:4222
  user: sidecar
  password: secret
  subject_prefix: acme.slotmover
  alias: shard-a
admin:
  listen: 127.0.0.1:7200
  password: adminpw
metrics:
  listen: "[::1]:7201"
tasks:
  max: 4
  nice: 5
move:
  max_lag: 1048576
  pause_budget: 3s
  fence_timeout: 500ms
  max_attempts: 7
  max_catch_up: 20m
  replica_wait: 2m
  window: 500
  big_key_elements: 10000
  chunk: 250
  chunk_time: 3ms
  reply_per_key: true
  cleanup_batch: 100
  cleanup_sleep: 0s
  max_spool: 8388608
  allow_eviction: true
  keep_source_config: true
  snapshot: keys
  budget: max-event=5ms,max-rise=1.5
log:
  level: debug
  format: json
`

func TestFileOnly(t *testing.T) {
	file := writeFile(t, t.TempDir(), "sidecar.yaml", fullFile)
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Serve{
		Node: Node{Address: "10.0.0.4:6379", User: "mover", Password: "0123"},
		NATS: NATS{Servers: []string{"nats://10.0.0.9:4222", "nats://10.0.0.10:4222"}, User: "sidecar", Password: "secret",
			SubjectPrefix: "acme.slotmover", Alias: "shard-a"},
		Admin:   Admin{Listen: "127.0.0.1:7200", Password: "adminpw"},
		Metrics: Metrics{Listen: "[::1]:7201"},
		Tasks:   Tasks{Max: 4, Nice: 5},
		Move: Move{MaxLag: 1 << 20, PauseBudget: 3 * time.Second, FenceTimeout: 500 * time.Millisecond, MaxAttempts: 7,
			MaxCatchUp: 20 * time.Minute, ReplicaWait: 2 * time.Minute, Window: 500, BigKeyElements: 10000, Chunk: 250, ChunkTime: 3 * time.Millisecond,
			ReplyPerKey: true, CleanupBatch: 100, CleanupSleep: 0, MaxSpool: 8 << 20, AllowEviction: true, KeepSourceConfig: true,
			Snapshot: "keys", Budget: "max-event=5ms,max-rise=1.5"},
		Log: Log{Level: "debug", Format: "json"},
	}
	c.from = nil
	c.file = ""
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got  %+v\nwant %+v", *c, want)
	}
}

func TestFileLinesAndEmptyFile(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "sidecar.yaml", fullFile)
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Origin("node.address"); got != file+":3" {
		t.Errorf("origin of node.address: %q", got)
	}
	if got := c.Origin("move.window"); got != file+":31" {
		t.Errorf("origin of move.window: %q", got)
	}
	if c.File() != file {
		t.Errorf("File() = %q", c.File())
	}
	// A file of comments only, or with empty sections, changes nothing.
	for _, text := range []string{"", "# nothing yet\n", "node:\nnats:\nmove:\n", "---\n"} {
		empty := writeFile(t, dir, "empty.yaml", text)
		c, err := Load([]string{"--config", empty, "--node", "h:1"}, nil)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if c.Move != Defaults().Move || c.Admin != Defaults().Admin {
			t.Fatalf("%q: %+v", text, c)
		}
	}
}

// defaults < file < environment < flags, key by key.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "sidecar.yaml", `
node:
  address: 10.0.0.1:6379
admin:
  listen: 127.0.0.1:7200
tasks:
  max: 3
move:
  max_lag: 1000
  pause_budget: 4s
log:
  level: warn
`)
	env := map[string]string{
		"SLOTMOVER_CONFIG":       file,
		"SLOTMOVER_ADMIN":        "127.0.0.1:7300", // env over file
		"SLOTMOVER_MAX_TASKS":    "5",              // env over file, flag over env
		"SLOTMOVER_PAUSE_BUDGET": "6s",             // env over file
		"SLOTMOVER_WINDOW":       "77",             // env over default
		"SLOTMOVER_MAX_LAG":      "",               // empty: not set
	}
	c, err := Load([]string{"--max-tasks", "9", "--log-level", "error", "--chunk", "11"}, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		path, origin string
		got, want    any
	}{
		{"node.address", file + ":3", c.Node.Address, "10.0.0.1:6379"},
		{"admin.listen", "$SLOTMOVER_ADMIN", c.Admin.Listen, "127.0.0.1:7300"},
		{"tasks.max", "--max-tasks", c.Tasks.Max, 9},
		{"move.max_lag", file + ":9", c.Move.MaxLag, int64(1000)},
		{"move.pause_budget", "$SLOTMOVER_PAUSE_BUDGET", c.Move.PauseBudget, 6 * time.Second},
		{"move.window", "$SLOTMOVER_WINDOW", c.Move.Window, 77},
		{"move.chunk", "--chunk", c.Move.Chunk, 11},
		{"log.level", "--log-level", c.Log.Level, "error"},
		{"metrics.listen", "default", c.Metrics.Listen, DefaultMetricsListen},
	}
	for _, ch := range checks {
		if ch.got != ch.want || c.Origin(ch.path) != ch.origin {
			t.Errorf("%s = %v from %s, want %v from %s", ch.path, ch.got, c.Origin(ch.path), ch.want, ch.origin)
		}
	}
	// --config wins over $SLOTMOVER_CONFIG.
	other := writeFile(t, dir, "other.yaml", "node:\n  address: 10.0.0.2:6379\n")
	c, err = Load([]string{"--config", other}, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Address != "10.0.0.2:6379" || c.File() != other {
		t.Errorf("--config over $SLOTMOVER_CONFIG: %q from %q", c.Node.Address, c.File())
	}
	// The last of a flag given twice wins.
	c, err = Load([]string{"--node", "h:1", "--node", "h:2"}, nil)
	if err != nil || c.Node.Address != "h:2" {
		t.Errorf("flag given twice: %v %v", c, err)
	}
}

// A secret and its file are one setting: the source of higher precedence
// gives it; one source giving both is refused.
func TestSecretAndItsFile(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "redis.pw", "from-file\n")
	file := writeFile(t, dir, "sidecar.yaml", "node:\n  address: h:1\n  password_file: redis.pw\n")
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Password != "from-file" || c.Node.PasswordFile != pwFile {
		t.Fatalf("password %q from %q", c.Node.Password, c.Node.PasswordFile)
	}
	if conn, err := c.Node.Conn(); err != nil || conn.Password != "from-file" || conn.Addr != "h:1" || conn.TLS != nil {
		t.Fatalf("conn %+v, %v", conn, err)
	}
	c, err = Load([]string{"--config", file}, envMap(map[string]string{"SLOTMOVER_PASSWORD": "from-env"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.Password != "from-env" || c.Node.PasswordFile != "" {
		t.Fatalf("env over the file's password_file: password %q, file %q", c.Node.Password, c.Node.PasswordFile)
	}
	// The variable's earlier name is still read; the new one wins.
	for env, want := range map[string]map[string]string{
		"old-env": {"SLOTMOVER_NODE_PASSWORD": "old-env"},
		"new-env": {"SLOTMOVER_NODE_PASSWORD": "old-env", "SLOTMOVER_PASSWORD": "new-env"},
	} {
		c, err = Load([]string{"--config", file}, envMap(want))
		if err != nil || c.Node.Password != env {
			t.Fatalf("%v: password %q, %v; want %q", want, c.Node.Password, err, env)
		}
	}
	both := writeFile(t, dir, "both.yaml", "node:\n  address: h:1\n  password: x\n  password_file: redis.pw\n")
	_, err = Load([]string{"--config", both}, nil)
	wantErr(t, err, "node.password (from "+both+":3): and node.password_file (from "+both+":4) are both set")
	_, err = Load([]string{"--node", "h:1", "--admin-password", "x", "--admin-password-file", pwFile}, nil)
	wantErr(t, err, "admin.password (from --admin-password): and admin.password_file (from --admin-password-file) are both set")

	for text, msg := range map[string]string{"": "is empty", "\n": "is empty", "a\nb\n": "holds more than one line"} {
		writeFile(t, dir, "bad.pw", text)
		_, err = Load([]string{"--node", "h:1", "--nats", "nats://h:4222", "--nats-token-file", filepath.Join(dir, "bad.pw")}, nil)
		wantErr(t, err, "nats.token_file (from --nats-token-file): "+filepath.Join(dir, "bad.pw")+" "+msg)
	}
	writeFile(t, dir, "crlf.pw", "pw\r\n")
	c, err = Load([]string{"--node", "h:1", "--admin-password-file", filepath.Join(dir, "crlf.pw")}, nil)
	if err != nil || c.Admin.Password != "pw" {
		t.Fatalf("CRLF: %q %v", c.Admin.Password, err)
	}
}

// Relative paths in the file are relative to the file's folder; on the
// command line and in the environment, to the working directory.
func TestRelativePaths(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	file := writeFile(t, dir, "sidecar.yaml", `
node:
  address: h:1
  tls:
    enabled: true
    ca: ca.pem
    cert: ./client.pem
    key: `+p.key+`
`)
	c, err := Load([]string{"--config", file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.TLS.CA != p.ca || c.Node.TLS.Cert != p.cert || c.Node.TLS.Key != p.key {
		t.Fatalf("%+v", c.Node.TLS)
	}
	_, err = Load([]string{"--node", "h:1", "--tls", "--tls-ca-cert", "ca.pem"}, nil)
	wantErr(t, err, "node.tls.ca (from --tls-ca-cert): open ca.pem: no such file")
}

func TestNodeConnTLS(t *testing.T) {
	p := newPKI(t, t.TempDir())
	// The flags' earlier names, still read.
	c, err := Load([]string{"--node", "h:1", "--node-user", "mover", "--node-password", "pw", "--node-tls", "--node-tls-ca", p.ca,
		"--node-tls-cert", p.cert, "--node-tls-key", p.key, "--node-tls-server-name", "redis.internal"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.Node.Conn()
	if err != nil {
		t.Fatal(err)
	}
	if conn.Addr != "h:1" || conn.Username != "mover" || conn.Password != "pw" || conn.TLS == nil ||
		conn.TLS.ServerName != "redis.internal" || conn.TLS.RootCAs == nil || len(conn.TLS.Certificates) != 1 || conn.TLS.InsecureSkipVerify {
		t.Fatalf("%+v %+v", conn, conn.TLS)
	}
	// The sources are reached the same way.
	if src := conn.With("h:2"); src.TLS != conn.TLS || src.Password != "pw" || src.Addr != "h:2" {
		t.Fatalf("%+v", src)
	}
	tc, err := c.NATS.TLS.Config()
	if tc != nil || err != nil {
		t.Fatalf("NATS TLS off: %v %v", tc, err)
	}
	c, err = Load([]string{"--node", "h:1", "--tls"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := c.Node.Conn(); err != nil || conn.TLS == nil || conn.TLS.RootCAs != nil || conn.TLS.ServerName != "" {
		t.Fatalf("TLS with the system's CAs: %+v %v", conn.TLS, err)
	}
}

func TestMoveOptions(t *testing.T) {
	c, err := Load(strings.Fields("--node h:1 --max-lag 5 --pause-budget 4s --fence-timeout 1s --max-attempts 6 --max-catch-up 7m "+
		"--replica-wait 8s --window 9 --big-key-elements 10 --chunk 11 --chunk-time 2ms --reply-per-key --cleanup-batch 12 --cleanup-sleep 13ms "+
		"--spool-dir "+t.TempDir()+" --max-spool 14 --allow-eviction --keep-source-config --snapshot rdb --budget off"), nil)
	if err != nil {
		t.Fatal(err)
	}
	set := slots.NewSet(slots.Range{Start: 0, End: 5460})
	base := mover.Options{TaskID: "t1", Source: mover.Conn{Addr: "s:1"}, Target: mover.Conn{Addr: "h:1"}, Slots: set, MaxLag: 99}
	got := c.Move.Options(base)
	want := base
	want.MaxLag, want.PauseBudget, want.FenceTimeout, want.MaxAttempts, want.MaxCatchUp = 5, 4*time.Second, time.Second, 6, 7*time.Minute
	want.ReplicaWait, want.Window, want.BigKeyElements, want.Chunk, want.ReplyPerKey = 8*time.Second, 9, 10, 11, true
	want.Cleanup, want.ChunkTime = cutover.Pace{Batch: 12, Sleep: 13 * time.Millisecond}, 2*time.Millisecond
	want.SpoolDir, want.MaxSpool, want.AllowEviction, want.KeepSourceConfig, want.Snapshot = c.Move.SpoolDir, 14, true, true, "rdb"
	want.Budget = throttle.Budget{Off: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// Every tunable of the section reaches the options: a field added to
	// Move and forgotten in Options shows as a default here.
	d := Defaults().Move.Options(mover.Options{})
	if reflect.DeepEqual(d, got) {
		t.Fatal("defaults and settings give the same options")
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := Log{Level: "warn", Format: "json"}.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"msg":"shown"`) {
		t.Fatalf("%q", s)
	}
	buf.Reset()
	log, _ = Log{Level: "debug", Format: "text"}.Logger(&buf)
	log.Debug("shown")
	if !strings.Contains(buf.String(), "msg=shown") {
		t.Fatalf("%q", buf.String())
	}
}

func TestHelp(t *testing.T) {
	_, err := Load([]string{"-h"}, nil)
	if !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	var buf bytes.Buffer
	Usage(&buf)
	out := buf.String()
	for _, k := range keys {
		for _, s := range []string{"--" + k.flag + " ", "--" + k.flag + "\n", k.path + ", $" + envName(k.flag)} {
			if strings.Contains(s, "\n") != (k.typ.Kind() == reflect.Bool) {
				continue
			}
			if !strings.Contains(out, s) {
				t.Errorf("usage lacks %q", s)
			}
		}
	}
	for _, s := range []string{"--config file", "$SLOTMOVER_CONFIG", "--max-lag bytes", "--pause-budget duration", "default 2s", "default 127.0.0.1:7100"} {
		if !strings.Contains(out, s) {
			t.Errorf("usage lacks %q", s)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
}

func wantErr(t *testing.T, err error, part string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one with %q", part)
	}
	if !strings.Contains(err.Error(), part) {
		t.Fatalf("error %q\nwant it to contain %q", err, part)
	}
}

// NATS_URL (the nats tools' variable) gives the servers when nothing else
// does: the file, $SLOTMOVER_NATS and --nats each win over it.
func TestNATSURL(t *testing.T) {
	dir := t.TempDir()
	fileNATS := writeFile(t, dir, "nats.yaml", "nats:\n  servers:\n    - nats://y:4222\n")
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		want   string // the servers, comma-joined
		origin string
	}{
		{"alone", nil, map[string]string{"NATS_URL": "nats://10.0.0.9:4222"}, "nats://10.0.0.9:4222", "$NATS_URL"},
		{"two", nil, map[string]string{"NATS_URL": "nats://a:4222,nats://b:4222"}, "nats://a:4222,nats://b:4222", "$NATS_URL"},
		{"under $SLOTMOVER_NATS", nil, map[string]string{"NATS_URL": "nats://a:4222", "SLOTMOVER_NATS": "nats://s:4222"}, "nats://s:4222", "$SLOTMOVER_NATS"},
		{"under --nats", []string{"--nats", "nats://f:4222"}, map[string]string{"NATS_URL": "nats://a:4222"}, "nats://f:4222", "--nats"},
		{"under the file", []string{"--config", fileNATS}, map[string]string{"NATS_URL": "nats://a:4222"}, "nats://y:4222", fileNATS + ":3"},
		{"unset", nil, nil, "", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(append([]string{"--node", "127.0.0.1:6379"}, tc.args...), envMap(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(c.NATS.Servers, ","); got != tc.want || c.Origin("nats.servers") != tc.origin {
				t.Errorf("servers %q from %s, want %q from %s", got, c.Origin("nats.servers"), tc.want, tc.origin)
			}
		})
	}
}
