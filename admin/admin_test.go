package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/sidecar"
)

var ctx = context.Background()

// wantTaskFields is a STATUS task's field names in order: 8.4's twelve,
// then slotmover's.
var wantTaskFields = []string{
	"id", "slots", "source", "dest", "operation", "state", "last_error", "retries",
	"create_time", "start_time", "end_time", "write_pause_ms",
	"phase", "result", "source_addr", "dest_addr", "keys_copied", "bytes_copied", "lag_bytes", "orphans_removed",
	"budget", "holding", "throttled_ms", "paused_ms", "cutover_held",
}

var intFields = map[string]bool{
	"retries": true, "create_time": true, "start_time": true, "end_time": true, "write_pause_ms": true,
	"keys_copied": true, "bytes_copied": true, "lag_bytes": true, "orphans_removed": true,
	"throttled_ms": true, "paused_ms": true, "cutover_held": true,
}

// taskMap checks one STATUS task's shape (field names in order, integers
// where 8.4 writes integers, strings elsewhere) and returns it as a map.
func taskMap(t *testing.T, v any) map[string]any {
	t.Helper()
	arr, ok := v.([]any)
	if !ok || len(arr) != 2*len(wantTaskFields) {
		t.Fatalf("task is not a flat array of %d: %#v", 2*len(wantTaskFields), v)
	}
	m := map[string]any{}
	for i, name := range wantTaskFields {
		if arr[2*i] != name {
			t.Fatalf("field %d is %#v, want %q (task %#v)", i, arr[2*i], name, arr)
		}
		val := arr[2*i+1]
		if _, isInt := val.(int64); isInt != intFields[name] {
			t.Fatalf("field %s is %T (%#v)", name, val, val)
		}
		if _, isStr := val.(string); !intFields[name] && !isStr {
			t.Fatalf("field %s is %T (%#v)", name, val, val)
		}
		m[name] = val
	}
	return m
}

