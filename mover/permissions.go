package mover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/slots"
)

// A probe is a command the move will need, in a form the server checks
// against the user's ACL and then refuses or ignores without changing
// anything: an out-of-range slot, a bad argument, a key of a slot the node
// does not own (MOVED), a client address nobody has (not CLIENT KILL ID 0,
// which Redis 6.2 takes as no filter at all: it killed every client). Redis checks the ACL before the arguments and
// before redirecting, so NOPERM is the only answer that means "not allowed".
// It works on every version, where ACL DRYRUN needs 7.0 and a permission
// of its own.
type probe []any

func (p probe) name() string {
	if len(p) > 1 {
		if s, ok := p[1].(string); ok && (p[0] == "CLUSTER" || p[0] == "CLIENT" || p[0] == "CONFIG" || p[0] == "SCRIPT" || p[0] == "XGROUP" || p[0] == "FUNCTION") {
			return strings.ToLower(p[0].(string) + "|" + s)
		}
	}
	return strings.ToLower(p[0].(string))
}

// Probes common to the source and the target.
var nodeProbes = []probe{
	{"CLUSTER", "NODES"}, {"CLUSTER", "COUNTKEYSINSLOT", 0}, {"CLUSTER", "GETKEYSINSLOT", 0, 0},
	{"CLUSTER", "DELSLOTS", slots.Count}, {"CLUSTER", "ADDSLOTS", slots.Count}, {"CLUSTER", "SETSLOT", slots.Count, "STABLE"},
	{"INFO", "replication"}, {"ROLE"}, {"DBSIZE"}, {"FLUSHDB", "slotmover-probe"},
	{"EVALSHA", strings.Repeat("0", 40), 0}, {"EVAL", "return 1", 0}, {"SCRIPT", "LOAD", "return 1"},
	{"CLIENT", "LIST", "TYPE", "pubsub"},
	// EXEC outside MULTI is refused after the ACL check (MULTI and
	// DISCARD are tried on a connection of their own).
	{"EXEC"},
	// Preflight compares the nodes' function libraries; a user who may
	// not list them would have that check skipped (no FUNCTION before 7.0:
	// an unknown command, which the move does not need either).
	{"FUNCTION", "LIST", "LIBRARYNAME", "slotmover-probe"},
}

// sourceProbes are what the move runs on the source; key is a key of a
// slot the source does not own ("" when it owns them all).
func sourceProbes(key string, tune bool) []probe {
	ps := append([]probe{
		{"CLIENT", "PAUSE", "slotmover-probe", "WRITE"}, {"REPLCONF", "slotmover-probe", "x"}, {"COMMAND", "COUNT"}, {"TIME"},
		{"CONFIG", "GET", "repl-diskless-sync-delay"},
		// PSYNC's FAILOVER form, which a master refuses ("can't be sent
		// to a master") after the ACL check and before anything else: a
		// user who may not run ACL DRYRUN is checked for PSYNC too.
		{"PSYNC", "slotmover-probe", -1, "FAILOVER"},
	}, nodeProbes...)
	if tune {
		ps = append(ps, probe{"CONFIG", "SET", "slotmover-probe", "x"})
	}
	if key != "" {
		ps = append(ps, probe{"DUMP", key}, probe{"PTTL", key}, probe{"SET", key, "x"}, probe{"DEL", key}, probe{"UNLINK", key})
	}
	return ps
}

// targetProbes are what the move writes on the target, with key a key of
// the moving slots (which the target does not own yet).
func targetProbes(key string) []probe {
	return append([]probe{
		{"ASKING"}, {"CLIENT", "REPLY", "slotmover-probe"}, {"CLIENT", "KILL", "ADDR", "0.0.0.0:0"}, {"CLIENT", "ID"},
		{"SET", key, "x"}, {"DEL", key}, {"UNLINK", key}, {"RENAME", key, key}, {"PEXPIREAT", key, 0}, {"DUMP", key},
		{"RESTORE", key, 0, "x"}, {"RESTORE-ASKING", key, 0, "x"},
		{"RPUSH", key, "x"}, {"SADD", key, "x"}, {"HSET", key, "f", "x"}, {"ZADD", key, 0, "x"}, {"XADD", key, "*", "f", "x"},
		// A big stream's groups, consumers and pending entries.
		{"XSETID", key, "0-1"}, {"XGROUP", "CREATE", key, "g", "0"}, {"XGROUP", "CREATECONSUMER", key, "g", "c"},
		{"XCLAIM", key, "g", "c", 0, "0-1"},
	}, nodeProbes...)
}

