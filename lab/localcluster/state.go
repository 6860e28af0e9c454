package localcluster

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/slots"
)

// Fingerprint describes the whole cluster as its nodes see it: each node's
// view of every node (flags, master, epoch, slots, migrating/importing
// marks), key count and dataset digest. Two equal fingerprints mean nothing
// changed; ping times and link states are left out.
func (c *Cluster) Fingerprint(ctx context.Context) (string, error) {
	var b strings.Builder
	for _, s := range c.Nodes {
		cl := s.Client()
		top, err := cluster.Load(ctx, cl)
		var size int64
		var digest string
		if err == nil {
			size, err = cl.DBSize(ctx).Result()
		}
		if err == nil {
			digest, err = cl.Do(ctx, "DEBUG", "DIGEST").Text()
		}
		cl.Close()
		if err != nil {
			return "", fmt.Errorf("fingerprint %s: %w", s.Addr, err)
		}
		fmt.Fprintf(&b, "%s keys=%d digest=%s\n", s.Addr, size, digest)
		var lines []string
		for _, n := range top.Nodes {
			lines = append(lines, fmt.Sprintf("  %s %s %v master=%s epoch=%d slots=%s migrating=%v importing=%v",
				n.ID, n.Addr, n.Flags, n.MasterID, n.Epoch, n.Slots.String(), n.Migrating, n.Importing))
		}
		sort.Strings(lines)
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	return b.String(), nil
}

// ErrorStats sums INFO errorstats over the running nodes: error prefix → count.
func (c *Cluster) ErrorStats(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range c.Nodes {
		if !s.Alive() {
			continue
		}
		cl := s.Client()
		f, err := info.Read(ctx, cl, "errorstats")
		cl.Close()
		if err != nil {
			return nil, err
		}
		for kind, n := range f.ErrorStats() {
			out[kind] += n
		}
	}
	return out, nil
}

// WaitOwner waits until every running node sees owner as the master of
// every slot of set, with no migrating or importing mark left on them.
func (c *Cluster) WaitOwner(ctx context.Context, set *slots.Set, owner string, timeout time.Duration) error {
	return c.WaitOwnerVia(ctx, set, owner, timeout, (*Server).Client)
}

// WaitOwnerVia is WaitOwner asking each node through a client of dial's
// (one with credentials, say).
func (c *Cluster) WaitOwnerVia(ctx context.Context, set *slots.Set, owner string, timeout time.Duration, dial func(*Server) *redis.Client) error {
	deadline := time.Now().Add(timeout)
	for {
		why := ""
		for _, s := range c.Nodes {
			if !s.Alive() {
				continue
			}
			cl := dial(s)
			top, err := cluster.Load(ctx, cl)
			cl.Close()
			if err != nil {
				return err
			}
			for _, x := range set.Slots() {
				o := top.Owner(x)
				_, mig := top.Myself.Migrating[x]
				_, imp := top.Myself.Importing[x]
				if o == nil || o.ID != owner || mig || imp {
					why = fmt.Sprintf("%s: slot %d owner %v migrating %v importing %v", s.Addr, x, o, mig, imp)
					break
				}
			}
			if why != "" {
				break
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("owner not agreed after %s: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CheckWithRedisCli runs `redis-cli --cluster check` (CliBin) through the
// node at addr and fails on open slots, uncovered slots or any warning.
// Nodes that disagree are given 10 s to agree: replicas cannot be told a
// new owner (SETSLOT is for masters) and learn it by gossip.
func CheckWithRedisCli(ctx context.Context, addr string) error {
	cli := CliBin()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, cli, "--cluster", "check", addr).CombinedOutput()
		text := string(out)
		if strings.Contains(text, "Nodes don't agree about configuration") && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s --cluster check %s: %w\n%s", cli, addr, err, text)
		}
		if !strings.Contains(text, "[OK] All 16384 slots covered.") || strings.Contains(text, "[WARNING]") || strings.Contains(text, "[ERR]") {
			return fmt.Errorf("%s --cluster check %s is not clean:\n%s", cli, addr, text)
		}
		return nil
	}
}

// KeyStates are keys' types, value digests, expiry times (and, for streams,
// group summaries) captured at one moment, to compare with later.
type KeyStates struct {
	keys        []string
	states      []keyState
	mayBeAbsent bool
}

// Capture reads the states of keys through c (a cluster client routes each
// key). Every key must exist: a key list that names keys nobody wrote (a
// fill that went elsewhere, keys that expired) would make Compare check
// nothing. CaptureMayBeAbsent is for lists with deleted keys.
func Capture(ctx context.Context, c redis.Cmdable, keys []string) (*KeyStates, error) {
	ks, err := capture(ctx, c, keys)
	if err != nil {
		return nil, err
	}
	var absent []string
	for i, st := range ks.states {
		if !st.exists() {
			absent = append(absent, ks.keys[i])
		}
	}
	if len(absent) > 0 {
		return nil, fmt.Errorf("capture: %d of %d keys do not exist, e.g. %q", len(absent), len(keys), absent[:min(5, len(absent))])
	}
	return ks, nil
}

// CaptureMayBeAbsent is Capture for a list that also names keys that do not
// exist (deleted ones): Compare then checks that they are still absent, and
// reports one that exists as resurrected.
func CaptureMayBeAbsent(ctx context.Context, c redis.Cmdable, keys []string) (*KeyStates, error) {
	ks, err := capture(ctx, c, keys)
	if err != nil {
		return nil, err
	}
	ks.mayBeAbsent = true
	return ks, nil
}

func capture(ctx context.Context, c redis.Cmdable, keys []string) (*KeyStates, error) {
	ks := &KeyStates{keys: keys}
	const batch = 500
	for start := 0; start < len(keys); start += batch {
		part, err := describe(ctx, c, keys[start:min(start+batch, len(keys))])
		if err != nil {
			return nil, err
		}
		ks.states = append(ks.states, part...)
	}
	return ks, nil
}

// Present returns how many of the captured keys existed when captured.
func (ks *KeyStates) Present() int {
	n := 0
	for _, st := range ks.states {
		if st.exists() {
			n++
		}
	}
	return n
}

// Compare checks that c now holds every key the same way (expiry within
// 1 s), and no key that was absent; the error names the first few that
// differ.
func (ks *KeyStates) Compare(ctx context.Context, c redis.Cmdable) error {
	now, err := capture(ctx, c, ks.keys)
	if err != nil {
		return err
	}
	var diffs []string
	total := 0
	for i, key := range ks.keys {
		d := diff(ks.states[i], now.states[i], ks.mayBeAbsent)
		if d == "" {
			continue
		}
		total++
		if len(diffs) < 5 {
			diffs = append(diffs, fmt.Sprintf("%q: %s", key, d))
		}
	}
	if total > 0 {
		return fmt.Errorf("compare: %d of %d keys differ: %s", total, len(ks.keys), strings.Join(diffs, "; "))
	}
	return nil
}

// Orphans lists the keys that running nodes hold in slots they do not
// serve: for a master, slots its own view does not give it (importing ones
// included: no move is under way when this is asked); for a replica, slots
// its view does not give its master. Each entry names the node, the slot,
// how many keys it holds there and one of them. Keys a move left behind on
// its source, or copies on a target that never claimed the slots, show here.
func (c *Cluster) Orphans(ctx context.Context) ([]string, error) {
	var out []string
	for _, s := range c.Nodes {
		if !s.Alive() {
			continue
		}
		found, err := orphansOn(ctx, s)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

func orphansOn(ctx context.Context, s *Server) ([]string, error) {
	cl := s.Client()
	defer cl.Close()
	top, err := cluster.Load(ctx, cl)
	if err != nil {
		return nil, err
	}
	serves := &top.Myself.Slots
	if !top.Myself.Is("master") {
		m := top.ByID(top.Myself.MasterID)
		if m == nil {
			return nil, fmt.Errorf("%s replicates %s, which its view does not list", s.Addr, top.Myself.MasterID)
		}
		serves = &m.Slots
	}
	var foreign []uint16
	for x := 0; x < slots.Count; x++ {
		if !serves.Contains(uint16(x)) {
			foreign = append(foreign, uint16(x))
		}
	}
	counts, err := cluster.CountKeys(ctx, cl, foreign)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, n := range counts {
		if n == 0 {
			continue
		}
		x := foreign[i]
		owner := "nobody"
		if o := top.AssignedTo(x); o != nil {
			owner = o.Addr
		}
		some, err := cl.ClusterGetKeysInSlot(ctx, int(x), 1).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER GETKEYSINSLOT on %s: %w", s.Addr, err)
		}
		out = append(out, fmt.Sprintf("%s holds %d keys of slot %d (served by %s in its view), e.g. %q", s.Addr, n, x, owner, some))
	}
	return out, nil
}

// CommandStat reads one field of a command's line in INFO commandstats
// ("calls", "rejected_calls", …); 0 if the command never ran.
func CommandStat(ctx context.Context, c redis.Cmdable, command, field string) (int64, error) {
	text, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	v, ok := info.Parse(text).Sub("cmdstat_" + command)[field]
	if !ok {
		return 0, nil
	}
	return strconv.ParseInt(v, 10, 64)
}
