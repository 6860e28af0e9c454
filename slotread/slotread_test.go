package slotread_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/info"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/tests/harness"
)

// The reads against a real source: a listing names exactly the slots'
// keys and refuses past its limit; a batch reads keys in order until its
// budget, reports big and gone keys, and its payloads restore to the same
// values and TTLs; a chunked scan of a big hash brings every field.
func TestReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{}).Nodes[0].Client()
	defer c.Close()
	slot := slots.ForString("{a}")
	other := slots.ForString("{b}")
	for i := 0; i < 50; i++ {
		c.Set(ctx, fmt.Sprint("{a}s", i), i, 0)
	}
	c.Set(ctx, "{a}ttl", "v", time.Hour)
	c.Set(ctx, "{b}x", "v", 0)
	for i := 0; i < 3000; i++ {
		c.HSet(ctx, "{a}big", fmt.Sprint("f", i), i)
	}
	c.RPush(ctx, "{a}list", 1, 2, 3)

	lists, err := slotread.List(ctx, c, []uint16{slot, other}, "{a}marker", "n1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(lists) != 2 || len(lists[0]) != 53 || len(lists[1]) != 1 || lists[1][0] != "{b}x" {
		t.Fatalf("listing: %d slots, %d and %d keys; want 53 and {b}x", len(lists), len(lists[0]), len(lists[1]))
	}
	var tooMany *slotread.TooManyKeys
	if _, err := slotread.List(ctx, c, []uint16{slot}, "{a}marker", "n2", 10); !errors.As(err, &tooMany) || tooMany.Keys != 53 {
		t.Fatalf("listing over the limit: %v, want TooManyKeys{53}", err)
	}
	if n, _ := c.Exists(ctx, "{a}marker").Result(); n != 0 {
		t.Fatal("the marker is left on the source")
	}

	// In order until the budget: 20 strings of 1 unit (+1 each), then
	// stop; a big key and a gone key are reported, not read.
	keys := []string{"{a}big", "{a}gone", "{a}ttl", "{a}list"}
	for i := 0; i < 50; i++ {
		keys = append(keys, fmt.Sprint("{a}s", i))
	}
	got, err := slotread.Read(ctx, c, keys, "{a}marker", "n3", slotread.Limits{Budget: 40, Big: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 4 || len(got) >= len(keys) {
		t.Fatalf("read %d of %d keys with a budget of 40 units", len(got), len(keys))
	}
	if !got[0].Big || got[0].Type != "hash" || got[0].Units != 3000 || got[0].Payload != nil {
		t.Fatalf("big hash: %+v", got[0])
	}
	if !got[1].Gone || got[1].Payload != nil {
		t.Fatalf("gone key: %+v", got[1])
	}
	dst := harness.ServerT(t, localcluster.Options{}).Client()
	defer dst.Close()
	for _, k := range got[2:] {
		if k.Gone || k.Big || k.Payload == nil {
			t.Fatalf("%s: %+v", k.Name, k)
		}
		if err := dst.RestoreReplace(ctx, k.Name, 0, string(k.Payload)).Err(); err != nil {
			t.Fatal(err)
		}
		if k.ExpireAt > 0 {
			dst.PExpireAt(ctx, k.Name, time.UnixMilli(k.ExpireAt))
		}
	}
	if err := localcluster.CompareKeys(ctx, c, dst, namesOf(got[2:])); err != nil {
		t.Fatalf("the payloads restored elsewhere: %v", err)
	}
	if at := got[2].ExpireAt; at < time.Now().Add(time.Hour-time.Minute).UnixMilli() || at > time.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("{a}ttl expires at %d, want about an hour from now", at)
	}

	// The big hash in chunks of about 50 buckets: every field, once the
	// cursor is back at 0.
	fields := map[string]string{}
	cursor, calls := "0", 0
	for {
		ch, err := slotread.ReadChunk(ctx, c, "{a}big", "hash", cursor, 50, "{a}marker", "n"+strconv.Itoa(calls), false)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		for i := 0; i+1 < len(ch.Elements); i += 2 {
			fields[ch.Elements[i]] = ch.Elements[i+1]
		}
		if cursor = ch.Cursor; cursor == "0" || calls > 100 {
			break
		}
	}
	if len(fields) != 3000 || calls < 3 {
		t.Fatalf("chunks: %d fields in %d calls, want 3000 in several", len(fields), calls)
	}
	ch, err := slotread.ReadChunk(ctx, c, "{a}big", "set", "0", 50, "{a}marker", "n-type", false)
	if err != nil || ch.Type != "hash" || ch.Cursor != "0" || len(ch.Elements) != 0 {
		t.Fatalf("a chunk of a key of another type: %+v %v; want its type, no elements, the end", ch, err)
	}
}

