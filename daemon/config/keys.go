package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A key is one setting: its path in the YAML file, its flag (and so its
// environment variable) and its help. The field it sets is found from the
// path through Serve's yaml tags.
type key struct {
	path string // "node.tls.ca"
	flag string // "tls-ca-cert", without dashes
	// old is the flag's name before it took move's: still read, hidden,
	// and so is its environment variable.
	old   string
	usage string // as for package flag: a `word` in backquotes names the value
	// file: the value names a file or folder; relative in the YAML file, it
	// is relative to the file's folder.
	file bool
	// other is the key this one stands for too (password and
	// password_file): setting one from a source clears the other when that
	// was set by a source of lower precedence.
	other string

	index []int        // the field in Serve
	typ   reflect.Type // its type
}

// keys lists every setting, in the order --help shows them. A test checks that
// each field of Serve has exactly one.
var keys = []*key{
	{path: "node.address", flag: "node", usage: "the local master this sidecar serves, `HOST:PORT` (required)"},
	{path: "node.user", flag: "user", old: "node-user", usage: "ACL `user` for Redis (the local master and the sources alike; default the default user)"},
	{path: "node.password", flag: "password", old: "node-password", other: "node.password_file", usage: "`password` for Redis"},
	{path: "node.password_file", flag: "password-file", old: "node-password-file", other: "node.password", file: true, usage: "read the Redis password from this `file`"},
	{path: "node.tls.enabled", flag: "tls", old: "node-tls", usage: "connect to Redis with TLS"},
	{path: "node.tls.ca", flag: "tls-ca-cert", old: "node-tls-ca", file: true, usage: "trust the CA certificates in this PEM `file` for Redis (default the system's)"},
	{path: "node.tls.cert", flag: "tls-cert", old: "node-tls-cert", file: true, usage: "client certificate for Redis, PEM `file` (with --tls-key)"},
	{path: "node.tls.key", flag: "tls-key", old: "node-tls-key", file: true, usage: "client key for Redis, PEM `file`"},
	{path: "node.tls.server_name", flag: "tls-server-name", old: "node-tls-server-name", usage: "`name` to verify in every master's certificate (default the host dialled)"},
	{path: "node.tls.insecure_skip_verify", flag: "tls-insecure", old: "node-tls-insecure-skip-verify", usage: "do not verify Redis's certificates (tests only)"},

	{path: "nats.servers", flag: "nats", usage: "NATS server `URLs`, comma-separated (none: $NATS_URL if set, else NATS off, admin port only)"},
	{path: "nats.user", flag: "nats-user", usage: "NATS `user` (with --nats-password)"},
	{path: "nats.password", flag: "nats-password", other: "nats.password_file", usage: "NATS `password`"},
	{path: "nats.password_file", flag: "nats-password-file", other: "nats.password", file: true, usage: "read the NATS password from this `file`"},
	{path: "nats.token", flag: "nats-token", other: "nats.token_file", usage: "NATS `token`"},
	{path: "nats.token_file", flag: "nats-token-file", other: "nats.token", file: true, usage: "read the NATS token from this `file`"},
	{path: "nats.nkey_file", flag: "nats-nkey", file: true, usage: "NATS nkey seed `file`"},
	{path: "nats.creds_file", flag: "nats-creds", file: true, usage: "NATS credentials `file` (user JWT and nkey seed)"},
	{path: "nats.tls.enabled", flag: "nats-tls", usage: "connect to NATS with TLS"},
	{path: "nats.tls.ca", flag: "nats-tls-ca-cert", old: "nats-tls-ca", file: true, usage: "trust the CA certificates in this PEM `file` for NATS (default the system's)"},
	{path: "nats.tls.cert", flag: "nats-tls-cert", file: true, usage: "client certificate for NATS, PEM `file` (with --nats-tls-key)"},
	{path: "nats.tls.key", flag: "nats-tls-key", file: true, usage: "client key for NATS, PEM `file`"},
	{path: "nats.tls.server_name", flag: "nats-tls-server-name", usage: "`name` to verify in the NATS servers' certificates (default the host dialled)"},
	{path: "nats.tls.insecure_skip_verify", flag: "nats-tls-insecure", old: "nats-tls-insecure-skip-verify", usage: "do not verify NATS's certificates (tests only)"},
	{path: "nats.subject_prefix", flag: "nats-subject-prefix", usage: "`prefix` of every subject: <prefix>.<node>.import, …"},
	{path: "nats.alias", flag: "nats-alias", usage: "a second `name` for <node> in subjects, besides the master's node ID"},

	{path: "admin.listen", flag: "admin", usage: "admin port (RESP: CLUSTER MIGRATION …), `HOST:PORT`"},
	{path: "admin.password", flag: "admin-password", other: "admin.password_file", usage: "`password` the admin port's AUTH asks for (required off loopback)"},
	{path: "admin.password_file", flag: "admin-password-file", other: "admin.password", file: true, usage: "read the admin password from this `file`"},
	{path: "admin.tls.cert", flag: "admin-tls-cert", file: true, usage: "serve the admin port over TLS only, with this PEM certificate `file` (with --admin-tls-key)"},
	{path: "admin.tls.key", flag: "admin-tls-key", file: true, usage: "private key of the admin port's certificate, PEM `file`"},
	{path: "admin.tls.client_ca", flag: "admin-tls-client-ca", file: true, usage: "require admin clients to present a certificate signed by a CA of this PEM `file`"},

	{path: "metrics.listen", flag: "metrics", usage: "HTTP port of /metrics, /healthz and /readyz, `HOST:PORT` (empty: off)"},
	{path: "metrics.pprof", flag: "pprof", usage: "also serve Go's profiles on /debug/pprof/ of the metrics port (where the sidecar spends CPU and memory; off: a profile costs CPU and shows internals)"},

	{path: "tasks.max", flag: "max-tasks", usage: "`tasks` running at once"},
	{path: "tasks.nice", flag: "nice", usage: "raise the sidecar's nice `value` to this (0-19; 0 leaves it), so that when CPU runs short the master beside it runs first"},

	{path: "state.dir", flag: "state-dir", file: true, usage: "`directory` of the task records and the node's lock, for repairs without NATS (default $STATE_DIRECTORY, else $XDG_STATE_HOME/slotmover, else ~/.local/state/slotmover)"},

	{path: "move.max_lag", flag: "max-lag", usage: "start a cutover when the target trails the source by fewer `bytes` of stream"},
	{path: "move.pause_budget", flag: "pause-budget", usage: "CLIENT PAUSE timeout on the source: the longest writers can be held"},
	{path: "move.fence_timeout", flag: "fence-timeout", usage: "give up a cutover attempt (and unpause) if the target has not caught up by then"},
	{path: "move.max_attempts", flag: "max-attempts", usage: "cutover `attempts` before rolling back"},
	{path: "move.max_catch_up", flag: "max-catch-up", usage: "fail (and roll back) a move whose target has not come close enough for a cutover after this long"},
	{path: "move.replica_wait", flag: "replica-wait", usage: "after the switch, wait this long at most for the target's replicas to hold every moved key before the source's copies are removed"},
	{path: "move.window", flag: "window", usage: "unanswered `commands` in flight to the target"},
	{path: "move.big_key_elements", flag: "big-key-elements", usage: "replay collections with at least this many `elements` as chunked commands"},
	{path: "move.chunk", flag: "chunk", usage: "`elements` per command when replaying a big key, at most"},
	{path: "move.chunk_time", flag: "chunk-time", usage: "the longest a big key's scan on the source or write on the target may hold that server, by a cost model measured per element and byte"},
	{path: "move.reply_per_key", flag: "reply-per-key", usage: "check the target's reply to every snapshot command instead of proving from its error counts that none failed (slower)"},
	{path: "move.cleanup_batch", flag: "cleanup-batch", usage: "orphaned `keys` removed from the source per round trip"},
	{path: "move.cleanup_sleep", flag: "cleanup-sleep", usage: "pause between cleanup batches"},
	{path: "move.spool_dir", flag: "spool-dir", file: true, usage: "`directory` for stream spool files (default the system temp dir)"},
	{path: "move.max_spool", flag: "max-spool", usage: "roll back when the source's data not yet applied on the target passes this many `bytes`, in memory and spool files (negative: no bound)"},
	{path: "move.allow_eviction", flag: "allow-eviction", usage: "move even when the slots' keys look too big for the target's maxmemory (a move still rolls back if the target evicts a key)"},
	{path: "move.snapshot", flag: "snapshot", usage: "how the keys are first copied: `auto`, rdb (a full sync: the source forks) or keys (no fork: only the chosen slots' keys are read; a source without a replication backlog starts one, without a fork)"},
	{path: "move.budget", flag: "budget", usage: "what a move may cost the source and the target, as a probe sees it: `default` (no probe over 20ms, p75 within 2x its idle p99 + 1ms), off, or max-event=DURATION,max-rise=RATIO; the copy and cleanup hold while over it"},
	{path: "move.keep_source_config", flag: "keep-source-config", usage: "do not turn off the source's repl-diskless-sync-delay and rdbcompression for the sync"},

	{path: "log.level", flag: "log-level", usage: "`level` of the log: debug, info, warn or error"},
	{path: "log.format", flag: "log-format", usage: "`format` of the log: text or json"},
}

// configFlag names the YAML file; it is the one flag with no key.
const configFlag = "config"

// envPrefix starts every environment variable.
const envPrefix = "SLOTMOVER_"

// envName is the environment variable of a flag: SLOTMOVER_ and the flag
// in upper snake case.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

var (
	keyByPath = map[string]*key{}
	keyByFlag = map[string]*key{}
	// sections maps the path of every mapping of the file ("", "node",
	// "node.tls") to the keys it may hold, in table order.
	sections = map[string][]string{}
)

func init() {
	root := reflect.TypeFor[Serve]()
	for _, k := range keys {
		if keyByPath[k.path] != nil || keyByFlag[k.flag] != nil || k.flag == configFlag {
			panic("config: key listed twice: " + k.path + " --" + k.flag)
		}
		keyByPath[k.path], keyByFlag[k.flag] = k, k
		t := root
		parts := strings.Split(k.path, ".")
		for i, part := range parts {
			f, ok := fieldByTag(t, part)
			if !ok {
				panic("config: no field for key " + k.path)
			}
			k.index = append(k.index, f.Index...)
			t = f.Type
			section := strings.Join(parts[:i], ".")
			if !contains(sections[section], part) {
				sections[section] = append(sections[section], part)
			}
		}
		k.typ = t
		if !parsable(t) {
			panic("config: no parser for " + t.String() + ", the type of " + k.path)
		}
	}
}

// fieldByTag finds the field of struct type t whose yaml tag is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var durationType = reflect.TypeFor[time.Duration]()

// parsable says whether parseValue reads values of type t.
func parsable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Uint64:
		return true
	}
	return isStrings(t)
}

