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
		info, err := cl.Info(ctx, "errorstats").Result()
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("INFO errorstats on %s: %w", s.Addr, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "errorstat_"), ":count=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(rest, 10, 64)
			out[name] += n
		}
	}
	return out, nil
}

// WaitOwner waits until every running node sees owner as the master of
// every slot of set, with no migrating or importing mark left on them.
func (c *Cluster) WaitOwner(ctx context.Context, set *slots.Set, owner string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		why := ""
		for _, s := range c.Nodes {
			if !s.Alive() {
				continue
			}
			cl := s.Client()
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
func CheckWithRedisCli(ctx context.Context, addr string) error {
	cli := CliBin()
	out, err := exec.CommandContext(ctx, cli, "--cluster", "check", addr).CombinedOutput()
	text := string(out)
	if err != nil {
		return fmt.Errorf("%s --cluster check %s: %w\n%s", cli, addr, err, text)
	}
	if !strings.Contains(text, "[OK] All 16384 slots covered.") || strings.Contains(text, "[WARNING]") || strings.Contains(text, "[ERR]") {
		return fmt.Errorf("%s --cluster check %s is not clean:\n%s", cli, addr, text)
	}
	return nil
}

// KeyStates are keys' types, value digests, expiry times (and, for streams,
// group summaries) captured at one moment, to compare with later.
type KeyStates struct {
	keys   []string
	states []keyState
}

// Capture reads the states of keys through c (a cluster client routes each key).
func Capture(ctx context.Context, c redis.Cmdable, keys []string) (*KeyStates, error) {
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

// Compare checks that c now holds every key the same way (expiry within
// 1 s); the error names the first few that differ.
func (ks *KeyStates) Compare(ctx context.Context, c redis.Cmdable) error {
	now, err := Capture(ctx, c, ks.keys)
	if err != nil {
		return err
	}
	var diffs []string
	total := 0
	for i, key := range ks.keys {
		x, y := ks.states[i], now.states[i]
		var d string
		switch {
		case x.typ != y.typ:
			d = fmt.Sprintf("type %s vs %s", x.typ, y.typ)
		case x.digest != y.digest:
			d = fmt.Sprintf("digest %s vs %s", x.digest, y.digest)
		case (x.expire < 0 || y.expire < 0) && x.expire != y.expire,
			x.expire-y.expire > 1000 || y.expire-x.expire > 1000:
			d = fmt.Sprintf("pexpiretime %d vs %d", x.expire, y.expire)
		case x.groups != y.groups:
			d = fmt.Sprintf("stream groups\n  %s\nvs\n  %s", x.groups, y.groups)
		default:
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

// CommandStat reads one field of a command's line in INFO commandstats
// ("calls", "rejected_calls", …); 0 if the command never ran.
func CommandStat(ctx context.Context, c redis.Cmdable, command, field string) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return 0, nil
}