// IMPORT, STATUS and CANCEL through go-redis, as an application would send
// them (its connect-time HELLO 3 is refused, it stays on RESP2).
func TestImportStatusCancelRoundTrip(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	c := client(t, s.addr, &redis.Options{ClientName: "roundtrip"})

	id, err := c.Do(ctx, "CLUSTER", "MIGRATION", "IMPORT", "0", "100", "200", "300").Text()
	if err != nil {
		t.Fatal(err)
	}
	if imports, _ := f.seen(); id != "task01" || len(imports) != 1 || imports[0] != "0-100,200-300" {
		t.Fatalf("import answered %q, manager got %q", id, imports)
	}
	got, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ID", id).Slice()
	if err != nil || len(got) != 1 {
		t.Fatalf("status: %#v, %v", got, err)
	}
	m := taskMap(t, got[0])
	want := map[string]any{
		"id": "task01", "slots": "0-100 200-300", "source": "node-a", "dest": "node-here", "operation": "import",
		"state": "running", "last_error": "", "retries": int64(0), "create_time": int64(1796102326841),
		"start_time": int64(1796102326841), "end_time": int64(-1), "write_pause_ms": int64(0),
		"phase": "snapshot", "result": "", "source_addr": "127.0.0.1:7001", "dest_addr": "127.0.0.1:7004",
		"keys_copied": int64(42), "bytes_copied": int64(4200), "lag_bytes": int64(7), "orphans_removed": int64(0),
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}

	// Ranges across two owners: two tasks, answered as an array of ids.
	ids, err := c.Do(ctx, "CLUSTER", "MIGRATION", "IMPORT", "8000", "8300").StringSlice()
	if err != nil || len(ids) != 2 || ids[0] != "task02" || ids[1] != "task03" {
		t.Fatalf("import across two sources: %q, %v", ids, err)
	}
	all, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ALL").Slice()
	if err != nil || len(all) != 3 {
		t.Fatalf("status all: %#v, %v", all, err)
	}
	for i, wantID := range []string{"task03", "task02", "task01"} { // newest first, as 8.4
		if m := taskMap(t, all[i]); m["id"] != wantID {
			t.Fatalf("status all[%d] is %v, want %s", i, m["id"], wantID)
		}
	}

	n, err := c.Do(ctx, "CLUSTER", "MIGRATION", "CANCEL", "ID", "task01").Int()
	if err != nil || n != 1 {
		t.Fatalf("cancel id: %d, %v", n, err)
	}
	got, _ = c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ID", "task01").Slice()
	if m := taskMap(t, got[0]); m["state"] != "canceled" || m["last_error"] != "cancelled on request" || m["end_time"].(int64) <= 0 {
		t.Fatalf("after cancel: %#v", m)
	}
	// Ended or unknown: 0, as 8.4, and the manager is not asked to cancel it.
	_, _, cancelsBefore := f.calls()
	for _, id := range []string{"task01", "nosuch"} {
		if n, err := c.Do(ctx, "CLUSTER", "MIGRATION", "CANCEL", "ID", id).Int(); err != nil || n != 0 {
			t.Fatalf("cancel of %s: %d, %v", id, n, err)
		}
	}
	if _, cancels := f.seen(); len(cancels) != cancelsBefore {
		t.Fatalf("the manager was asked to cancel an ended or unknown task: %q", cancels)
	}
	f.setState("task02", sidecar.StateCompleted)
	if n, err := c.Do(ctx, "CLUSTER", "MIGRATION", "CANCEL", "ALL").Int(); err != nil || n != 1 {
		t.Fatalf("cancel all (one running): %d, %v", n, err)
	}
	if n, err := c.Do(ctx, "CLUSTER", "MIGRATION", "CANCEL", "ALL").Int(); err != nil || n != 0 {
		t.Fatalf("cancel all again: %d, %v", n, err)
	}
	// An unknown id: an empty list, as 8.4.
	if got, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ID", "nosuch").Slice(); err != nil || len(got) != 0 {
		t.Fatalf("status of an unknown id: %#v, %v", got, err)
	}
	// Lower case works too, as with Redis.
	if got, err := c.Do(ctx, "cluster", "migration", "status", "all").Slice(); err != nil || len(got) != 3 {
		t.Fatalf("lower-case status: %d tasks, %v", len(got), err)
	}

	info, err := c.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"server_name:slotmover", "tasks_total:3", "tasks_running:0", "tasks_completed:1", "tasks_canceled:2", "tasks_failed:0", "connected_clients:1"} {
		if !strings.Contains(info, line+"\r\n") {
			t.Errorf("INFO lacks %q:\n%s", line, info)
		}
	}
	if name, err := c.ClientGetName(ctx).Result(); err != nil || name != "roundtrip" {
		t.Fatalf("client name %q, %v", name, err)
	}
}

