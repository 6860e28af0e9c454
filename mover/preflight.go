package mover

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/rdbparse"
	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/slots"
)

// InputError is a refusal before anything changed: the request cannot be
// carried out as given.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func refuse(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// participants are the nodes a move talks to, as the preflight found them.
type participants struct {
	source, target     *redis.Client
	sourceID, targetID string
	others             []*redis.Client // the other masters
	setSlotBlocks      bool            // CLUSTER SETSLOT may block on these servers (see cutover.Plan)
}

func (p *participants) close() {
	for _, c := range append([]*redis.Client{p.source, p.target}, p.others...) {
		if c != nil {
			c.Close()
		}
	}
}

// preflight checks, changing nothing, that the move can be made: both nodes
// are masters of one cluster, the source owns every chosen slot in every
// master's view, no chosen slot is migrating or importing anywhere, the
// target holds no key in them and (unless o.AllowEviction) has room for
// them under its maxmemory, and the user may run every command the move
// needs on every node. Every violation is an InputError.
func preflight(ctx context.Context, o Options) (_ *participants, err error) {
	source, target, set := o.Source, o.Target, o.Slots
	p := &participants{source: source.Client(), target: target.Client()}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	srcTop, err := reach(ctx, p.source, "source")
	if err != nil {
		return nil, err
	}
	tgtTop, err := reach(ctx, p.target, "target")
	if err != nil {
		return nil, err
	}
	p.sourceID, p.targetID = srcTop.Myself.ID, tgtTop.Myself.ID
	switch {
	case p.sourceID == p.targetID:
		return nil, refuse("source and target are the same node (%s)", p.sourceID)
	case srcTop.ByID(p.targetID) == nil:
		return nil, refuse("target %s (%s) is not in the source's cluster", target.Addr, p.targetID)
	case !srcTop.Myself.Is("master"):
		return nil, refuse("source %s is not a master (it replicates %s)", source.Addr, srcTop.Myself.MasterID)
	case !tgtTop.Myself.Is("master"):
		return nil, refuse("target %s is a replica (of %s), not a master", target.Addr, tgtTop.Myself.MasterID)
	}
	for _, n := range []struct {
		c    *redis.Client
		role string
	}{{p.source, "source"}, {p.target, "target"}} {
		if cmd := builtInMigration(ctx, n.c); cmd != "" {
			return nil, refuse("%s %s has atomic slot migration built in (%s): use it; slotmover moves slots for servers without it", n.role, n.c.Options().Addr, cmd)
		}
		if err := clusterStateOK(ctx, n.c, n.role); err != nil {
			return nil, err
		}
	}
	if missing := notOwned(srcTop.Myself, set); missing != "" {
		return nil, refuse("source %s does not own slots %s", source.Addr, missing)
	}

	// Migrating/importing marks show only in a node's own view: ask every master.
	views := []*cluster.Topology{srcTop, tgtTop}
	for _, m := range srcTop.Masters() {
		if m.ID == p.sourceID || m.ID == p.targetID {
			continue
		}
		c := source.With(m.Addr).Client()
		top, err := reach(ctx, c, "master")
		if err != nil {
			c.Close()
			return nil, err
		}
		if !top.Myself.Is("master") {
			// A node made a replica moments ago, which the source's view
			// does not show yet: it would refuse to be told the new
			// owner (replicas learn it by gossip).
			c.Close()
			continue
		}
		p.others = append(p.others, c)
		views = append(views, top)
	}
	for _, v := range views {
		me := v.Myself
		for _, s := range set.Slots() {
			if to, ok := me.Migrating[s]; ok {
				return nil, refuse("slot %d is migrating from %s to %s: finish or fix that move first", s, me.Addr, to)
			}
			if from, ok := me.Importing[s]; ok {
				return nil, refuse("slot %d is importing on %s from %s: finish or fix that move first", s, me.Addr, from)
			}
			if o := v.Owner(s); o == nil || o.ID != p.sourceID {
				return nil, refuse("%s does not see the source as the owner of slot %d yet: wait for the cluster to settle", me.Addr, s)
			}
		}
	}
	if err := noKeysOnTarget(ctx, p.target, set); err != nil {
		return nil, err
	}
	if err := checkAllPermissions(ctx, p, srcTop, set, !o.KeepSourceConfig); err != nil {
		return nil, err
	}
	if v, err := dumpVersion(ctx, p.source, set); err != nil {
		return nil, fmt.Errorf("source %s: %w", source.Addr, err)
	} else if err := readableVersion(v); err != nil {
		return nil, &InputError{Err: fmt.Errorf("source %s: %w", source.Addr, err)}
	}
	if err := sameFunctions(ctx, p.source, p.target); err != nil {
		return nil, err
	}
	if !o.AllowEviction {
		if err := checkHeadroom(ctx, p.source, p.target, set); err != nil {
			return nil, err
		}
	}
	for _, c := range []*redis.Client{p.source, p.target} {
		blocks, err := cutover.SetSlotBlocks(ctx, c)
		if err != nil {
			return nil, refuse("%s: %w", c.Options().Addr, err)
		}
		p.setSlotBlocks = p.setSlotBlocks || blocks
	}
	return p, nil
}

