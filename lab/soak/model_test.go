package soak

import (
	"strings"
	"testing"
)

// want checks that fs holds exactly one finding of category c (or none
// for c == none) and that its detail mentions sub.
func want(t *testing.T, fs []finding, c category, sub string) {
	t.Helper()
	switch {
	case c == none && len(fs) > 0:
		t.Fatalf("unexpected finding: %+v", fs)
	case c == none:
		return
	case len(fs) != 1:
		t.Fatalf("want one %s finding, got %+v", c, fs)
	case fs[0].cat != c || !strings.Contains(fs[0].detail, sub):
		t.Fatalf("want %s mentioning %q, got %s: %s", c, sub, fs[0].cat, fs[0].detail)
	}
}

const none = numCategories

func TestCounterModel(t *testing.T) {
	m := &counterModel{}
	want(t, m.incr(1, 1, true), none, "")
	want(t, m.incr(2, 3, true), none, "")
	m.incr(1, 0, false) // unknown: 3 or 4
	want(t, m.check(3), none, "")
	m.incr(1, 0, false)
	want(t, m.check(5), catWrong, "3..4")
	want(t, m.incr(5, 7, true), catLost, "8..9") // follows the server from here
	want(t, m.check(7), none, "")
	want(t, m.del(1, true), none, "")
	want(t, m.check(0), none, "")
	want(t, m.del(1, true), catWrong, "never incremented")
}

func TestSeqModelFullReads(t *testing.T) {
	m := &seqModel{}
	want(t, m.push(m.take(3), 3, true), none, "") // 1 2 3
	m.push(m.take(1), -1, false)                  // 4 perhaps
	want(t, m.push(m.take(1), 5, true), none, "") // 5; a size of 5 says 4 is there
	if m.nsure != 5 {
		t.Fatalf("size 5 after 5 pushes should settle the uncertain one: %+v", m)
	}
	m.push(m.take(1), -1, false) // 6 perhaps
	want(t, m.checkAll([]int64{1, 2, 3, 4, 5}), none, "")
	want(t, m.checkAll([]int64{1, 2, 3, 5}), catLost, "element 4 missing")
	want(t, m.checkAll([]int64{1, 2, 3, 4, 5, 7}), catWrong, "never pushed")
	want(t, m.checkAll([]int64{2, 1, 3, 4, 5}), catLost, "element 1 missing")
	want(t, m.checkAll([]int64{1, 2, 3, 5, 4}), catLost, "element 4")
	want(t, m.checkAll(nil), catLost, "element 1")
	want(t, m.push(m.take(2), 4, true), catLost, "size 4")
	want(t, m.push(m.take(1), 99, true), catWrong, "size 99")
}

func TestSeqModelTail(t *testing.T) {
	m := &seqModel{}
	m.push(m.take(100), 100, true)
	m.push(m.take(1), -1, false)                              // 101 perhaps
	want(t, m.checkTail([]int64{98, 99, 100}, 100), none, "") // settles: 101 is not there
	want(t, m.checkTail([]int64{99, 100, 101}, 101), catWrong, "size 101")
	m.push(m.take(1), -1, false)                               // 102 perhaps
	want(t, m.checkTail([]int64{99, 100, 102}, 101), none, "") // settles: 102 is there
	want(t, m.checkTail([]int64{98, 99, 100}, 100), catLost, "size 100")
	want(t, m.checkTail([]int64{98, 100, 102}, 101), catLost, "element 99")
	want(t, m.checkTail([]int64{98, 99, 100, 102, 103}, 102), catWrong, "size 102")
	want(t, m.checkTail([]int64{500}, 101), catWrong, "never pushed")
	want(t, m.checkTail([]int64{97, 98, 99, 100}, 101), catLost, "element 102")
}

func TestSeqModelDel(t *testing.T) {
	m := &seqModel{}
	m.push(m.take(2), 2, true)
	m.del(-1, false) // perhaps gone
	want(t, m.checkAll(nil), none, "")
	m.push(m.take(2), 2, true)
	m.del(-1, false)
	m.push(m.take(1), -1, true)
	want(t, m.checkAll([]int64{5}), none, "")
	want(t, m.del(0, true), catLost, "DEL found nothing")
}

