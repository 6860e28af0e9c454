package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/throttle"
)

// check refuses what cannot work, naming each key and where its value came
// from, all problems at once; then it reads the password and token files.
func (c *Serve) check() error {
	v := checker{c: c}

	n := &c.Node
	if n.Address == "" {
		v.fail("node.address", "required: the local master this sidecar serves (--node, $SLOTMOVER_NODE or node.address in the file)")
	} else {
		v.hostPort("node.address", n.Address, false)
	}
	v.either("node.password", "node.password_file")
	v.tls("node.tls", &n.TLS)

	v.nats(&c.NATS)

	a := &c.Admin
	if a.Listen == "" {
		v.fail("admin.listen", "required: the admin port is how an operator reaches the sidecar")
	} else if v.hostPort("admin.listen", a.Listen, true) && !loopback(a.Listen) && a.Password == "" && a.PasswordFile == "" {
		v.fail("admin.listen", "%s is not a loopback address: set admin.password (or admin.password_file), or listen on 127.0.0.1", a.Listen)
	}
	v.either("admin.password", "admin.password_file")
	v.serverTLS("admin.tls", &a.TLS)
	if m := c.Metrics.Listen; m != "" && v.hostPort("metrics.listen", m, true) && m == a.Listen && !strings.HasSuffix(m, ":0") {
		v.fail("metrics.listen", "%s is admin.listen too: give them different ports", m)
	}

	if c.Tasks.Max < 1 {
		v.fail("tasks.max", "must be at least 1, not %d", c.Tasks.Max)
	}
	if c.Tasks.Nice < 0 || c.Tasks.Nice > 19 {
		v.fail("tasks.nice", "must be from 0 to 19, not %d", c.Tasks.Nice)
	}

	mv := &c.Move
	for _, p := range []string{"move.max_lag", "move.pause_budget", "move.fence_timeout", "move.max_attempts", "move.max_catch_up",
		"move.replica_wait", "move.window", "move.big_key_elements", "move.chunk", "move.cleanup_batch"} {
		v.positive(p)
	}
	if mv.CleanupSleep < 0 {
		v.fail("move.cleanup_sleep", "must not be negative, not %s", mv.CleanupSleep)
	}
	if mv.FenceTimeout > 0 && mv.PauseBudget > 0 && mv.FenceTimeout > mv.PauseBudget/2 {
		v.fail("move.fence_timeout", "%s is more than half of move.pause_budget, %s%s: the fence must leave the pause time for the switch",
			mv.FenceTimeout, mv.PauseBudget, v.from("move.pause_budget"))
	}
	if s := mv.Snapshot; s != mover.SnapshotAuto && s != mover.SnapshotRDB && s != mover.SnapshotKeys {
		v.fail("move.snapshot", "want auto, rdb or keys, not %q", s)
	}
	if _, err := throttle.ParseBudget(mv.Budget); err != nil {
		v.fail("move.budget", "%v", err)
	}
	if d := c.State.Dir; d != "" {
		if st, err := os.Stat(d); err == nil && !st.IsDir() {
			v.fail("state.dir", "%s is not a directory", d)
		}
	}
	if mv.SpoolDir != "" {
		if st, err := os.Stat(mv.SpoolDir); err != nil {
			v.fail("move.spool_dir", "%v", err)
		} else if !st.IsDir() {
			v.fail("move.spool_dir", "%s is not a directory", mv.SpoolDir)
		}
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		v.fail("log.level", "want debug, info, warn or error, not %q", c.Log.Level)
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		v.fail("log.format", "want text or json, not %q", f)
	}

	if len(v.errs) > 0 {
		return errors.Join(v.errs...)
	}
	// The secrets, read last: nothing is read for a config that is refused.
	v.secret("node.password_file", "node.password")
	v.secret("admin.password_file", "admin.password")
	v.secret("nats.password_file", "nats.password")
	v.secret("nats.token_file", "nats.token")
	return errors.Join(v.errs...)
}