// certHint explains a connection that TLS without a client certificate
// lost at once: under TLS 1.3 a server that requires one may close the
// connection before its alert ("certificate required") is read.
func certHint(tc *tls.Config, err error) string {
	if tc == nil || len(tc.Certificates) > 0 || tc.GetClientCertificate != nil ||
		!errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		return ""
	}
	return " (the server may require a client certificate: --tls-cert and --tls-key)"
}

// reach loads a node's own view of the cluster; failure to do so is an InputError.
func reach(ctx context.Context, c *redis.Client, role string) (*cluster.Topology, error) {
	addr := c.Options().Addr
	if err := c.Ping(ctx).Err(); err != nil {
		return nil, refuse("cannot reach %s %s: %w%s", role, addr, err, certHint(c.Options().TLSConfig, err))
	}
	// INFO says whether the node runs in cluster mode; the error of
	// CLUSTER NODES would say it only in its wording.
	if f, err := info.Read(ctx, c, "cluster"); err == nil && f["cluster_enabled"] == "0" {
		return nil, refuse("%s %s is not in cluster mode", role, addr)
	}
	top, err := cluster.Load(ctx, c)
	if err != nil {
		return nil, refuse("cannot read the cluster from %s %s: %w", role, addr, err)
	}
	return top, nil
}

// clusterStateOK refuses a node whose own view of the cluster is failed: it
// answers CLUSTERDOWN to the commands a move sends it. A node added moments
// ago is one, for the few seconds it takes to learn the slots' owners.
func clusterStateOK(ctx context.Context, c *redis.Client, role string) error {
	text, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return refuse("CLUSTER INFO on %s %s: %w", role, c.Options().Addr, err)
	}
	if state := info.Parse(text)["cluster_state"]; state != "ok" {
		return refuse("%s %s reports cluster_state:%s (a node that just joined takes a few seconds to learn the cluster; see CLUSTER INFO and redis-cli --cluster check)", role, c.Options().Addr, state)
	}
	return nil
}

func notOwned(n *cluster.Node, set *slots.Set) string {
	var missing slots.Set
	for _, s := range set.Slots() {
		if !n.Slots.Contains(s) {
			missing.Add(s)
		}
	}
	if missing.Len() == 0 {
		return ""
	}
	return missing.String()
}

func noKeysOnTarget(ctx context.Context, target *redis.Client, set *slots.Set) error {
	all := set.Slots()
	counts, err := cluster.CountKeys(ctx, target, all)
	if err != nil {
		return refuse("count keys on target: %w", err)
	}
	var busy slots.Set
	var total int64
	for i, n := range counts {
		if n > 0 {
			busy.Add(all[i])
			total += n
		}
	}
	if total > 0 {
		return refuse("target %s already holds %d keys in slots %s", target.Options().Addr, total, busy.String())
	}
	return nil
}

// sameFunctions refuses a move from a source whose function libraries the
// target lacks or has in another version: an FCALL on the moved keys would
// fail, or do something else, once the target serves them. Servers before
// 7.0 have no functions.
func sameFunctions(ctx context.Context, source, target *redis.Client) error {
	src, err := libraries(ctx, source)
	if err != nil || len(src) == 0 {
		return nil // no FUNCTION command, or no library: nothing to carry
	}
	tgt, err := libraries(ctx, target)
	if err != nil {
		return refuse("the source has function libraries (%s) and target %s cannot list its own: %w", strings.Join(slices.Sorted(maps.Keys(src)), ", "), target.Options().Addr, err)
	}
	var missing, differ []string
	for name, code := range src {
		switch tc, ok := tgt[name]; {
		case !ok:
			missing = append(missing, name)
		case tc != code:
			differ = append(differ, name)
		}
	}
	if len(missing)+len(differ) == 0 {
		return nil
	}
	slices.Sort(missing)
	slices.Sort(differ)
	var what []string
	if len(missing) > 0 {
		what = append(what, "lacks the source's function libraries "+strings.Join(missing, ", "))
	}
	if len(differ) > 0 {
		what = append(what, "has other code for the function libraries "+strings.Join(differ, ", "))
	}
	return refuse("target %s %s: FCALLs on the moved keys would fail or differ there. Load the source's first (FUNCTION DUMP on the source, FUNCTION RESTORE on the target)",
		target.Options().Addr, strings.Join(what, " and "))
}