func TestStrModelExpiry(t *testing.T) {
	m := newStrModel()
	// SET v PX 1000 ran between t=10,000 and 10,005 ms: it expires in [11,000, 11,005].
	m.set("v1", 1000, window{10_000, 10_005}, true)
	want(t, m.check("v1", window{10_500, 10_501}), none, "")
	want(t, m.check(absent, window{10_500, 10_501}), catLost, "read nothing")
	want(t, m.check(absent, window{11_001, 11_002}), none, "") // may have expired
	want(t, m.check("v1", window{11_500, 11_501}), catResurrected, "after a read found it expired")

	m = newStrModel()
	m.set("v1", 1000, window{10_000, 10_005}, true)
	want(t, m.check("v1", window{11_001, 11_002}), none, "") // may still be there
	want(t, m.check("v1", window{11_020, 11_021}), catResurrected, "must have expired")
	want(t, m.check("v2", window{10_100, 10_101}), catWrong, `"v2"`)

	// PEXPIRE on a key that must exist, and its reply.
	m = newStrModel()
	m.set("v1", 0, window{0, 1}, true)
	want(t, m.pexpire(500, 0, window{100, 101}, true), catLost, "PEXPIRE found no key")
	m.set("v1", 0, window{0, 1}, true)
	want(t, m.pexpire(500, 1, window{100, 101}, true), none, "")
	want(t, m.check(absent, window{700, 701}), none, "")
	want(t, m.pexpire(500, 1, window{800, 801}, true), catResurrected, "after a read found it expired")

	// An unknown SET leaves both values possible until a read tells.
	m = newStrModel()
	m.set("v1", 0, window{0, 1}, true)
	m.set("v2", 0, window{2, 3}, false)
	want(t, m.check("v1", window{4, 5}), none, "")
	want(t, m.check("v2", window{4, 5}), catWrong, `"v2"`) // the read settled v1
	m.set("v3", 0, window{6, 7}, false)
	want(t, m.check("v3", window{8, 9}), none, "")
	want(t, m.del(0, window{10, 11}, true), catLost, "DEL found no key")
	want(t, m.check(absent, window{10, 11}), none, "")
}

func TestFieldModel(t *testing.T) {
	m := newFieldModel()
	want(t, m.countChanged([]string{"a", "b"}, 2, false, "HSET"), none, "")
	m.set("a", "1", true)
	m.set("b", "1", true)
	want(t, m.countChanged([]string{"a", "c"}, 2, false, "HSET"), catLost, "at most 1 could be missing")
	want(t, m.countChanged([]string{"a", "c"}, 0, false, "HSET"), catWrong, "1 must have been new")
	want(t, m.countChanged([]string{"a"}, 1, false, "HSET"), catLost, "at most 0")
	m.set("c", "2", false) // perhaps
	want(t, m.check(map[string]string{"a": "1", "b": "1"}, true), none, "")
	m.set("c", "2", false)
	want(t, m.check(map[string]string{"a": "1", "b": "1", "c": "2"}, true), none, "")
	want(t, m.check(map[string]string{"a": "1"}, true), catLost, "field b missing")
	want(t, m.check(map[string]string{"a": "1", "b": "9", "c": "2"}, true), catWrong, `field b = "9"`)
	want(t, m.check(map[string]string{"a": "1", "b": "1", "c": "2", "d": "1"}, true), catWrong, "field d")
	want(t, m.countChanged([]string{"a", "b"}, 1, true, "SREM"), catLost, "2 were acknowledged present")

	z := newFieldModel()
	want(t, z.incr("m", 3, "3", true), none, "")
	z.incr("m", 2, "", false) // 3 or 5
	want(t, z.check(map[string]string{"m": "5"}, true), none, "")
	want(t, z.incr("m", 1, "7", true), catWrong, "allows 6")
}