func (v *checker) nats(n *NATS) {
	// A server may carry credentials (nats://user:pass@host, or a token,
	// nats://token@host): errors show it redacted.
	for i, s := range n.Servers {
		p := fmt.Sprintf("nats.servers[%d]", i)
		if !strings.Contains(s, "://") {
			// nats.go takes token@HOST:PORT too; the address is what follows the '@'.
			v.hostPortAt("nats.servers", p, s[strings.LastIndex(s, "@")+1:], false)
			continue
		}
		u, err := url.Parse(s)
		switch {
		case err != nil:
			// A url.Error quotes the URL whole: its reason alone is shown.
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			v.failAt("nats.servers", p, "%q: %v", RedactURL(s), err)
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			v.failAt("nats.servers", p, "%q: want a nats://, tls://, ws:// or wss:// URL", RedactURL(s))
		case u.Hostname() == "":
			v.failAt("nats.servers", p, "%q names no host", RedactURL(s))
		}
	}
	if n.SubjectPrefix == "" {
		v.fail("nats.subject_prefix", "must not be empty")
	} else if slices.ContainsFunc(strings.Split(n.SubjectPrefix, "."), func(tok string) bool { return !subjectToken(tok) }) {
		v.fail("nats.subject_prefix", "%q is not a NATS subject: dot-separated names without spaces, * or >", n.SubjectPrefix)
	}
	if n.Alias != "" && (strings.Contains(n.Alias, ".") || !subjectToken(n.Alias)) {
		v.fail("nats.alias", "%q is not one subject token: a name without dots, spaces, * or >", n.Alias)
	}
	if len(n.Servers) == 0 {
		// NATS is off: a credential or a TLS setting for it is a mistake.
		for _, k := range keys {
			if p := k.path; strings.HasPrefix(p, "nats.") && p != "nats.subject_prefix" && p != "nats.alias" && !v.zero(p) {
				v.fail(p, "is set but nats.servers is empty (NATS is off): name the servers (--nats) or drop it")
			}
		}
		return
	}
	v.either("nats.password", "nats.password_file")
	v.either("nats.token", "nats.token_file")
	pass := n.Password != "" || n.PasswordFile != ""
	if n.User != "" && !pass {
		v.fail("nats.user", "needs nats.password or nats.password_file")
	}
	if n.User == "" && pass {
		v.fail("nats.password", "needs nats.user")
	}
	var ways []string
	if n.User != "" || pass {
		ways = append(ways, "nats.user and password")
	}
	if n.Token != "" || n.TokenFile != "" {
		ways = append(ways, "nats.token")
	}
	if n.NKeyFile != "" {
		ways = append(ways, "nats.nkey_file")
	}
	if n.CredsFile != "" {
		ways = append(ways, "nats.creds_file")
	}
	if len(ways) > 1 {
		v.errs = append(v.errs, fmt.Errorf("nats: choose one way to authenticate, not %s", strings.Join(ways, " and ")))
	}
	v.readable("nats.nkey_file", n.NKeyFile)
	v.readable("nats.creds_file", n.CredsFile)
	v.tls("nats.tls", &n.TLS)
}

// subjectToken says whether s can stand between two dots of a subject.
func subjectToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n*>")
}

// tls checks a TLS section at path ("node.tls").
func (v *checker) tls(path string, t *TLS) {
	if !t.Enabled {
		for _, sub := range []string{"ca", "cert", "key", "server_name", "insecure_skip_verify"} {
			if !v.zero(path + "." + sub) {
				v.fail(path+"."+sub, "is set but %s.enabled is false: turn TLS on (--%s) or drop it", path, keyByPath[path+".enabled"].flag)
			}
		}
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		v.fail(path+".cert", "a client certificate needs both %s.cert and %s.key", path, path)
		return
	}
	if _, sub, err := t.config(); err != nil {
		v.fail(path+"."+sub, "%v", err)
	}
}

// serverTLS checks a server's TLS section at path ("admin.tls").
func (v *checker) serverTLS(path string, t *ServerTLS) {
	if t.Cert == "" && t.Key == "" {
		if t.ClientCA != "" {
			v.fail(path+".client_ca", "is set but the port has no certificate: set %s.cert and %s.key, or drop it", path, path)
		}
		return
	}
	if (t.Cert == "") != (t.Key == "") {
		v.fail(path+".cert", "TLS needs both %s.cert and %s.key", path, path)
		return
	}
	if _, sub, err := t.config(); err != nil {
		v.fail(path+"."+sub, "%v", err)
	}
}