// libraries maps a node's function libraries to their code.
func libraries(ctx context.Context, c *redis.Client) (map[string]string, error) {
	list, err := c.FunctionList(ctx, redis.FunctionListQuery{WithCode: true}).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list {
		out[l.Name] = l.Code
	}
	return out, nil
}

// dumpVersion reads the RDB version the source writes, from the DUMP of one
// key of the moving slots (nothing changed); 0 when they hold none. The
// key is a small one a survey of a slot found, where it may run: the
// DUMP of a big key would hold the source for as long as its size takes
// (300 ms for a sorted set of 200k members). Else it is the first key.
func dumpVersion(ctx context.Context, c *redis.Client, set *slots.Set) (int, error) {
	all := set.Slots()
	first, surveys := "", 0
	for start := 0; start < len(all); start += 512 {
		batch := all[start:min(start+512, len(all))]
		keys := make([]*redis.StringSliceCmd, len(batch))
		counts := make([]*redis.IntCmd, len(batch))
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range batch {
				keys[i] = p.ClusterGetKeysInSlot(ctx, int(s), 1)
				counts[i] = p.ClusterCountKeysInSlot(ctx, int(s))
			}
			return nil
		}); err != nil {
			return 0, fmt.Errorf("CLUSTER GETKEYSINSLOT: %w", err)
		}
		for i, cmd := range keys {
			if len(cmd.Val()) == 0 {
				continue
			}
			if first == "" {
				first = cmd.Val()[0]
			}
			if n := counts[i].Val(); surveys < maxVersionSurveys && n <= surveyKeysPerCall {
				surveys++
				sv, err := slotread.SurveySlots(ctx, c, []uint16{batch[i]}, 0)
				if err != nil {
					surveys = maxVersionSurveys // not allowed, or not possible: the first key it is
				} else if sv.Sample != nil {
					return rdbparse.DumpVersion(sv.Sample), nil
				}
			}
		}
		if surveys >= maxVersionSurveys && first != "" {
			break
		}
	}
	if first == "" {
		return 0, nil
	}
	dump, err := c.Dump(ctx, first).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil // expired meanwhile: the snapshot's header is checked too
	}
	if err != nil {
		return 0, fmt.Errorf("DUMP: %w", err)
	}
	return rdbparse.DumpVersion([]byte(dump)), nil
}

// maxVersionSurveys bounds the slots dumpVersion surveys for a small key.
const maxVersionSurveys = 8

// readableVersion refuses a server whose RDB version slotmover does not
// read, before anything changes rather than at the snapshot's header.
// Servers that write one (Redis 8.6 and later, Valkey 9) have slot
// migration of their own, which preflight names where it finds it.
func readableVersion(v int) error {
	if v > rdbparse.MaxVersion {
		return fmt.Errorf("it writes RDB version %d, newer than slotmover reads (up to %d, Redis 7.4 to 8.2): use the server's own slot migration (Redis 8.4+: CLUSTER MIGRATION; Valkey 9: CLUSTER MIGRATESLOTS), or redis-cli --cluster reshard", v, rdbparse.MaxVersion)
	}
	return nil
}

// builtInMigration names the server's own atomic slot migration command
// (Redis 8.4's CLUSTER MIGRATION, Valkey 9's CLUSTER MIGRATESLOTS), or ""
// for a server without one. COMMAND INFO answers nil for a command the
// server does not know.
func builtInMigration(ctx context.Context, c *redis.Client) string {
	for _, name := range []string{"cluster|migration", "cluster|migrateslots"} {
		reply, err := c.Do(ctx, "COMMAND", "INFO", name).Slice()
		if err == nil && len(reply) == 1 && reply[0] != nil {
			return strings.ToUpper(strings.ReplaceAll(name, "|", " "))
		}
	}
	return ""
}
