package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/slotmover/slotmover/sidecar"
)

// command is one entry of the command table, as Redis keeps them: arity
// counts the name (positive: exactly; negative: at least), noAuth marks the
// commands a client may send before AUTH, and a container (CLUSTER, CLIENT,
// COMMAND) has subcommands, looked up before its arity is checked.
type command struct {
	name   string // full lower-case name, "cluster|migration"
	arity  int
	noAuth bool
	run    func(s *Server, c redcon.Conn, sess *session, args [][]byte)
	subs   map[string]*command
}

var commands map[string]*command

func init() {
	sub := func(parent string, cmds ...*command) map[string]*command {
		m := make(map[string]*command, len(cmds))
		for _, c := range cmds {
			short := c.name
			c.name = parent + "|" + c.name
			m[short] = c
		}
		return m
	}
	commands = map[string]*command{
		"ping":  {name: "ping", arity: -1, run: (*Server).ping},
		"echo":  {name: "echo", arity: 2, run: (*Server).echo},
		"info":  {name: "info", arity: -1, run: (*Server).info},
		"auth":  {name: "auth", arity: -2, noAuth: true, run: (*Server).auth},
		"hello": {name: "hello", arity: -1, noAuth: true, run: (*Server).hello},
		"quit":  {name: "quit", arity: -1, noAuth: true, run: (*Server).quit},
		"client": {name: "client", arity: -2, subs: sub("client",
			&command{name: "setname", arity: 3, run: (*Server).clientSetName},
			&command{name: "getname", arity: 2, run: (*Server).clientGetName},
			&command{name: "setinfo", arity: 4, run: (*Server).clientSetInfo},
			&command{name: "id", arity: 2, run: (*Server).clientID},
			&command{name: "info", arity: 2, run: (*Server).clientInfo},
			&command{name: "help", arity: 2, run: helpLines(clientHelp)},
		)},
		"command": {name: "command", arity: -1, run: emptyArray, subs: sub("command",
			&command{name: "docs", arity: -2, run: emptyArray},
			&command{name: "info", arity: -2, run: emptyArray},
			&command{name: "count", arity: 2, run: func(_ *Server, c redcon.Conn, _ *session, _ [][]byte) { c.WriteInt(0) }},
			&command{name: "help", arity: 2, run: helpLines(commandHelp)},
		)},
		"cluster": {name: "cluster", arity: -2, subs: sub("cluster",
			&command{name: "migration", arity: -4, run: (*Server).migration},
			&command{name: "help", arity: 2, run: helpLines(clusterHelp)},
		)},
	}
}

// dispatch checks a command as Redis's processCommand does, in its order:
// does it exist (unknown command or subcommand), its arity, then
// authentication; then runs it.
func (s *Server) dispatch(c redcon.Conn, sess *session, args [][]byte) {
	cmd, ok := commands[strings.ToLower(string(args[0]))]
	if !ok {
		c.WriteError(unknownCommand(args))
		return
	}
	if cmd.subs != nil && len(args) >= 2 {
		sub, ok := cmd.subs[strings.ToLower(string(args[1]))]
		if !ok {
			c.WriteError(fmt.Sprintf("ERR unknown subcommand '%.128s'. Try %s HELP.", args[1], strings.ToUpper(cmd.name)))
			return
		}
		cmd = sub
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		c.WriteError(wrongArity(cmd.name))
		return
	}
	if !cmd.noAuth && !s.authorized(sess) {
		c.WriteError("NOAUTH Authentication required.")
		return
	}
	cmd.run(s, c, sess, args)
}

// unknownCommand is Redis's reply to a command it does not know: the name
// and the start of the arguments, each cut at 128 bytes.
func unknownCommand(args [][]byte) string {
	var b strings.Builder
	for _, a := range args[1:] {
		if b.Len() >= 128 {
			break
		}
		fmt.Fprintf(&b, "'%.*s' ", 128-b.Len(), a)
	}
	if b.Len() == 0 {
		return fmt.Sprintf("ERR unknown command '%.128s'", args[0])
	}
	return fmt.Sprintf("ERR unknown command '%.128s', with args beginning with: %s", args[0], b.String())
}

func wrongArity(name string) string {
	return fmt.Sprintf("ERR wrong number of arguments for '%s' command", name)
}

func (s *Server) authorized(sess *session) bool {
	return s.cfg.Password == "" || sess.authed
}