func namesOf(keys []slotread.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Name)
	}
	return out
}

// Transactions read every key of their batch, gone ones reported, with
// payloads that restore to the same values and TTLs; a batch refused (a key
// of a slot the node does not serve) stops the reads there and names the
// reason, the batches before it read; no marker is left behind; and the
// survey gives each small key its size.
func TestReadTxAndSurvey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := harness.ClusterT(t, []string{"0-8191", "8192-16383"}, localcluster.Options{})
	c := cl.Nodes[0].Client()
	defer c.Close()
	// Two tags of the first node's slots, one of the second's.
	var mine []string
	other := ""
	for i := 0; len(mine) < 2 || other == ""; i++ {
		tag := fmt.Sprintf("{t%d}", i)
		if slots.ForString(tag) <= 8191 {
			mine = append(mine, tag)
		} else if other == "" {
			other = tag
		}
	}
	a, b := mine[0], mine[1]
	for i := range 20 {
		c.Set(ctx, fmt.Sprint(a, "s", i), strings.Repeat("v", 64*i), 0)
		c.Set(ctx, fmt.Sprint(b, "s", i), i, 0)
	}
	c.Set(ctx, a+"ttl", "v", time.Hour)
	c.HSet(ctx, b+"h", "f1", "x", "f2", "y")

	batchA := []string{a + "ttl", a + "gone"}
	for i := range 20 {
		batchA = append(batchA, fmt.Sprint(a, "s", i))
	}
	batchB := []string{b + "h", b + "s3"}
	got, err := slotread.ReadTx(ctx, c, []slotread.Batch{
		{Keys: batchA, Marker: a + "marker", Nonce: "n1"},
		{Keys: batchB, Marker: b + "marker", Nonce: "n2"},
		{Keys: []string{other + "x"}, Marker: other + "marker", Nonce: "n3"},
		{Keys: []string{a + "s1"}, Marker: a + "marker", Nonce: "n4"},
	})
	if err == nil || !strings.Contains(err.Error(), "MOVED") || len(got) != 2 {
		t.Fatalf("a batch of another node's slot: %d batches read, %v; want 2, and its MOVED", len(got), err)
	}
	if len(got[0]) != len(batchA) || len(got[1]) != len(batchB) {
		t.Fatalf("read %d and %d keys, want %d and %d", len(got[0]), len(got[1]), len(batchA), len(batchB))
	}
	if k := got[0][1]; !k.Gone || k.Payload != nil {
		t.Fatalf("gone key: %+v", k)
	}
	if at := got[0][0].ExpireAt; at < time.Now().Add(time.Hour-time.Minute).UnixMilli() || at > time.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("%sttl expires at %d, want about an hour from now", a, at)
	}
	dst := harness.ServerT(t, localcluster.Options{}).Client()
	defer dst.Close()
	var read []slotread.Key
	for _, k := range append(append([]slotread.Key{got[0][0]}, got[0][2:]...), got[1]...) {
		if k.Gone || k.Payload == nil {
			t.Fatalf("%s: %+v", k.Name, k)
		}
		if err := dst.RestoreReplace(ctx, k.Name, 0, string(k.Payload)).Err(); err != nil {
			t.Fatal(err)
		}
		if k.ExpireAt > 0 {
			dst.PExpireAt(ctx, k.Name, time.UnixMilli(k.ExpireAt))
		}
		read = append(read, k)
	}
	if err := localcluster.CompareKeys(ctx, c, dst, namesOf(read)); err != nil {
		t.Fatalf("the payloads restored elsewhere: %v", err)
	}
	if n, _ := c.Exists(ctx, a+"marker", b+"marker").Result(); n != 0 {
		t.Fatal("a marker is left on the source")
	}

	sv, err := slotread.SurveySlots(ctx, c, []uint16{slots.ForString(a)}, 100)
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]int64{}
	for _, k := range sv.Small {
		units[k.Name] = k.Units
	}
	// A string counts a unit per 64 bytes; the survey sees what is there.
	if len(sv.Small) != 21 || units[a+"s5"] != 5 || units[a+"s19"] != 19 || units[a+"ttl"] != 0 {
		t.Fatalf("survey: %d small keys, units %v", len(sv.Small), units)
	}
}

