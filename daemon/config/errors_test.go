package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// Unknown, repeated and misplaced keys of the file are errors naming the
// key, the file and the line.
func TestFileErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, text, want string }{
		{"top", "node:\n  address: h:1\nnode_address: h:1\n",
			":3: unknown key node_address (the file takes: node, nats, admin, metrics, tasks, state, move, log)"},
		{"nested", "node:\n  address: h:1\n  adress: h:2\n",
			":3: unknown key node.adress (node takes: address, user, password, password_file, tls)"},
		{"tls", "node:\n  address: h:1\n  tls:\n    enable: true\n",
			":4: unknown key node.tls.enable (node.tls takes: enabled, ca, cert, key, server_name, insecure_skip_verify)"},
		{"kebab", "node:\n  address: h:1\nmove:\n  max-lag: 10\n", ":4: unknown key move.max-lag (move takes: max_lag,"},
		{"twice", "node:\n  address: h:1\n  address: h:2\n", ":3: key node.address given twice (first at line 2)"},
		{"section twice", "move:\n  window: 1\nmove:\n  chunk: 1\n", ":3: key move given twice (first at line 1)"},
		{"scalar section", "node: h:1\n", ":1: node: want a mapping of keys (address, user, password, password_file, tls), found the value \"h:1\""},
		{"list for a value", "node:\n  address: [h:1, h:2]\n", ":2: node.address: want a single value, found a list"},
		{"mapping for a list", "node:\n  address: h:1\nnats:\n  servers: {a: b}\n", ":4: nats.servers: want a value or a list of values, found a mapping"},
		{"list in a list", "node:\n  address: h:1\nnats:\n  servers: [[a]]\n", ":4: nats.servers: want a list of strings, found a list in it"},
		{"not a duration", "node:\n  address: h:1\nmove:\n  pause_budget: 2\n", ":4: move.pause_budget: want a duration such as 250ms, 2s or 10m, not \"2\""},
		{"not an integer", "node:\n  address: h:1\nmove:\n  max_lag: 256KiB\n", ":4: move.max_lag: want an integer, not \"256KiB\""},
		{"not a bool", "node:\n  address: h:1\nmove:\n  reply_per_key: yes\n", ":4: move.reply_per_key: want true or false, not \"yes\""},
		{"negative uint", "node:\n  address: h:1\nmove:\n  big_key_elements: -1\n", ":4: move.big_key_elements: want a positive integer, not \"-1\""},
		{"unknown snapshot", "node:\n  address: h:1\nmove:\n  snapshot: fast\n", "unknown-snapshot.yaml:4): want auto, rdb or keys, not \"fast\""},
		{"merge key", "base: &b\n  window: 1\n", ":1: unknown key base"},
		{"merge", "move:\n  <<: {window: 1}\n", ":2: move: merge keys (<<) are not supported"},
		{"syntax", "node:\n  address: h:1\n   user: x\n", "yaml: line 3:"},
		{"two documents", "node:\n  address: h:1\n---\nnode:\n  address: h:2\n", ":3: a second YAML document"},
		{"list at the top", "- node\n", ":1: the file: want a mapping of keys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "-")+".yaml", c.text)
			_, err := Load([]string{"--config", file}, nil)
			wantErr(t, err, file)
			wantErr(t, err, c.want)
		})
	}
	// Every problem of the file is told at once.
	file := writeFile(t, dir, "many.yaml", "node:\n  adress: h:1\nmove:\n  windw: 1\n  chunk: x\n")
	_, err := Load([]string{"--config", file}, nil)
	for _, want := range []string{":2: unknown key node.adress", ":4: unknown key move.windw", ":5: move.chunk: want an integer"} {
		wantErr(t, err, want)
	}
	_, err = Load([]string{"--config", filepath.Join(dir, "missing.yaml")}, nil)
	wantErr(t, err, "config file: open "+filepath.Join(dir, "missing.yaml"))
	// Aliases are followed.
	file = writeFile(t, dir, "alias.yaml", "node:\n  address: &a h:1\nadmin:\n  password: *a\n")
	c, err := Load([]string{"--config", file}, nil)
	if err != nil || c.Admin.Password != "h:1" {
		t.Fatalf("alias: %v %v", c, err)
	}
}

