package admin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

// redisCLI is the redis-cli the tests run: $SLOTMOVER_REDIS_CLI, else the
// one on the PATH (Debian's).
func redisCLI(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLOTMOVER_REDIS_CLI")
	if bin == "" {
		bin = "redis-cli"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("skipped: no redis-cli: %v", err)
	}
	return path
}

// cli runs redis-cli against port with args and returns its stdout and
// stderr.
func cli(t *testing.T, port int, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, redisCLI(t), append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("redis-cli %q: %v (stderr %s)", args, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// fields reads redis-cli's raw output of one task (field and value on
// alternate lines).
func fields(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2*len(wantTaskFields) {
		t.Fatalf("redis-cli printed %d lines for one task, want %d:\n%s", len(lines), 2*len(wantTaskFields), out)
	}
	m := map[string]string{}
	for i := 0; i < len(lines); i += 2 {
		if lines[i] != wantTaskFields[i/2] {
			t.Fatalf("line %d is %q, want the field %q:\n%s", i, lines[i], wantTaskFields[i/2], out)
		}
		m[lines[i]] = lines[i+1]
	}
	return m
}

// The real redis-cli, as an operator runs it: IMPORT, STATUS, CANCEL,
// with and without the password, and refusals.
func TestRedisCLI(t *testing.T) {
	redisCLI(t)
	f := newFake()
	s := serve(t, Config{Password: "sekret"}, f)
	auth := []string{"-a", "sekret", "--no-auth-warning"}
	run := func(args ...string) string {
		out, _ := cli(t, s.port, append(auth, args...)...)
		return out
	}

	if out, _ := cli(t, s.port, "CLUSTER", "MIGRATION", "IMPORT", "0", "5460"); out != "NOAUTH Authentication required.\n\n" {
		t.Fatalf("without the password: %q", out)
	}
	if out, stderr := cli(t, s.port, "-a", "wrong", "--no-auth-warning", "CLUSTER", "MIGRATION", "STATUS", "ALL"); !strings.Contains(stderr, "WRONGPASS") || !strings.HasPrefix(out, "NOAUTH") {
		t.Fatalf("with a wrong password: stdout %q, stderr %q", out, stderr)
	}
	if imports, _ := f.seen(); len(imports) != 0 {
		t.Fatalf("the manager was called without authentication: %q", imports)
	}

	if out := run("PING"); out != "PONG\n" {
		t.Fatalf("PING: %q", out)
	}
	id := strings.TrimSpace(run("CLUSTER", "MIGRATION", "IMPORT", "0", "5460"))
	if imports, _ := f.seen(); id != "task01" || len(imports) != 1 || imports[0] != "0-5460" {
		t.Fatalf("IMPORT 0 5460 printed %q; the manager got %q", id, imports)
	}
	m := fields(t, run("CLUSTER", "MIGRATION", "STATUS", "ID", id))
	if m["id"] != id || m["slots"] != "0-5460" || m["state"] != "running" || m["end_time"] != "-1" || m["keys_copied"] != "42" {
		t.Fatalf("STATUS ID %s: %v", id, m)
	}
	// --no-raw shows the types: integers where 8.4 has integers.
	typed := run("--no-raw", "CLUSTER", "MIGRATION", "STATUS", "ALL")
	for _, want := range []string{`1)  1) "id"`, `2) "task01"`, `16) (integer) 0`, `22) (integer) -1`, `34) (integer) 42`} {
		if !strings.Contains(typed, want) {
			t.Errorf("STATUS ALL --no-raw lacks %q:\n%s", want, typed)
		}
	}
	if out := run("CLUSTER", "MIGRATION", "CANCEL", "ID", id); out != "1\n" {
		t.Fatalf("CANCEL ID %s: %q", id, out)
	}
	if m := fields(t, run("CLUSTER", "MIGRATION", "STATUS", "ID", id)); m["state"] != "canceled" {
		t.Fatalf("after CANCEL: %v", m)
	}
	if out := run("CLUSTER", "MIGRATION", "CANCEL", "ALL"); out != "0\n" {
		t.Fatalf("CANCEL ALL with nothing running: %q", out)
	}
	if out := run("CLUSTER", "MIGRATION", "IMPORT", "0", "100", "9000", "9100"); out != "task02\ntask03\n" {
		t.Fatalf("IMPORT across two sources: %q", out)
	}

	// Refusals: printed as errors, nothing reaches the manager.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"CLUSTER", "MIGRATION", "IMPORT", "0", "16384"}, "ERR Invalid or out of range slot '16384' (slots are 0-16383)"},
		{[]string{"CLUSTER", "MIGRATION", "IMPORT", "5460", "0"}, "ERR start slot number 5460 is greater than end slot number 0"},
		{[]string{"CLUSTER", "MIGRATION", "IMPORT", "0"}, "ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS"}, "ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"FLUSHALL"}, "ERR unknown command 'FLUSHALL'"},
	} {
		// redis-cli prints an error with an empty line after it.
		if out := run(tc.args...); out != tc.want+"\n\n" {
			t.Errorf("%q: %q, want %q", tc.args, out, tc.want)
		}
	}
	if imports, _ := f.seen(); len(imports) != 2 {
		t.Fatalf("the manager got %q", imports)
	}
	// A manager's refusal.
	f.fail(errors.New("slots overlap a running task: slots 0-10 are moved by task task02"), nil, nil)
	if out := run("CLUSTER", "MIGRATION", "IMPORT", "0", "10"); out != "ERR slots overlap a running task: slots 0-10 are moved by task task02\n\n" {
		t.Fatalf("overlap: %q", out)
	}
	// redis-cli -3 asks HELLO 3, is refused and goes on in RESP2. The two
	// tasks of the import across two sources are cancelled.
	if out := run("-3", "CLUSTER", "MIGRATION", "CANCEL", "ALL"); out != "2\n" {
		t.Fatalf("redis-cli -3: %q", out)
	}
	if out := run("INFO", "tasks"); !strings.Contains(out, "tasks_total:3\r\n") || !strings.Contains(out, "tasks_canceled:3\r\n") {
		t.Fatalf("INFO tasks: %q", out)
	}
}

// asmServer is the Redis build with atomic slot migration built in, kept
// beside the repository.
func asmServer(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "shared", "redis-builds", "redis-unstable-asm", "redis-server"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipped: no Redis build with atomic slot migration at %s", bin)
	}
	return bin
}

