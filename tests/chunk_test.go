package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/chunk"
	"github.com/slotmover/slotmover/mover"
)

// A big key's commands are cut by time and bytes, not by a count alone:
// on either path, no command the target runs for a big key carries more
// elements than the cost model lets into the chunk time (fewer for 4 KB
// values than for 2 KB members, fewer for those than for small members),
// and every key arrives whole.
func TestBigKeyCommandsFitTheChunkTime(t *testing.T) {
	onBothPaths(t, bigKeyCommandsFitTheChunkTime)
}

func bigKeyCommandsFitTheChunkTime(t *testing.T, path string) {
	c, ctx, cc := fourMastersAndClient(t, 3*time.Minute)
	set := mustSlots(t, "0-9")
	tag := tagIn(set, 0)
	fat, thin, wide := tag+"fat-hash", tag+"thin-zset", tag+"wide-set"
	const fatFields, thinMembers, wideMembers = 1500, 30_000, 3000
	value := strings.Repeat("v", 4096)
	for i := 0; i < thinMembers; i += 1000 {
		p := cc.Pipeline()
		for j := i; j < i+1000; j++ {
			if j < fatFields {
				p.HSet(ctx, fat, "f"+strconv.Itoa(j), value)
			}
			if j < wideMembers {
				p.SAdd(ctx, wide, fmt.Sprintf("%02000d", j))
			}
			p.ZAdd(ctx, thin, redis.Z{Score: float64(j), Member: "m" + strconv.Itoa(j)})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cc.Expire(ctx, fat, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	source, target := nodeClient(t, c, 0), nodeClient(t, c, 3)
	for _, s := range []*redis.Client{source, target} {
		for _, kv := range [][2]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "100000"}} {
			if err := s.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sum := moveAndCheck(t, c, 0, 3, set, []string{fat, thin, wide}, func(o *mover.Options) {
		o.Snapshot, o.BigKeyElements = path, 1000
	})
	if sum.Snapshot != path || sum.BigKeys != 3 {
		t.Fatalf("took the %s path with %d big keys, want %s with 3", sum.Snapshot, sum.BigKeys, path)
	}

	// The most elements one command may carry, by the cost model.
	lim := chunk.Limit{Time: mover.DefaultChunkTime, Elements: mover.DefaultChunk}
	most := func(command string, size int) int {
		for start, end := range lim.Split(command, 100_000, func(int) int { return size }) {
			return end - start
		}
		return 0
	}
	// Between what fits of the biggest elements and of the smallest (a
	// member's score is 8 bytes by the RDB, its digits by ZSCAN).
	want := map[string][2]int{
		fat:  {most("HSET", len("f1499")+len(value)), most("HSET", len("f0")+len(value))},
		thin: {most("ZADD", len("m29999")+8), most("ZADD", len("m0")+1)},
		wide: {most("SADD", 2000), most("SADD", 2000)},
	}
	if !(want[fat][1] < want[wide][0] && want[wide][1] < want[thin][0] && want[thin][1] < mover.DefaultChunk) {
		t.Fatalf("the cost model allows %v: not a test of sizing by time and bytes", want)
	}
	log, err := target.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	largest := map[string]int{}
	for _, e := range log {
		if len(e.Args) < 2 {
			continue
		}
		name, key := strings.ToUpper(e.Args[0]), e.Args[1]
		if name != "HSET" && name != "ZADD" && name != "SADD" {
			continue
		}
		k := key
		if _, ok := want[k]; !ok {
			if !strings.HasPrefix(key, "__slotmover:") {
				continue
			}
			// The RDB path builds a key under a temporary name, one type each here.
			k = map[string]string{"HSET": fat, "ZADD": thin, "SADD": wide}[name]
		}
		per := 2
		if name == "SADD" {
			per = 1
		}
		n := (slowlogArgc(e.Args) - 2) / per
		largest[k] = max(largest[k], n)
	}
	for k, w := range want {
		if largest[k] < w[0] || largest[k] > w[1] {
			t.Errorf("the target's largest command for %q carried %d elements, want %d to %d (the cost model's most at %s)", k, largest[k], w[0], w[1], lim.Time)
		}
	}
	if path != mover.SnapshotKeys {
		return
	}
	// The source's reads: paced, the first of each key small; a sorted
	// set's by rank.
	slog, err := source.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	firsts := map[string]string{}
	for i := len(slog) - 1; i >= 0; i-- { // the slow log is newest first
		a := slog[i].Args
		var count int
		switch name := strings.ToUpper(a[0]); {
		case len(a) == 5 && strings.HasSuffix(name, "SCAN") && strings.EqualFold(a[3], "COUNT"):
			count, _ = strconv.Atoi(a[4])
		case len(a) == 5 && name == "ZRANGE" && strings.EqualFold(a[4], "WITHSCORES"):
			from, _ := strconv.Atoi(a[2])
			to, _ := strconv.Atoi(a[3])
			count = to - from + 1
			if from > 0 {
				count-- // the member before the range, which shows the set did not move
			}
		default:
			continue
		}
		if _, seen := firsts[a[1]]; !seen {
			firsts[a[1]] = a[0] + " " + strconv.Itoa(count)
		}
		if count > 16_384 {
			t.Errorf("%s of %d on the source", a[0], count)
		}
	}
	for k, first := range map[string]string{fat: "HSCAN 256", thin: "ZRANGE 256", wide: "SSCAN 256"} {
		if !strings.EqualFold(firsts[k], first) {
			t.Errorf("the first read of %q was %q, want %q", k, firsts[k], first)
		}
	}
}

// slowlogArgc is the argument count of a slow log entry, which keeps 32
// at most, the last then saying how many more there were.
func slowlogArgc(args []string) int {
	last := args[len(args)-1]
	var more int
	if _, err := fmt.Sscanf(last, "... (%d more arguments)", &more); err == nil {
		return len(args) - 1 + more
	}
	return len(args)
}
