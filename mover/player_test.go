package mover

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/slots"
	"github.com/slotmover/slotmover/stream"
)

// testView is what the player knows in a case: the moving slot is 7
// (slot 8 is listed later by the keys path), the source's clock reads
// 1,000,000 ms, and keys are deferred, chunked or guarded by name.
type testView struct {
	deferredKeys, chunkedKeys, orderedKeys, guardedKeys []string
}

func (v testView) moving(slot uint16) bool      { return slot == 7 || slot == 8 }
func (v testView) listedLater(slot uint16) bool { return slot == 8 }
func (v testView) deferred(key []byte) bool     { return has(v.deferredKeys, key) }
func (v testView) chunked(key []byte) bool      { return has(v.chunkedKeys, key) }
func (v testView) inOrder(key []byte) bool      { return has(v.orderedKeys, key) }
func (v testView) guarded(key []byte) bool      { return has(v.guardedKeys, key) }
func (v testView) sourceTime(int64) int64       { return 1_000_000 }

// ordered is the view of a sorted set key chunked in its order.
func ordered(key string) testView {
	return testView{chunkedKeys: []string{key}, orderedKeys: []string{key}}
}

func has(list []string, key []byte) bool {
	for _, k := range list {
		if k == string(key) {
			return true
		}
	}
	return false
}

// cmd is a keyed command of slot 7 whose keys are the args at keys.
func cmd(line string, keys ...int) *stream.Command {
	var args [][]byte
	for _, a := range strings.Fields(line) {
		args = append(args, []byte(a))
	}
	return &stream.Command{Args: args, Class: stream.ClassKeyed, Keys: keys, Slot: 7, Start: 100, End: 140}
}

// String shows a play as the tables write it: "send SET k v",
// "guarded SET k v", "forget k", "track k 1005000", "restart k",
// "resync a b".
func (p play) String() string {
	words := func(bs [][]byte) string {
		var out []string
		for _, b := range bs {
			out = append(out, string(b))
		}
		return strings.Join(out, " ")
	}
	switch p.kind {
	case playSend:
		return "send " + words(p.args)
	case playSendGuarded:
		return "guarded " + words(p.args)
	case playForget:
		return "forget " + string(p.key)
	case playTrack:
		return fmt.Sprintf("track %s %d", p.key, p.at)
	case playRestart:
		return "restart " + string(p.key)
	case playResync:
		return "resync " + words(p.keys)
	}
	return "?"
}