// ReadAt reads keys during a CLIENT PAUSE WRITE (it writes nothing) and
// answers the source's replication offset as the copies' point; its
// payloads and TTLs restore to the same keys elsewhere.
func TestReadAtDuringAWritePause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{})
	// A backlog, so that writes move the replication offset.
	if err := cl.KeepBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	c := cl.Nodes[0].Client()
	defer c.Close()
	names := []string{"{a}s", "{a}ttl", "{a}h", "{a}gone"}
	c.Set(ctx, "{a}s", "v", 0)
	c.Set(ctx, "{a}ttl", "v", time.Hour)
	c.HSet(ctx, "{a}h", "f1", "x", "f2", "y")
	if err := c.Do(ctx, "CLIENT", "PAUSE", 10_000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Do(context.Background(), "CLIENT", "UNPAUSE")
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	got, at, err := slotread.ReadAt(rctx, c, names)
	if err != nil {
		t.Fatalf("a read during the pause: %v", err)
	}
	off, err := info.ReadInt(ctx, c, "replication", "master_repl_offset")
	if err != nil || at != off || at == 0 {
		t.Fatalf("read at offset %d; the paused source is at %d (%v)", at, off, err)
	}
	if len(got) != len(names) || !got[3].Gone || got[0].Gone || got[0].ExpireAt != 0 {
		t.Fatalf("read %+v", got)
	}
	if left := time.Until(time.UnixMilli(got[1].ExpireAt)); left < time.Hour-time.Minute || left > time.Hour {
		t.Fatalf("{a}ttl expires in %s, want about an hour", left)
	}
	c.Do(ctx, "CLIENT", "UNPAUSE")
	dst := harness.ServerT(t, localcluster.Options{}).Client()
	defer dst.Close()
	for _, k := range got[:3] {
		if err := dst.RestoreReplace(ctx, k.Name, 0, string(k.Payload)).Err(); err != nil {
			t.Fatal(err)
		}
		if k.ExpireAt > 0 {
			dst.PExpireAt(ctx, k.Name, time.UnixMilli(k.ExpireAt))
		}
	}
	if err := localcluster.CompareKeys(ctx, c, dst, names[:3]); err != nil {
		t.Fatalf("the payloads restored elsewhere: %v", err)
	}
}