func isStrings(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String
}

// parseValue reads s as a value of type t, the same way for a flag, an
// environment variable and a scalar of the file. A list is comma-separated.
func parseValue(t reflect.Type, s string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	switch {
	case t == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return v, fmt.Errorf("want a duration such as 250ms, 2s or 10m, not %q", s)
		}
		v.SetInt(int64(d))
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return v, fmt.Errorf("want true or false, not %q", s)
		}
		v.SetBool(b)
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, t.Bits())
		if err != nil {
			return v, fmt.Errorf("want an integer, not %q", s)
		}
		v.SetInt(n)
	case t.Kind() == reflect.Uint64:
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return v, fmt.Errorf("want a positive integer, not %q", s)
		}
		v.SetUint(n)
	case isStrings(t):
		var list []string
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				list = append(list, part)
			}
		}
		v.Set(reflect.ValueOf(list))
	default:
		return v, fmt.Errorf("cannot hold a %s", t)
	}
	return v, nil
}

// format shows a value the way parseValue reads it.
func format(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()).String()
	case isStrings(v.Type()):
		return strings.Join(v.Interface().([]string), ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}

// Levels of precedence.
const (
	fromDefault = iota
	fromFile
	fromEnv
	fromFlag
)

// origin is where a key's value came from.
type origin struct {
	level int
	where string // "FILE:LINE", "$SLOTMOVER_NODE", "--node"
}

// field is the value of k in c.
func (k *key) field(c *Serve) reflect.Value {
	return reflect.ValueOf(c).Elem().FieldByIndex(k.index)
}

// set gives k the value v from o. When k and its other key (a password and
// its file) are both given, the one from the source of higher precedence
// wins; from one source, both are kept for check to refuse.
func (c *Serve) set(k *key, v reflect.Value, o origin) {
	k.field(c).Set(v)
	if c.from == nil {
		c.from = map[string]origin{}
	}
	c.from[k.path] = o
	if k.other == "" || v.IsZero() {
		return
	}
	other := keyByPath[k.other]
	if prev := c.from[k.other]; prev.level < o.level {
		f := other.field(c)
		f.Set(reflect.Zero(f.Type()))
		delete(c.from, k.other)
	}
}