// otherProbes are what the move tells the other masters.
var otherProbes = []probe{{"CLUSTER", "NODES"}, {"CLUSTER", "SETSLOT", slots.Count, "STABLE"}}

// checkPermissions asks c whether the user may run every probe, and
// refuses the move, naming every command the user may not run. ACL DRYRUN
// (7.0+) answers without running anything; where it is missing or not
// allowed, the probes themselves run (see probe), and MULTI (then DISCARD)
// on a connection of its own. DRYRUN is tried first because a probe's
// refusal counts in the operator's error statistics.
//
// unprobed are commands no probe can try without effect (PSYNC would start
// a sync): only DRYRUN checks them.
func checkPermissions(ctx context.Context, c *redis.Client, role string, probes, unprobed []probe) error {
	var denied []string
	seen := map[string]bool{}
	deny := func(name string) {
		if !seen[name] {
			seen[name] = true
			denied = append(denied, name)
		}
	}
	if ok, err := dryRun(ctx, c, slices.Concat(probes, unprobed, []probe{{"MULTI"}, {"DISCARD"}}), deny); ok {
		return deniedError(c, role, denied)
	} else if err != nil {
		return refuse("%s %s: %w", role, c.Options().Addr, err)
	}
	for _, p := range probes {
		err := c.Do(ctx, p...).Err()
		if isNoPerm(err) {
			deny(p.name())
		} else if err != nil && !isReplyError(err) {
			return refuse("%s %s: %w", role, c.Options().Addr, err)
		}
	}
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "MULTI").Err(); isNoPerm(err) {
		deny("multi")
	} else if err == nil {
		if err := conn.Do(ctx, "DISCARD").Err(); isNoPerm(err) {
			deny("discard")
		}
	}
	return deniedError(c, role, denied)
}

func deniedError(c *redis.Client, role string, denied []string) error {
	if len(denied) == 0 {
		return nil
	}
	user := c.Options().Username
	if user == "" {
		user = "default"
	}
	return refuse("ACL user %q may not run %s on %s %s, which the move needs: grant them (ACL SETUSER %s +%s)",
		user, strings.Join(denied, ", "), role, c.Options().Addr, user, strings.Join(denied, " +"))
}

// dryRun checks every probe with ACL DRYRUN for the connection's user. ok
// is false, with no error, when the server has no DRYRUN or the user may
// not run it (or ACL WHOAMI): then the probes must run.
func dryRun(ctx context.Context, c *redis.Client, probes []probe, deny func(string)) (ok bool, err error) {
	user, err := c.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil {
		return false, transportOnly(err)
	}
	for i, p := range probes {
		reply, err := c.Do(ctx, append([]any{"ACL", "DRYRUN", user}, p...)...).Text()
		switch {
		case err != nil && i == 0:
			return false, transportOnly(err) // no DRYRUN here, or not for this user
		case err != nil && isReplyError(err):
			continue // a command the server lacks (renamed away): the move meets that itself
		case err != nil:
			return false, fmt.Errorf("ACL DRYRUN %s: %w", p.name(), err)
		}
		if reply != "OK" {
			deny(p.name())
		}
	}
	return true, nil
}

// transportOnly keeps an error only if it is not the server's refusal.
func transportOnly(err error) error {
	if isReplyError(err) {
		return nil
	}
	return err
}

// isNoPerm: a denied EXEC answers "EXECABORT … because of: NOPERM …",
// even outside MULTI.
func isNoPerm(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	if re := redis.Error(nil); errors.As(err, &re) {
		msg = re.Error()
	}
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "EXECABORT") && strings.Contains(msg, "NOPERM")
}

// isReplyError tells a server's refusal of a probe (expected) from a
// failure to reach it.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || err == redis.Nil
}

// keyOutside returns a key of a slot that n does not own, or "".
func keyOutside(n *cluster.Node) string {
	for s := range uint16(slots.Count) {
		if !n.Slots.Contains(s) {
			return tempKey(s, "probe", 0)
		}
	}
	return ""
}

// checkAllPermissions probes the source, the target and the other masters.
func checkAllPermissions(ctx context.Context, p *participants, srcTop *cluster.Topology, set *slots.Set, tune bool) error {
	if err := checkPermissions(ctx, p.source, "source", sourceProbes(keyOutside(srcTop.Myself), tune), nil); err != nil {
		return err
	}
	if err := checkPermissions(ctx, p.target, "target", targetProbes(tempKey(set.Slots()[0], "probe", 0)), nil); err != nil {
		return err
	}
	for _, o := range p.others {
		if err := checkPermissions(ctx, o, "master", otherProbes, nil); err != nil {
			return err
		}
	}
	return nil
}