// On a server with hash-field expiration (7.4+), the chunks of a big hash
// read with fieldTTLs carry each field's expiry, as HPEXPIRETIME has it,
// and -1 for a field without one.
func TestChunksCarryFieldExpiries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{}).Nodes[0].Client()
	defer c.Close()
	if info, err := c.Do(ctx, "COMMAND", "INFO", "HPEXPIRETIME").Slice(); err != nil || len(info) == 0 || info[0] == nil {
		t.Skip("the server has no hash-field expiration (Redis 7.4+)")
	}
	want := map[string]int64{}
	at := time.Now().Add(time.Hour).UnixMilli()
	for i := range 3000 {
		f := fmt.Sprint("f", i)
		c.HSet(ctx, "{a}big", f, i)
		want[f] = -1
		if i%7 == 0 {
			if err := c.Do(ctx, "HPEXPIREAT", "{a}big", at+int64(i), "FIELDS", 1, f).Err(); err != nil {
				t.Fatal(err)
			}
			want[f] = at + int64(i)
		}
	}
	got := map[string]int64{}
	cursor := "0"
	for calls := 0; calls < 200; calls++ {
		ch, err := slotread.ReadChunk(ctx, c, "{a}big", "hash", cursor, 100, "{a}marker", "n"+strconv.Itoa(calls), true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.FieldExpireAt)*2 != len(ch.Elements) {
			t.Fatalf("a chunk of %d fields with %d expiries", len(ch.Elements)/2, len(ch.FieldExpireAt))
		}
		for i, e := range ch.FieldExpireAt {
			got[ch.Elements[2*i]] = e
		}
		if cursor = ch.Cursor; cursor == "0" {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("chunks brought %d fields, want %d", len(got), len(want))
	}
	for f, w := range want {
		if got[f] != w {
			t.Fatalf("field %s expires at %d, want %d", f, got[f], w)
		}
	}
}

// A sorted set read by ranges comes whole and in order; a change after the
// last member read leaves the next range valid, one before it (its ranks
// moved) is reported and brings no member; a key of another type ends it.
func TestReadRange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := harness.ClusterT(t, []string{"0-16383"}, localcluster.Options{}).Nodes[0].Client()
	defer c.Close()
	for i := range 1000 {
		c.Do(ctx, "ZADD", "{a}z", i, fmt.Sprintf("m%04d", i))
	}
	c.Expire(ctx, "{a}z", time.Hour)
	read := func(rank int64, after []string, n int) slotread.Chunk {
		t.Helper()
		ch, err := slotread.ReadRange(ctx, c, "{a}z", rank, after, n, "{a}marker", "n")
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	var got []string
	rank, after := int64(0), []string(nil)
	for calls := 0; ; calls++ {
		ch := read(rank, after, 300)
		if ch.Moved || ch.Type != "zset" || ch.ExpireAt < time.Now().Add(59*time.Minute).UnixMilli() || calls > 10 {
			t.Fatalf("chunk %d: %+v", calls, ch)
		}
		got = append(got, ch.Elements...)
		if ch.Cursor == "0" {
			break
		}
		rank, _ = strconv.ParseInt(ch.Cursor, 10, 64)
		after = ch.Elements[len(ch.Elements)-2:]
		switch calls {
		case 0: // after the last member read: the ranks before it stay
			c.Do(ctx, "ZADD", "{a}z", 5000, "late")
			c.ZRem(ctx, "{a}z", "m0999")
		}
	}
	if len(got) != 2000 || got[0] != "m0000" || got[1] != "0" || got[1996] != "m0998" || got[1998] != "late" || got[1999] != "5000" {
		t.Fatalf("%d strings, from %v to %v; want 1000 members and scores in order, the late one last", len(got), got[:2], got[len(got)-4:])
	}

	first := read(0, nil, 300)
	after = first.Elements[len(first.Elements)-2:]
	c.ZAdd(ctx, "{a}z", redis.Z{Score: -1, Member: "early"}) // before: every rank after it moves
	if ch := read(300, after, 300); !ch.Moved || len(ch.Elements) != 0 {
		t.Fatalf("after a member was added before the last one read: %+v, want Moved and no members", ch)
	}
	c.ZRem(ctx, "{a}z", "early", "m0000") // two fewer before it: the rank before holds another
	if ch := read(300, after, 300); !ch.Moved {
		t.Fatalf("after two members before the last one read went: %+v, want Moved", ch)
	}
	c.Set(ctx, "{a}z", "now a string", 0)
	if ch := read(0, nil, 300); ch.Type != "string" || ch.Cursor != "0" || len(ch.Elements) != 0 {
		t.Fatalf("a range of a key of another type: %+v; want its type, no members, the end", ch)
	}
}