// slotmover's controls beside CANCEL, in its shape: PAUSE, RESUME,
// HOLD-CUTOVER, RELEASE-CUTOVER and BUDGET <budget>, each with ID <id> or
// ALL, answer the count of running tasks changed; STATUS shows the change.
func TestControls(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	c := client(t, s.addr, nil)
	if _, err := c.Do(ctx, "CLUSTER", "MIGRATION", "IMPORT", "0", "100", "8000", "8300").StringSlice(); err != nil {
		t.Fatal(err)
	}
	status := func(id string) map[string]any {
		got, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ID", id).Slice()
		if err != nil || len(got) != 1 {
			t.Fatalf("status: %#v, %v", got, err)
		}
		return taskMap(t, got[0])
	}
	for _, step := range []struct {
		args  []any
		n     int
		field string
		want  any
	}{
		{[]any{"PAUSE", "ID", "task01"}, 1, "holding", "paused: by an operator"},
		{[]any{"resume", "id", "task01"}, 1, "holding", ""},
		{[]any{"HOLD-CUTOVER", "ALL"}, 2, "cutover_held", int64(1)},
		{[]any{"RELEASE-CUTOVER", "ID", "task01"}, 1, "cutover_held", int64(0)},
		{[]any{"BUDGET", "off", "ID", "task01"}, 1, "budget", "off"},
		{[]any{"BUDGET", "max-event=5ms", "ALL"}, 2, "budget", "max-event=5ms,max-rise=2"},
		{[]any{"PAUSE", "ID", "nosuch"}, 0, "", nil},
	} {
		n, err := c.Do(ctx, append([]any{"CLUSTER", "MIGRATION"}, step.args...)...).Int()
		if err != nil || n != step.n {
			t.Fatalf("%v: %d, %v; want %d", step.args, n, err, step.n)
		}
		if step.field != "" {
			if got := status("task01")[step.field]; got != step.want {
				t.Fatalf("after %v: %s = %#v, want %#v", step.args, step.field, got, step.want)
			}
		}
	}
	for _, bad := range []struct {
		args []any
		err  string
	}{
		{[]any{"BUDGET", "fast", "ID", "task01"}, "ERR bad control: bad budget \"fast\""},
		{[]any{"BUDGET", "off"}, "ERR wrong number of arguments for 'cluster|migration' command"},
		{[]any{"PAUSE", "ID"}, "ERR wrong number of arguments for 'cluster|migration' command"},
		{[]any{"PAUSE", "SOME"}, "ERR unknown argument"},
	} {
		err := c.Do(ctx, append([]any{"CLUSTER", "MIGRATION"}, bad.args...)...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), bad.err) {
			t.Fatalf("%v: %v, want %q", bad.args, err, bad.err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.controls) != 7 {
		t.Fatalf("the manager got %d controls, want the 7 good ones: %q", len(f.controls), f.controls)
	}
}

// Byte for byte what the connection commands answer, in Redis's words.
func TestConnectionCommands(t *testing.T) {
	s := serve(t, Config{Version: "1.2.3"}, newFake())
	r := dialRaw(t, s.addr)
	for _, tc := range []struct {
		args []string
		want any
	}{
		{[]string{"PING"}, "+PONG"},
		{[]string{"ping", "hi there"}, "hi there"},
		{[]string{"ECHO", "x"}, "x"},
		{[]string{"CLIENT", "GETNAME"}, nil},
		{[]string{"CLIENT", "SETNAME", "ops-script"}, "+OK"},
		{[]string{"CLIENT", "GETNAME"}, "ops-script"},
		{[]string{"CLIENT", "SETNAME", "a b"}, "-ERR Client names cannot contain spaces, newlines or special characters."},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis(,go1.26)"}, "+OK"},
		{[]string{"CLIENT", "SETINFO", "lib-ver", "9.23.0"}, "+OK"},
		{[]string{"CLIENT", "SETINFO", "foo", "x"}, "-ERR Unrecognized option 'foo'"},
		{[]string{"CLIENT", "ID"}, ":1"},
		{[]string{"COMMAND"}, []any{}},
		{[]string{"COMMAND", "DOCS"}, []any{}},
		{[]string{"COMMAND", "DOCS", "cluster"}, []any{}},
		{[]string{"HELLO", "2"}, []any{"server", "slotmover", "version", "1.2.3", "proto", ":2", "id", ":1", "mode", "sidecar", "role", "sidecar", "modules", []any{}}},
		{[]string{"HELLO", "3"}, "-NOPROTO unsupported protocol version"},
		{[]string{"HELLO", "x"}, "-ERR Protocol version is not an integer or out of range"},
		{[]string{"HELLO", "2", "FOO"}, "-ERR Syntax error in HELLO option 'FOO'"},
		{[]string{"HELLO", "2", "AUTH", "default"}, "-ERR Syntax error in HELLO option 'AUTH'"},
		{[]string{"AUTH", "pw"}, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"},
		{[]string{"AUTH", "default", "anything"}, "+OK"},
		{[]string{"AUTH", "bob", "anything"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"AUTH", "a", "b", "c"}, "-ERR syntax error"},
	} {
		if got, want := r.do(tc.args...), resp(tc.want); got != want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, want)
		}
	}
	info := r.do("INFO", "server")
	if !strings.Contains(info, "slotmover_version:1.2.3\r\n") || strings.Contains(info, "# Tasks") {
		t.Errorf("INFO server: %q", info)
	}
	if got := r.do("QUIT"); got != "+OK\r\n" {
		t.Fatalf("QUIT: %q", got)
	}
	if _, err := r.read(); err == nil {
		t.Fatal("the connection is still open after QUIT")
	}
}