// Each rule of the delta that decides whether a write reaches the target
// whole, once, and in order.
func TestPlaysOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  *stream.Command
		view testView
		want []string // nil: not a delta command
	}{
		{"a write of a slot that does not move is not the move's",
			&stream.Command{Args: [][]byte{[]byte("SET"), []byte("k"), []byte("v")}, Class: stream.ClassKeyed, Keys: []int{1}, Slot: 9}, testView{}, nil},
		{"a write of a slot the keys path lists later is held by the listing",
			&stream.Command{Args: [][]byte{[]byte("SET"), []byte("k"), []byte("v")}, Class: stream.ClassKeyed, Keys: []int{1}, Slot: 8}, testView{}, nil},
		{"a keyless write is not the move's",
			&stream.Command{Args: [][]byte{[]byte("FUNCTION"), []byte("FLUSH")}, Class: stream.ClassKeyless, Slot: 7}, testView{}, nil},
		{"a write goes as it is; a SET leaves its key no TTL",
			cmd("SET k v", 1), testView{}, []string{"send SET k v", "track k 0"}},
		{"one that leaves the TTL as it was is not tracked",
			cmd("INCR k", 1), testView{}, []string{"send INCR k"}},
		{"a write on a key whose read is pending is held by that read",
			cmd("INCR k", 1), testView{deferredKeys: []string{"k"}}, []string{}},
		{"a relative TTL becomes absolute from the source's clock, and is tracked",
			cmd("SET k v EX 5", 1), testView{}, []string{"send SET k v PXAT 1005000", "track k 1005000"}},
		{"EXPIRE too",
			cmd("EXPIRE k 10", 1), testView{}, []string{"send PEXPIREAT k 1010000", "track k 1010000"}},
		{"PERSIST drops the key's expiry",
			cmd("PERSIST k", 1), testView{}, []string{"send PERSIST k", "track k 0"}},
		{"a write on a key near its expiry goes through the guard",
			cmd("HSET k f v", 1), testView{guardedKeys: []string{"k"}}, []string{"guarded HSET k f v"}},
		{"DEL needs no guard: the key is gone either way",
			cmd("DEL k", 1), testView{guardedKeys: []string{"k"}}, []string{"forget k", "send DEL k"}},
		{"a positional write on a sorted set read in chunks restarts its read",
			cmd("ZPOPMIN z", 1), testView{chunkedKeys: []string{"z"}}, []string{"restart z"}},
		{"a write by member on it goes as it is",
			cmd("ZADD z 1 m", 1), testView{chunkedKeys: []string{"z"}}, []string{"send ZADD z 1 m"}},
		{"so does a relative one on a set read in the scan's order",
			cmd("ZINCRBY z 5 m", 1), testView{chunkedKeys: []string{"z"}}, []string{"send ZINCRBY z 5 m"}},
		{"on one read in its order, a score from the member's old one restarts the read",
			cmd("ZINCRBY z 5 m", 1), ordered("z"), []string{"restart z"}},
		{"ZADD INCR too",
			cmd("zadd z ch incr 5 m", 1), ordered("z"), []string{"restart z"}},
		{"and ZADD XX: the target may lack the member",
			cmd("ZADD z XX GT 5 m", 1), ordered("z"), []string{"restart z"}},
		{"ZADD NX, GT or LT adds what the source has or a later chunk brings",
			cmd("ZADD z NX GT 5 m", 1), ordered("z"), []string{"send ZADD z NX GT 5 m"}},
		{"a member named XX is a member",
			cmd("ZADD z 5 XX", 1), ordered("z"), []string{"send ZADD z 5 XX"}},
		{"one key named twice is one key",
			cmd("LMOVE l l LEFT RIGHT", 1, 2), testView{}, []string{"send LMOVE l l LEFT RIGHT"}},
		{"a multi-key DEL is split per key; a deferred key's read holds its DEL",
			cmd("DEL a b c", 1, 2, 3), testView{deferredKeys: []string{"b"}},
			[]string{"forget a", "send DEL a", "forget b", "forget c", "send DEL c"}},
		{"UNLINK likewise",
			cmd("UNLINK a b", 1, 2), testView{}, []string{"forget a", "send UNLINK a", "forget b", "send UNLINK b"}},
		{"MSET becomes one SET per key, leaving no TTL",
			cmd("MSET a 1 b 2", 1, 3), testView{}, []string{"forget a", "send SET a 1", "forget b", "send SET b 2"}},
		{"MSETNX reached the stream only if it set every key: the same",
			cmd("MSETNX a 1 b 2", 1, 3), testView{deferredKeys: []string{"a"}}, []string{"forget a", "forget b", "send SET b 2"}},
		{"any other multi-key write is read again from the source",
			cmd("SMOVE a b m", 1, 2), testView{}, []string{"resync a b"}},
		{"but not its keys already waiting for a read",
			cmd("RENAME a b", 1, 2), testView{deferredKeys: []string{"a"}}, []string{"resync b"}},
		{"nor when all of them are",
			cmd("RENAME a b", 1, 2), testView{deferredKeys: []string{"a", "b"}}, []string{}},
		{"a big key read in chunks among them is read again from its start",
			cmd("SUNIONSTORE d s1 s2", 1, 2, 3), testView{chunkedKeys: []string{"s1"}}, []string{"restart s1", "resync d s2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !isDelta(tc.cmd, tc.view) {
				if tc.want != nil {
					t.Fatalf("%s: not a delta command, want %q", tc.cmd.Name(), tc.want)
				}
				return
			}
			if tc.want == nil {
				t.Fatalf("%s: a delta command, want none", tc.cmd.Name())
			}
			got := []string{}
			for _, p := range playsOf(tc.cmd, tc.view) {
				got = append(got, p.String())
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Fatalf("plays\n  got  %q\n  want %q", got, tc.want)
			}
		})
	}
}

// What ends the move instead of being played.
func TestRefusal(t *testing.T) {
	cross := func(keys ...string) *stream.Command {
		c := cmd("DEL "+strings.Join(keys, " "), 1, 2)
		c.Class = stream.ClassCrossSlot
		return c
	}
	// Keys of slots 7 (moving) and 9 (not), found by hash tag.
	var in, out string
	for i := 0; in == "" || out == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch slots.ForString(k) {
		case 7:
			in = k
		case 9:
			out = k
		}
	}
	for _, tc := range []struct {
		name string
		cmd  *stream.Command
		want string // "" for none
	}{
		{"FLUSHALL", &stream.Command{Args: [][]byte{[]byte("FLUSHALL")}, Class: stream.ClassKeyless}, ErrSourceFlushed.Error()},
		{"flushdb", &stream.Command{Args: [][]byte{[]byte("flushdb"), []byte("ASYNC")}, Class: stream.ClassKeyless}, ErrSourceFlushed.Error()},
		{"a command the source's table lacks", &stream.Command{Args: [][]byte{[]byte("MYMOD.SET"), []byte("k")}, Class: stream.ClassUnknown}, "cannot tell its keys"},
		{"a cross-slot write into a moving slot", cross(out, in), "touches a moving slot"},
		{"a cross-slot write of other slots only", cross(out, out+"x"), ""},
		{"a keyless write is logged, not refused", &stream.Command{Args: [][]byte{[]byte("FUNCTION"), []byte("FLUSH")}, Class: stream.ClassKeyless}, ""},
		{"a keyed write", cmd("SET k v", 1), ""},
	} {
		err := refusal(tc.cmd, testView{})
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