// Bad values, from any source, are errors naming the key and where the
// value came from.
func TestBadValues(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	pw := writeFile(t, dir, "pw", "pw\n")
	notPEM := writeFile(t, dir, "not.pem", "hello\n")
	node := []string{"--node", "127.0.0.1:7004"}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no node", nil, nil, "node.address: required"},
		{"node without port", []string{"--node", "127.0.0.1"}, nil, `node.address (from --node): want HOST:PORT, not "127.0.0.1"`},
		{"node port 0", []string{"--node", "h:0"}, nil, `node.address (from --node): "h:0": the port must be a number from 1 to 65535`},
		{"node port too big", nil, map[string]string{"SLOTMOVER_NODE": "h:70000"}, `node.address (from $SLOTMOVER_NODE): "h:70000": the port must be a number from 1 to 65535`},
		{"node without host", []string{"--node", ":6379"}, nil, `node.address (from --node): ":6379" names no host`},
		{"admin empty", append([]string{"--admin", ""}, node...), nil, "admin.listen (from --admin): required"},
		{"admin bad", append([]string{"--admin", "localhost"}, node...), nil, `admin.listen (from --admin): want HOST:PORT`},
		{"admin open without password", append([]string{"--admin", "0.0.0.0:7100"}, node...), nil,
			"admin.listen (from --admin): 0.0.0.0:7100 is not a loopback address: set admin.password"},
		{"admin all interfaces without password", append([]string{"--admin", ":7100"}, node...), nil, "is not a loopback address"},
		{"metrics bad", append([]string{"--metrics", "7101"}, node...), nil, `metrics.listen (from --metrics): want HOST:PORT, not "7101"`},
		{"metrics on admin", append([]string{"--metrics", "127.0.0.1:7100"}, node...), nil, "metrics.listen (from --metrics): 127.0.0.1:7100 is admin.listen too"},
		{"max tasks", append([]string{"--max-tasks", "0"}, node...), nil, "tasks.max (from --max-tasks): must be at least 1, not 0"},
		{"nice", append([]string{"--nice", "20"}, node...), nil, "tasks.nice (from --nice): must be from 0 to 19, not 20"},
		{"negative nice", append([]string{"--nice=-1"}, node...), nil, "tasks.nice (from --nice): must be from 0 to 19, not -1"},
		{"zero duration", append([]string{"--pause-budget", "0s"}, node...), nil, "move.pause_budget (from --pause-budget): must be more than 0, not 0s"},
		{"negative duration", append([]string{"--replica-wait", "-1s"}, node...), nil, "move.replica_wait (from --replica-wait): must be more than 0, not -1s"},
		{"negative sleep", append([]string{"--cleanup-sleep", "-1ms"}, node...), nil, "move.cleanup_sleep (from --cleanup-sleep): must not be negative"},
		{"zero lag", node, map[string]string{"SLOTMOVER_MAX_LAG": "0"}, "move.max_lag (from $SLOTMOVER_MAX_LAG): must be more than 0, not 0"},
		{"zero window", append([]string{"--window", "0"}, node...), nil, "move.window (from --window): must be more than 0"},
		{"zero chunk", append([]string{"--chunk", "0"}, node...), nil, "move.chunk (from --chunk): must be more than 0"},
		{"zero big keys", append([]string{"--big-key-elements", "0"}, node...), nil, "move.big_key_elements (from --big-key-elements): must be more than 0"},
		{"fence over half the pause", append([]string{"--fence-timeout", "1001ms"}, node...), map[string]string{"SLOTMOVER_PAUSE_BUDGET": "2s"},
			"move.fence_timeout (from --fence-timeout): 1.001s is more than half of move.pause_budget, 2s (from $SLOTMOVER_PAUSE_BUDGET): the fence must leave"},
		{"spool dir missing", append([]string{"--spool-dir", filepath.Join(dir, "nope")}, node...), nil, "move.spool_dir (from --spool-dir): stat "},
		{"spool dir a file", append([]string{"--spool-dir", pw}, node...), nil, "is not a directory"},
		{"flag not a duration", append([]string{"--pause-budget", "2"}, node...), nil, `invalid argument "2" for "--pause-budget" flag: want a duration`},
		{"env not a number", node, map[string]string{"SLOTMOVER_MAX_LAG": "lots"}, `$SLOTMOVER_MAX_LAG (move.max_lag): want an integer, not "lots"`},
		{"env not a bool", node, map[string]string{"SLOTMOVER_ALLOW_EVICTION": "sure"}, `$SLOTMOVER_ALLOW_EVICTION (move.allow_eviction): want true or false`},
		{"unknown flag", append([]string{"--max-lagg", "1"}, node...), nil, "unknown flag: --max-lagg"},
		{"stray argument", append(node, "extra"), nil, `unexpected argument "extra"`},
		{"log level", append([]string{"--log-level", "loud"}, node...), nil, `log.level (from --log-level): want debug, info, warn or error, not "loud"`},
		{"log format", append([]string{"--log-format", "xml"}, node...), nil, `log.format (from --log-format): want text or json, not "xml"`},

		{"tls file without tls", append([]string{"--tls-ca-cert", p.ca}, node...), nil,
			"node.tls.ca (from --tls-ca-cert): is set but node.tls.enabled is false: turn TLS on (--tls) or drop it"},
		{"tls missing ca", append([]string{"--tls", "--tls-ca-cert", filepath.Join(dir, "none.pem")}, node...), nil,
			"node.tls.ca (from --tls-ca-cert): open " + filepath.Join(dir, "none.pem")},
		{"tls ca not PEM", append([]string{"--tls", "--tls-ca-cert", notPEM}, node...), nil, "node.tls.ca (from --tls-ca-cert): no PEM certificate in " + notPEM},
		{"tls cert without key", append([]string{"--tls", "--tls-cert", p.cert}, node...), nil,
			"node.tls.cert (from --tls-cert): a client certificate needs both node.tls.cert and node.tls.key"},
		{"tls key not a key", append([]string{"--tls", "--tls-cert", p.cert, "--tls-key", p.ca}, node...), nil, "node.tls.cert (from --tls-cert): "},
		{"tls missing key", append([]string{"--tls", "--tls-cert", p.cert, "--tls-key", filepath.Join(dir, "k")}, node...), nil,
			"node.tls.key (from --tls-key): open "},
		{"password file missing", append([]string{"--password-file", filepath.Join(dir, "none")}, node...), nil,
			"node.password_file (from --password-file): open " + filepath.Join(dir, "none")},

		{"nats url scheme", append([]string{"--nats", "http://h:4222"}, node...), nil, `nats.servers[0] (from --nats): "http://h:4222": want a nats://, tls://, ws:// or wss:// URL`},
		{"nats url host", append([]string{"--nats", "nats://a:1,nats://:4222"}, node...), nil, `nats.servers[1] (from --nats): "nats://:4222" names no host`},
		{"nats bare", append([]string{"--nats", "natshost"}, node...), nil, `nats.servers[0] (from --nats): want HOST:PORT, not "natshost"`},
		{"nats off with creds", append([]string{"--nats-creds", pw}, node...), nil,
			"nats.creds_file (from --nats-creds): is set but nats.servers is empty (NATS is off)"},
		{"nats user without password", append([]string{"--nats", "nats://h:4222", "--nats-user", "u"}, node...), nil,
			"nats.user (from --nats-user): needs nats.password or nats.password_file"},
		{"nats password without user", append([]string{"--nats", "nats://h:4222", "--nats-password", "p"}, node...), nil,
			"nats.password (from --nats-password): needs nats.user"},
		{"nats two ways", append([]string{"--nats", "nats://h:4222", "--nats-token", "t", "--nats-creds", pw}, node...), nil,
			"nats: choose one way to authenticate, not nats.token and nats.creds_file"},
		{"nats token twice", append([]string{"--nats", "nats://h:4222", "--nats-token", "t", "--nats-token-file", pw}, node...), nil,
			"nats.token (from --nats-token): and nats.token_file (from --nats-token-file) are both set"},
		{"nats nkey missing", append([]string{"--nats", "nats://h:4222", "--nats-nkey", filepath.Join(dir, "seed")}, node...), nil,
			"nats.nkey_file (from --nats-nkey): open " + filepath.Join(dir, "seed")},
		{"nats creds a directory", append([]string{"--nats", "nats://h:4222", "--nats-creds", dir}, node...), nil,
			"nats.creds_file (from --nats-creds): " + dir + " is a directory"},
		{"nats tls file without tls", append([]string{"--nats", "nats://h:4222", "--nats-tls-insecure"}, node...), nil,
			"nats.tls.insecure_skip_verify (from --nats-tls-insecure): is set but nats.tls.enabled is false: turn TLS on (--nats-tls)"},
		{"subject prefix wildcard", append([]string{"--nats-subject-prefix", "slot.*"}, node...), nil,
			`nats.subject_prefix (from --nats-subject-prefix): "slot.*" is not a NATS subject`},
		{"subject prefix empty token", append([]string{"--nats-subject-prefix", "a..b"}, node...), nil, `"a..b" is not a NATS subject`},
		{"subject prefix empty", append([]string{"--nats-subject-prefix", ""}, node...), nil, "nats.subject_prefix (from --nats-subject-prefix): must not be empty"},
		{"alias with a dot", append([]string{"--nats-alias", "shard.a"}, node...), nil, `nats.alias (from --nats-alias): "shard.a" is not one subject token`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(c.args, envMap(c.env))
			if err == nil {
				t.Fatalf("no error; got %+v", cfg)
			}
			wantErr(t, err, c.want)
		})
	}
	// Every problem is told at once.
	_, err := Load([]string{"--node", "x", "--max-tasks", "0", "--log-format", "xml"}, nil)
	for _, want := range []string{"node.address (from --node)", "tasks.max (from --max-tasks)", "log.format (from --log-format)"} {
		wantErr(t, err, want)
	}
	// What is fine.
	for _, args := range [][]string{
		{"--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0"},
		{"--admin", "[::1]:7100", "--metrics", ""},
		{"--admin", "localhost:7100"},
		{"--admin", "0.0.0.0:7100", "--admin-password-file", pw},
		{"--nats", "nats://h:4222,tls://h2:4222,ws://h3:80,wss://h4:443,h5:4222", "--nats-user", "u", "--nats-password-file", pw},
		{"--nats", "nats://h:4222", "--nats-alias", "shard-a", "--nats-subject-prefix", "acme.slotmover"},
		{"--cleanup-sleep", "0s", "--fence-timeout", "1s", "--pause-budget", "2s"},
		{"--spool-dir", dir},
	} {
		if _, err := Load(append(node, args...), nil); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}
