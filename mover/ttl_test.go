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
		var args [][]byte
		for _, f := range strings.Fields(in) {
			args = append(args, []byte(f))
		}
		var got []string
		for _, a := range absoluteTTL(args, at) {
			got = append(got, string(a))
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("%s: got %q, want %q", in, g, want)
		}
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