// Unknown commands, unknown subcommands and wrong arity, in Redis's words
// (as the 8.4 build answered them).
func TestUnknownCommandAndArity(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	r := dialRaw(t, s.addr)
	long := strings.Repeat("x", 200)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"FOO"}, "-ERR unknown command 'FOO'"},
		{[]string{"FOO", "bar", "baz"}, "-ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' "},
		{[]string{"GET", "k"}, "-ERR unknown command 'GET', with args beginning with: 'k' "},
		{[]string{"FOO", long}, "-ERR unknown command 'FOO', with args beginning with: '" + long[:128] + "' "},
		{[]string{"ECHO"}, "-ERR wrong number of arguments for 'echo' command"},
		{[]string{"PING", "a", "b"}, "-ERR wrong number of arguments for 'ping' command"},
		{[]string{"AUTH"}, "-ERR wrong number of arguments for 'auth' command"},
		{[]string{"CLUSTER"}, "-ERR wrong number of arguments for 'cluster' command"},
		{[]string{"CLUSTER", "FOO"}, "-ERR unknown subcommand 'FOO'. Try CLUSTER HELP."},
		{[]string{"CLIENT"}, "-ERR wrong number of arguments for 'client' command"},
		{[]string{"CLIENT", "FOO"}, "-ERR unknown subcommand 'FOO'. Try CLIENT HELP."},
		{[]string{"CLIENT", "SETNAME"}, "-ERR wrong number of arguments for 'client|setname' command"},
		{[]string{"CLIENT", "SETNAME", "a", "b"}, "-ERR wrong number of arguments for 'client|setname' command"},
		{[]string{"COMMAND", "FOO"}, "-ERR unknown subcommand 'FOO'. Try COMMAND HELP."},
		{[]string{"CLUSTER", "MIGRATION"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "FOO"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "FOO", "a", "b"}, "-ERR unknown argument"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS", "FOO"}, "-ERR unknown argument"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS", "ID"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS", "ALL", "x"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "STATUS", "ID", "a", "b"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "CANCEL"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "CANCEL", "ID"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"CLUSTER", "MIGRATION", "CANCEL", "FOO"}, "-ERR unknown argument"},
		{[]string{"CLUSTER", "MIGRATION", "IMPORT"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
	} {
		if got := r.do(tc.args...); got != tc.want+"\r\n" {
			t.Errorf("%.40q:\n got %q\nwant %q", tc.args, got, tc.want+"\r\n")
		}
	}
	if i, st, c := f.calls(); i+st+c != 0 {
		t.Fatalf("the manager was called: %d imports, %d status, %d cancels", i, st, c)
	}
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("after the errors: %q", got)
	}
}

