package mover

import (
	"strings"
	"testing"
	"time"
)

func TestAbsoluteTTL(t *testing.T) {
	at := func() int64 { return 1_000_000 }
	cases := map[string]string{
		"SET k v PX 500":           "SET k v PXAT 1000500",
		"SET k v EX 2":             "SET k v PXAT 1002000",
		"set k v nx px 5":          "set k v nx PXAT 1000005",
		"SET k v PXAT 7":           "SET k v PXAT 7",
		"SET k v":                  "SET k v",
		"SET k v KEEPTTL":          "SET k v KEEPTTL",
		"SETEX k 3 v":              "SET k v PXAT 1003000",
		"PSETEX k 30 v":            "SET k v PXAT 1000030",
		"EXPIRE k 10":              "PEXPIREAT k 1010000",
		"PEXPIRE k 10 NX":          "PEXPIREAT k 1000010 NX",
		"EXPIREAT k 10":            "EXPIREAT k 10",
		"PEXPIREAT k 10":           "PEXPIREAT k 10",
		"RESTORE k 100 p":          "RESTORE k 1000100 p ABSTTL",
		"RESTORE k 100 p ABSTTL":   "RESTORE k 100 p ABSTTL",
		"RESTORE k 0 p REPLACE":    "RESTORE k 0 p REPLACE",
		"INCR k":                   "INCR k",
		"EXPIRE k notanumber":      "EXPIRE k notanumber",
		"HSET k f v":               "HSET k f v",
		"RESTORE k 100 p REPLACE":  "RESTORE k 1000100 p REPLACE ABSTTL",
		"SET k v GET PX 1":         "SET k v GET PXAT 1000001",
		"PSETEX k 30 v extra":      "PSETEX k 30 v extra",
		"SET k PX PX 1":            "SET k PX PXAT 1000001",
		"EXPIRE k":                 "EXPIRE k",
		"restore-asking k 5 p":     "restore-asking k 1000005 p ABSTTL",
		"SET k v EX 1 KEEPTTL foo": "SET k v PXAT 1001000 KEEPTTL foo",
	}
	for in, want := range cases {
		var got []string
		for _, a := range absoluteTTL(fields(in), at) {
			got = append(got, string(a))
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s: got %q, want %q", in, g, want)
		}
	}
}

func fields(s string) [][]byte {
	var args [][]byte
	for _, f := range strings.Fields(s) {
		args = append(args, []byte(f))
	}
	return args
}

func TestExpiryOf(t *testing.T) {
	type result struct {
		at   int64
		sets bool
	}
	cases := map[string]result{
		"SET k v PXAT 7":                      {7, true},
		"set k v nx exat 7":                   {7000, true},
		"SET k PXAT":                          {0, true}, // the value is PXAT
		"SET k v":                             {0, true},
		"SET k v GET":                         {0, true},
		"SET k v KEEPTTL":                     {0, false},
		"SET k v PX 5":                        {0, false}, // relative: not the absolute form
		"PEXPIREAT k 9":                       {9, true},
		"PEXPIREAT k 9 GT":                    {9, true},
		"EXPIREAT k 9":                        {9000, true},
		"PEXPIREAT k":                         {0, false},
		"PERSIST k":                           {0, true},
		"GETSET k v":                          {0, true},
		"GETEX k PXAT 12":                     {12, true},
		"GETEX k PERSIST":                     {0, true},
		"GETEX k":                             {0, false},
		"RESTORE k 100 p ABSTTL":              {100, true},
		"RESTORE k 0 p REPLACE":               {0, true},
		"RESTORE k 100 p REPLACE":             {0, false},
		"restore-asking k 5 p REPLACE absttl": {5, true},
		"INCR k":                              {0, false},
		"HSET k f v":                          {0, false},
	}
	for in, want := range cases {
		at, sets := expiryOf(fields(in))
		if (result{at, sets}) != want {
			t.Errorf("%s: got %d %v, want %d %v", in, at, sets, want.at, want.sets)
		}
	}
}

// A key is guarded only close to its last known expiry or past it, however
// far ahead that expiry was when it was tracked.
func TestExpiringGuardsNearTheExpiry(t *testing.T) {
	x := newExpiring()
	now := time.Now().UnixMilli()
	k := []byte("k")
	if x.guarded(k, now) {
		t.Fatal("an untracked key is guarded")
	}
	x.track(k, now+time.Minute.Milliseconds())
	if x.guarded(k, now) {
		t.Error("a key a minute from its expiry is guarded")
	}
	if !x.guarded(k, now+time.Minute.Milliseconds()-guardAhead.Milliseconds()+1) {
		t.Error("a key less than guardAhead from its expiry is not guarded")
	}
	if !x.guarded(k, now+2*time.Minute.Milliseconds()) {
		t.Error("a key past its expiry is not guarded")
	}
	x.track(k, now-1) // expired before it was copied
	if !x.guarded(k, now) {
		t.Error("a key copied expired is not guarded")
	}
	x.track(k, now+2*time.Hour.Milliseconds())
	if x.guarded(k, now+time.Hour.Milliseconds()) {
		t.Error("a key extended by an hour keeps its old expiry")
	}
	if !x.guarded(k, now+2*time.Hour.Milliseconds()) {
		t.Error("a key tracked two hours before its expiry is not guarded when that time comes")
	}
	x.track(k, now)
	x.track(k, 0)
	if x.guarded(k, now+time.Minute.Milliseconds()) {
		t.Error("a key whose TTL was removed is still guarded")
	}
}

func TestSourceClock(t *testing.T) {
	var c sourceClock
	t0 := time.Now().Add(-time.Second) // samples in the past
	c.add(100, 5_000, t0)
	c.add(200, 5_020, t0.Add(20*time.Millisecond))
	c.add(300, 5_040, t0.Add(40*time.Millisecond))
	for _, tc := range []struct{ end, want int64 }{{50, 5_000}, {100, 5_000}, {150, 5_020}, {300, 5_040}} {
		if got := c.at(tc.end); got != tc.want {
			t.Errorf("at(%d) = %d, want %d", tc.end, got, tc.want)
		}
	}
	// Past the newest sample: the source's time now, from that sample.
	if got := c.at(400); got < 5_040 || got > 5_040+time.Since(t0.Add(40*time.Millisecond)).Milliseconds()+1 {
		t.Errorf("at(400) = %d", got)
	}
	c.add(250, 1, t0) // out of order: ignored
	if got := c.at(301); got < 5_040 {
		t.Errorf("an out-of-order sample was taken: %d", got)
	}
}