// One operator's script, run with the same redis-cli against a Redis with
// atomic slot migration built in and against this port: every reply has
// the same shape (types, nesting, field names; this port's extra fields
// come after 8.4's).
func TestSameScriptAgainstRedisWithBuiltInMigration(t *testing.T) {
	redisCLI(t)
	bin := asmServer(t)
	defer func(was string) { localcluster.ServerBin = was }(localcluster.ServerBin)
	localcluster.ServerBin = bin
	c := harness.ClusterT(t, []string{"0-16383", ""}, localcluster.Options{})
	s := serve(t, Config{}, newFake())

	script := func(port int) [][]string {
		id := strings.TrimSpace(cliOut(t, port, "CLUSTER", "MIGRATION", "IMPORT", "0", "100"))
		if id == "" || strings.Contains(id, "ERR") {
			t.Fatalf("IMPORT 0 100 on port %d: %q", port, id)
		}
		var shapes [][]string
		for _, args := range [][]string{
			{"CLUSTER", "MIGRATION", "STATUS", "ID", id},
			{"CLUSTER", "MIGRATION", "STATUS", "ALL"},
			{"CLUSTER", "MIGRATION", "STATUS", "ID", "nosuch"},
			{"CLUSTER", "MIGRATION", "CANCEL", "ID", "nosuch"},
			{"CLUSTER", "MIGRATION", "CANCEL", "ID", id},
			{"CLUSTER", "MIGRATION", "CANCEL", "ALL"},
			{"CLUSTER", "MIGRATION", "IMPORT", "10", "5"},
			{"CLUSTER", "MIGRATION", "IMPORT", "0", "16384"},
			{"CLUSTER", "MIGRATION", "IMPORT", "200"},
			{"CLUSTER", "MIGRATION", "STATUS"},
			{"CLUSTER", "MIGRATION", "STATUS", "FOO"},
			{"CLUSTER", "MIGRATION", "STATUS", "ID"},
			{"CLUSTER", "MIGRATION", "CANCEL", "FOO"},
			{"CLUSTER", "MIGRATION", "FOO", "a", "b"},
			{"NOSUCHCOMMAND", "x"},
			{"PING"},
			{"ECHO", "x"},
			{"CLIENT", "SETNAME", "ops"},
			{"CLIENT", "SETINFO", "LIB-NAME", "script"},
			{"CLIENT", "ID"},
		} {
			out := cliOut(t, port, append([]string{"--no-raw"}, args...)...)
			label := strings.ReplaceAll(strings.Join(args, " "), id, "<id>")
			shapes = append(shapes, append([]string{label}, shape(out)...))
		}
		return shapes
	}
	theirs, ours := script(c.Nodes[1].Port), script(s.port)
	for i := range theirs {
		th, ou := theirs[i], ours[i]
		// This port's own fields follow 8.4's: compare 8.4's part.
		if len(ou) > len(th) && strings.HasPrefix(th[0], "CLUSTER MIGRATION STATUS") {
			for _, extra := range ou[len(th):] {
				if n := innerIndex(extra); n <= 24 {
					t.Errorf("%s: our extra line %q is not after 8.4's fields", th[0], extra)
				}
			}
			ou = ou[:len(th)]
		}
		if strings.Join(th, "\n") != strings.Join(ou, "\n") {
			t.Errorf("%s: shapes differ\n8.4:  %q\nours: %q", th[0], th[1:], ou[1:])
		}
	}
	t.Logf("the same script's shapes on both:\n%s", strings.Join(flatten(theirs), "\n"))
}