// Bad slot ranges are refused with a clear error and never reach the
// manager.
func TestBadSlotRangesNeverReachTheManager(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	r := dialRaw(t, s.addr)
	arity := "-ERR wrong number of arguments for 'cluster|migration' command"
	for _, tc := range []struct {
		slots []string
		want  string
	}{
		{[]string{"0", "16384"}, "-ERR Invalid or out of range slot '16384' (slots are 0-16383)"},
		{[]string{"-1", "3"}, "-ERR Invalid or out of range slot '-1' (slots are 0-16383)"},
		{[]string{"+1", "3"}, "-ERR Invalid or out of range slot '+1' (slots are 0-16383)"},
		{[]string{"a", "b"}, "-ERR Invalid or out of range slot 'a' (slots are 0-16383)"},
		{[]string{"1", " 2"}, "-ERR Invalid or out of range slot ' 2' (slots are 0-16383)"},
		{[]string{"", "2"}, "-ERR Invalid or out of range slot '' (slots are 0-16383)"},
		{[]string{"0", "99999999999999999999"}, "-ERR Invalid or out of range slot '99999999999999999999' (slots are 0-16383)"},
		{[]string{"10", "5"}, "-ERR start slot number 10 is greater than end slot number 5"},
		{[]string{"200"}, arity},
		{[]string{"0", "10", "20"}, arity},
		{[]string{"200", "300", "250", "260"}, "-ERR Slot 250 specified multiple times"},
		{[]string{"5", "5", "5", "5"}, "-ERR Slot 5 specified multiple times"},
	} {
		args := append([]string{"CLUSTER", "MIGRATION", "IMPORT"}, tc.slots...)
		if got := r.do(args...); got != tc.want+"\r\n" {
			t.Errorf("IMPORT %q:\n got %q\nwant %q", tc.slots, got, tc.want+"\r\n")
		}
	}
	if imports, _ := f.seen(); len(imports) != 0 {
		t.Fatalf("the manager was asked to import %q", imports)
	}
	// The bounds themselves are slots.
	if got := r.do("CLUSTER", "MIGRATION", "IMPORT", "0", "0", "16383", "16383"); got != resp([]any{"task01", "task02"}) {
		t.Fatalf("IMPORT 0 0 16383 16383: %q", got)
	}
	if imports, _ := f.seen(); imports[0] != "0,16383" {
		t.Fatalf("the manager got %q", imports)
	}
}

// A Manager's errors are answered -ERR <message> on a connection that
// stays usable; a Manager that panics likewise.
func TestManagerErrorsBecomeRESPErrors(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	r := dialRaw(t, s.addr)
	for _, err := range []error{
		sidecar.ErrOverlap, sidecar.ErrOwnedHere, sidecar.ErrUnowned, sidecar.ErrTooManyTasks, sidecar.ErrShuttingDown,
		fmt.Errorf("%w: slots 0-10 are moved by task t1", sidecar.ErrOverlap),
		errors.New("read the cluster from 127.0.0.1:7004:\ndial tcp: connection refused"),
	} {
		f.fail(err, nil, nil)
		want := "-ERR " + strings.ReplaceAll(err.Error(), "\n", " ") + "\r\n"
		if got := r.do("CLUSTER", "MIGRATION", "IMPORT", "0", "10"); got != want {
			t.Errorf("import refused with %v:\n got %q\nwant %q", err, got, want)
		}
	}
	f.fail(nil, errors.New("status broke"), nil)
	if got := r.do("CLUSTER", "MIGRATION", "STATUS", "ALL"); got != "-ERR status broke\r\n" {
		t.Errorf("status error: %q", got)
	}
	if got := r.do("INFO"); got != "-ERR status broke\r\n" {
		t.Errorf("INFO with a status error: %q", got)
	}
	f.fail(nil, nil, fmt.Errorf("task x: %w", errors.New("too late: the source released its slots")))
	if got := r.do("CLUSTER", "MIGRATION", "CANCEL", "ALL"); got != "-ERR task x: too late: the source released its slots\r\n" {
		t.Errorf("cancel error: %q", got)
	}
	f.fail(nil, nil, nil)
	f.hook(func(context.Context) error { panic("manager bug") })
	if got := r.do("CLUSTER", "MIGRATION", "IMPORT", "0", "10"); got != "-ERR internal error: manager bug\r\n" {
		t.Errorf("panicking manager: %q", got)
	}
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("the connection after the errors: %q", got)
	}
}