// checker gathers the problems of a configuration.
type checker struct {
	c    *Serve
	errs []error
}

// fail records a problem of the key at path.
func (v *checker) fail(path, format string, args ...any) {
	v.failAt(path, path, format, args...)
}

// failAt records a problem shown at name (a list's item) of the key at path.
func (v *checker) failAt(path, name, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("%s%s: %s", name, v.from(path), fmt.Sprintf(format, args...)))
}

// from says where the key's value came from, " (from --node)", or nothing
// for a default.
func (v *checker) from(path string) string {
	if o, ok := v.c.from[path]; ok {
		return " (from " + o.where + ")"
	}
	return ""
}

func (v *checker) zero(path string) bool { return keyByPath[path].field(v.c).IsZero() }

func (v *checker) positive(path string) {
	f := keyByPath[path].field(v.c)
	if f.CanInt() && f.Int() > 0 || f.CanUint() && f.Uint() > 0 {
		return
	}
	v.fail(path, "must be more than 0, not %s", format(f))
}

// either refuses a secret given both as itself and as a file by one source.
func (v *checker) either(secret, file string) {
	if !v.zero(secret) && !v.zero(file) {
		v.fail(secret, "and %s%s are both set: give one", file, v.from(file))
	}
}

func (v *checker) hostPort(path, addr string, listen bool) bool {
	return v.hostPortAt(path, path, addr, listen)
}

// hostPortAt checks a HOST:PORT: a listen address may leave out the host
// (every interface) and take port 0 (a free one).
func (v *checker) hostPortAt(path, name, addr string, listen bool) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.failAt(path, name, "want HOST:PORT, not %q", addr)
		return false
	}
	n, err := strconv.Atoi(port)
	low := 1
	if listen {
		low = 0
	}
	if err != nil || n < low || n > 65535 {
		v.failAt(path, name, "%q: the port must be a number from %d to 65535", addr, low)
		return false
	}
	if host == "" && !listen {
		v.failAt(path, name, "%q names no host", addr)
		return false
	}
	return true
}

// loopback says whether a listen address is reachable from this host
// only: 127.0.0.0/8, ::1 or localhost. No host, 0.0.0.0 and :: are every
// interface.
func loopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedactURL hides the credentials a server URL may carry, for logs and
// errors: the password of scheme://user:pass@host (as url.URL.Redacted)
// and the user part too when it stands alone, as a token does
// (nats://token@host), which url.URL.Redacted would show. It works on the
// text, so that a URL that does not parse is hidden as well; everything up
// to the last '@' is taken as credentials, which errs on hiding too much.
func RedactURL(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s[:at], "://"); i >= 0 {
		start = i + len("://")
	}
	const hidden = "xxxxx"
	cred := s[start:at]
	if user, _, ok := strings.Cut(cred, ":"); ok {
		cred = user + ":" + hidden
	} else {
		cred = hidden
	}
	return s[:start] + cred + s[at:]
}

// readable checks that a named file can be opened.
func (v *checker) readable(path, file string) {
	if file == "" {
		return
	}
	if err := readableFile(file); err != nil {
		v.fail(path, "%v", err)
	}
}

func readableFile(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory, not a file", file)
	}
	return nil
}

// secret reads the file at key path into the key secret: its one line,
// without the newline that ends it.
func (v *checker) secret(path, secret string) {
	k := keyByPath[path]
	file := k.field(v.c).String()
	if file == "" {
		return
	}
	data, err := os.ReadFile(file)
	if err != nil {
		v.fail(path, "%v", err)
		return
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	switch {
	case s == "":
		v.fail(path, "%s is empty", file)
	case strings.ContainsAny(s, "\r\n"):
		v.fail(path, "%s holds more than one line", file)
	default:
		// At the file's own level, so that the file's key stays set.
		v.c.set(keyByPath[secret], reflect.ValueOf(s), origin{v.c.from[path].level, path})
	}
}