func cliOut(t *testing.T, port int, args ...string) string {
	out, _ := cli(t, port, args...)
	return out
}

func flatten(shapes [][]string) []string {
	var out []string
	for _, s := range shapes {
		out = append(out, s[0]+" -> "+strings.Join(s[1:], " | "))
	}
	return out
}

var (
	indexPrefix = regexp.MustCompile(`^\s*(\d+)\)\s+`)
	errorCode   = regexp.MustCompile(`^\(error\) (\S+)`)
)

// shape reduces redis-cli --no-raw output to one line per element: a ">"
// per array index redis-cli printed on the line (it prints the outer index
// only on the first line of an inner array), the index in the innermost
// array, the type, and for a string at an odd index (a field name in a
// field/value array) the name itself; for an error, its code.
func shape(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var idx []string
		for {
			m := indexPrefix.FindStringSubmatch(l)
			if m == nil {
				break
			}
			idx = append(idx, m[1])
			l = l[len(m[0]):]
		}
		inner := ""
		if len(idx) > 0 {
			inner = idx[len(idx)-1] + ") "
		}
		kind := ""
		switch {
		case strings.HasPrefix(l, `"`):
			kind = "string"
			if n, _ := strconv.Atoi(strings.TrimSuffix(inner, ") ")); n%2 == 1 {
				kind = l
			}
		case strings.HasPrefix(l, "(integer) "):
			kind = "integer"
		case errorCode.MatchString(l):
			kind = "error " + errorCode.FindStringSubmatch(l)[1]
		case l == "(empty array)", l == "(nil)":
			kind = l
		default:
			kind = "status " + l // a simple string (OK, PONG)
		}
		lines = append(lines, strings.Repeat(">", len(idx))+inner+kind)
	}
	return lines
}

// innerIndex is the index of a shape line in its innermost array.
func innerIndex(line string) int {
	line = strings.TrimLeft(line, ">")
	n, _ := strconv.Atoi(line[:max(strings.Index(line, ")"), 0)])
	return n
}