// With a password, everything but AUTH, HELLO … AUTH and QUIT waits for
// authentication, as with requirepass; unknown commands and wrong arity
// are still told first, as Redis does.
func TestAuthentication(t *testing.T) {
	f := newFake()
	s := serve(t, Config{Password: "sekret", Username: "ops"}, f)

	r := dialRaw(t, s.addr)
	noauth := "-NOAUTH Authentication required.\r\n"
	for _, args := range [][]string{
		{"PING"}, {"INFO"}, {"CLUSTER", "MIGRATION", "IMPORT", "0", "10"}, {"CLUSTER", "MIGRATION", "STATUS", "ALL"},
		{"CLUSTER", "MIGRATION", "CANCEL", "ALL"}, {"CLIENT", "SETNAME", "x"}, {"COMMAND", "DOCS"},
	} {
		if got := r.do(args...); got != noauth {
			t.Errorf("%q before AUTH: %q", args, got)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"FOO", "bar"}, "-ERR unknown command 'FOO', with args beginning with: 'bar' "},
		{[]string{"CLUSTER", "MIGRATION", "STATUS"}, "-ERR wrong number of arguments for 'cluster|migration' command"},
		{[]string{"HELLO", "2"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"},
		{[]string{"HELLO", "2", "AUTH", "default", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"AUTH", "bob", "sekret"}, "-WRONGPASS invalid username-password pair or user is disabled."},
		{[]string{"AUTH", "sekret", "x", "y"}, "-ERR syntax error"},
		{[]string{"PING"}, strings.TrimSuffix(noauth, "\r\n")},
	} {
		if got := r.do(tc.args...); got != tc.want+"\r\n" {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want+"\r\n")
		}
	}
	if i, st, c := f.calls(); i+st+c != 0 {
		t.Fatalf("the manager was called before authentication: %d, %d, %d", i, st, c)
	}
	if got := r.do("AUTH", "sekret"); got != "+OK\r\n" {
		t.Fatalf("AUTH sekret: %q", got)
	}
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after AUTH: %q", got)
	}
	// A failed AUTH does not undo an earlier success (as Redis).
	r.do("AUTH", "wrong")
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after a failed second AUTH: %q", got)
	}

	// Each accepted user name, by AUTH and by HELLO.
	for _, args := range [][]string{{"AUTH", "default", "sekret"}, {"AUTH", "ops", "sekret"}} {
		r := dialRaw(t, s.addr)
		if got := r.do(args...); got != "+OK\r\n" {
			t.Fatalf("%q: %q", args, got)
		}
	}
	r2 := dialRaw(t, s.addr)
	if got := r2.do("HELLO", "2", "AUTH", "ops", "sekret", "SETNAME", "me"); !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO 2 AUTH ops sekret: %q", got)
	}
	if got := r2.do("CLIENT", "GETNAME"); got != resp("me") {
		t.Fatalf("name set by HELLO: %q", got)
	}
	// QUIT needs no authentication.
	r3 := dialRaw(t, s.addr)
	if got := r3.do("QUIT"); got != "+OK\r\n" {
		t.Fatalf("QUIT before AUTH: %q", got)
	}

	// go-redis: no password, a wrong one, the right one (it tries HELLO 3
	// AUTH, gets NOPROTO, and falls back to AUTH).
	if err := client(t, s.addr, nil).Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("go-redis without a password: %v", err)
	}
	if err := client(t, s.addr, &redis.Options{Password: "wrong"}).Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("go-redis with a wrong password: %v", err)
	}
	for _, user := range []string{"", "default", "ops"} {
		c := client(t, s.addr, &redis.Options{Username: user, Password: "sekret"})
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("go-redis as %q with the password: %v", user, err)
		}
		if _, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ALL").Slice(); err != nil {
			t.Fatalf("status as %q: %v", user, err)
		}
	}
}