// checkPassword compares in constant time (of hashes, so the length is not
// told either).
func (s *Server) checkPassword(user, pass string) bool {
	if user != "default" && (s.cfg.Username == "" || user != s.cfg.Username) {
		return false
	}
	if s.cfg.Password == "" {
		return true // the default user has no password: any is accepted, as Redis's nopass
	}
	a, b := sha256.Sum256([]byte(pass)), sha256.Sum256([]byte(s.cfg.Password))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

const wrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// AUTH <password> | AUTH <username> <password>
func (s *Server) auth(c redcon.Conn, sess *session, args [][]byte) {
	if len(args) > 3 {
		c.WriteError("ERR syntax error")
		return
	}
	user, pass := "default", string(args[1])
	if len(args) == 3 {
		user, pass = string(args[1]), string(args[2])
	} else if s.cfg.Password == "" {
		c.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	if !s.checkPassword(user, pass) {
		s.log.Warn("admin: authentication failed", "id", sess.id, "addr", sess.addr, "user", user)
		c.WriteError(wrongPass)
		return
	}
	sess.authed = true
	c.WriteString("OK")
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]: RESP2
// only; the reply is Redis's HELLO map as a flat array.
func (s *Server) hello(c redcon.Conn, sess *session, args [][]byte) {
	if len(args) >= 2 {
		ver, err := strconv.ParseInt(string(args[1]), 10, 64)
		if err != nil {
			c.WriteError("ERR Protocol version is not an integer or out of range")
			return
		}
		if ver != 2 {
			// Redis answers NOPROTO below 2 and above 3; this port has no
			// RESP3, so 3 is refused the same way, which clients take
			// as "stay on RESP2".
			c.WriteError("NOPROTO unsupported protocol version")
			return
		}
	}
	var user, pass, name string
	withAuth, withName := false, false
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch {
		case opt == "AUTH" && i+2 < len(args):
			withAuth, user, pass = true, string(args[i+1]), string(args[i+2])
			i += 2
		case opt == "SETNAME" && i+1 < len(args):
			withName, name = true, string(args[i+1])
			i++
		default:
			c.WriteError(fmt.Sprintf("ERR Syntax error in HELLO option '%.128s'", args[i]))
			return
		}
	}
	if !withAuth && !s.authorized(sess) {
		c.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if withAuth {
		if !s.checkPassword(user, pass) {
			s.log.Warn("admin: authentication failed", "id", sess.id, "addr", sess.addr, "user", user)
			c.WriteError(wrongPass)
			return
		}
		sess.authed = true
	}
	if withName {
		if msg := badName("Client names", name); msg != "" {
			c.WriteError(msg)
			return
		}
		sess.name = name
	}
	c.WriteArray(14)
	c.WriteBulkString("server")
	c.WriteBulkString("slotmover")
	c.WriteBulkString("version")
	c.WriteBulkString(s.cfg.Version)
	c.WriteBulkString("proto")
	c.WriteInt(2)
	c.WriteBulkString("id")
	c.WriteInt64(sess.id)
	c.WriteBulkString("mode")
	c.WriteBulkString("sidecar")
	c.WriteBulkString("role")
	c.WriteBulkString("sidecar")
	c.WriteBulkString("modules")
	c.WriteArray(0)
}

func (s *Server) quit(c redcon.Conn, sess *session, _ [][]byte) {
	c.WriteString("OK")
	sess.closing = true
	c.Close() // flushes the reply
}

// PING [message]
func (s *Server) ping(c redcon.Conn, _ *session, args [][]byte) {
	switch len(args) {
	case 1:
		c.WriteString("PONG")
	case 2:
		c.WriteBulk(args[1])
	default:
		c.WriteError(wrongArity("ping"))
	}
}

func (s *Server) echo(c redcon.Conn, _ *session, args [][]byte) {
	c.WriteBulk(args[1])
}

// badName is Redis's check of a client name (and of CLIENT SETINFO's
// values): printable ASCII without spaces.
func badName(what, v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < '!' || v[i] > '~' {
			return fmt.Sprintf("ERR %s cannot contain spaces, newlines or special characters.", what)
		}
	}
	return ""
}

func (s *Server) clientSetName(c redcon.Conn, sess *session, args [][]byte) {
	name := string(args[2])
	if msg := badName("Client names", name); msg != "" {
		c.WriteError(msg)
		return
	}
	sess.name = name
	c.WriteString("OK")
}

func (s *Server) clientGetName(c redcon.Conn, sess *session, _ [][]byte) {
	if sess.name == "" {
		c.WriteNull()
		return
	}
	c.WriteBulkString(sess.name)
}

// CLIENT SETINFO LIB-NAME|LIB-VER <value>, as go-redis sends at connect.
func (s *Server) clientSetInfo(c redcon.Conn, sess *session, args [][]byte) {
	attr, v := strings.ToLower(string(args[2])), string(args[3])
	var dst *string
	switch attr {
	case "lib-name":
		dst = &sess.libName
	case "lib-ver":
		dst = &sess.libVer
	default:
		c.WriteError(fmt.Sprintf("ERR Unrecognized option '%.128s'", args[2]))
		return
	}
	if msg := badName(attr, v); msg != "" {
		c.WriteError(msg)
		return
	}
	*dst = v
	c.WriteString("OK")
}

func (s *Server) clientID(c redcon.Conn, sess *session, _ [][]byte) {
	c.WriteInt64(sess.id)
}

func (s *Server) clientInfo(c redcon.Conn, sess *session, _ [][]byte) {
	c.WriteBulkString(fmt.Sprintf("id=%d addr=%s laddr=%s name=%s lib-name=%s lib-ver=%s resp=2\n",
		sess.id, sess.addr, sess.laddr, sess.name, sess.libName, sess.libVer))
}

var clientHelp = []string{
	"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"GETNAME", "    Return the name of the current connection.",
	"ID", "    Return the ID of the current connection.",
	"INFO", "    Return information about the current client connection.",
	"SETINFO <option> <value>", "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
	"SETNAME <name>", "    Assign the name <name> to the current connection.",
	"HELP", "    Print this help.",
}

var commandHelp = []string{
	"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"(no subcommand)", "    An empty list: this port describes no command.",
	"COUNT", "    Return 0.",
	"DOCS [<command-name> ...]", "    An empty list: redis-cli does without hints.",
	"INFO [<command-name> ...]", "    An empty list.",
	"HELP", "    Print this help.",
}

var clusterHelp = []string{
	"CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"MIGRATION IMPORT <start-slot> <end-slot> [<start-slot> <end-slot> ...]",
	"    Import the slot ranges into the local master from their current owners; one task per source.",
	"MIGRATION STATUS ID <task-id> | ALL",
	"    Show one task, or every task, newest first.",
	"MIGRATION CANCEL ID <task-id> | ALL",
	"    Cancel one task, or every task; the reply is how many were cancelled.",
	"HELP", "    Print this help.",
}

func helpLines(lines []string) func(*Server, redcon.Conn, *session, [][]byte) {
	return func(_ *Server, c redcon.Conn, _ *session, _ [][]byte) {
		c.WriteArray(len(lines))
		for _, l := range lines {
			c.WriteString(l)
		}
	}
}

// emptyArray answers COMMAND and COMMAND DOCS/INFO: redis-cli asks COMMAND
// DOCS for its hints at start and does without when there are none.
func emptyArray(_ *Server, c redcon.Conn, _ *session, _ [][]byte) {
	c.WriteArray(0)
}

// INFO [section ...]: sections "server" and "tasks" (the tasks' count by
// state, from Manager.Status).
func (s *Server) info(c redcon.Conn, _ *session, args [][]byte) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["default"] || want["everything"]
	var b strings.Builder
	if all || want["server"] {
		fmt.Fprintf(&b, "# Server\r\nserver_name:slotmover\r\nslotmover_version:%s\r\nprocess_id:%d\r\ntcp_port:%d\r\nuptime_in_seconds:%d\r\nconnected_clients:%d\r\n",
			s.cfg.Version, os.Getpid(), s.port, int64(time.Since(s.started).Seconds()), s.nclients.Load())
	}
	if all || want["tasks"] {
		tasks, err := s.m.Status("")
		if err != nil {
			s.replyManagerError(c, "status", err)
			return
		}
		counts := map[string]int{}
		for _, t := range tasks {
			counts[t.State]++
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "# Tasks\r\ntasks_total:%d\r\n", len(tasks))
		states := []string{sidecar.StateRunning, sidecar.StateCompleted, sidecar.StateFailed, sidecar.StateCanceled}
		var others []string
		for st := range counts {
			if !contains(states, st) {
				others = append(others, st)
			}
		}
		sort.Strings(others)
		for _, st := range append(states, others...) {
			fmt.Fprintf(&b, "tasks_%s:%d\r\n", st, counts[st])
		}
	}
	c.WriteBulkString(b.String())
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