// Pipelined commands after QUIT are not run.
func TestNothingRunsAfterQuit(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	r := dialRaw(t, s.addr)
	r.send("QUIT")
	r.send("CLUSTER", "MIGRATION", "IMPORT", "0", "10")
	if got, _ := r.read(); got != "+OK\r\n" {
		t.Fatalf("QUIT: %q", got)
	}
	if got, err := r.read(); err == nil {
		t.Fatalf("a reply after QUIT: %q", got)
	}
	if imports, _ := f.seen(); len(imports) != 0 {
		t.Fatalf("IMPORT after QUIT reached the manager: %q", imports)
	}
}

// When its context ends, Serve closes every connection (idle, mid-command,
// one inside a Manager call, whose context ends too), waits for their
// goroutines and returns nil: no goroutine is left behind.
func TestServeStopsCleanly(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newFake()
	entered := make(chan struct{})
	sawCancel := make(chan error, 1)
	var importReturned atomic.Bool
	f.hook(func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		sawCancel <- ctx.Err()
		time.Sleep(100 * time.Millisecond) // Serve must wait for this
		importReturned.Store(true)
		return ctx.Err()
	})
	s := serve(t, Config{RequestTimeout: -1}, f)

	var conns []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	fmt.Fprint(conns[0], "*1\r\n$4\r\nPING\r\n")
	fmt.Fprint(conns[1], "*3\r\n$7\r\nCLUSTER\r\n$9\r\nMIGRATION\r\n$6\r\nIMPO") // half a command
	fmt.Fprint(conns[2], "*5\r\n$7\r\nCLUSTER\r\n$9\r\nMIGRATION\r\n$6\r\nIMPORT\r\n$1\r\n0\r\n$2\r\n10\r\n")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the import never reached the manager")
	}

	start := time.Now()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Serve took %v to return", d)
	}
	if !importReturned.Load() {
		t.Error("Serve returned before the handler inside the manager's Import")
	}
	if err := <-sawCancel; !errors.Is(err, context.Canceled) {
		t.Errorf("the manager's context ended with %v", err)
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		var err error
		for err == nil {
			_, err = c.Read(buf)
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("connection %d is still open after Serve returned", i)
		}
	}
	if _, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
		t.Error("the listener still accepts after Serve returned")
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after Serve returned:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A listener that fails under Serve ends it with an error, and its
// connections are closed and waited for all the same.
func TestServeReturnsWhenTheListenerFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{}, newFake(), nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "*1\r\n$4\r\nPING\r\n")
	buf := make([]byte, 16)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", buf[:n], err)
	}
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve returned nil for a closed listener")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its listener closed")
	}
	if err := srv.Serve(context.Background(), ln); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a second Serve: %v", err)
	}
}

// Ask, the client side of status, cancel and the controls: a list of
// tasks as records (none: an empty list), a count as one record.
func TestAsk(t *testing.T) {
	f := newFake()
	s := serve(t, Config{}, f)
	c := client(t, s.addr, &redis.Options{})
	if got, err := Ask(ctx, c, []string{"STATUS"}, ""); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("status of none: %#v, %v", got, err)
	}
	if _, err := c.Do(ctx, "CLUSTER", "MIGRATION", "IMPORT", "0", "100").Result(); err != nil {
		t.Fatal(err)
	}
	got, err := Ask(ctx, c, []string{"STATUS"}, "task01")
	if err != nil || len(got) != 1 || got[0]["id"] != "task01" || got[0]["slots"] != "0-100" || got[0]["state"] != "running" {
		t.Fatalf("status of task01: %#v, %v", got, err)
	}
	if got, err := Ask(ctx, c, []string{"PAUSE"}, ""); err != nil || len(got) != 1 || got[0]["count"] != int64(1) {
		t.Fatalf("pause all: %#v, %v", got, err)
	}
	if _, err := Ask(ctx, c, []string{"BOGUS"}, ""); err == nil {
		t.Fatal("an unknown verb was answered")
	}
}
