package mover

import (
	"bytes"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Redis 6.2 propagates TTLs relative to the moment a command ran (SET … PX,
// EXPIRE, PEXPIRE, and RESTORE without ABSTTL); 7.0 and later rewrite them
// to absolute times first. Applied on the target as they are, a TTL would
// stretch by the time the command spent in the stream: the snapshot's
// whole length for a write made during it. absoluteTTL rewrites such a
// command to the absolute form, from ranAt, the source's clock (Unix ms)
// when it ran. It returns args itself when there is nothing to rewrite.
func absoluteTTL(args [][]byte, ranAt func() int64) [][]byte {
	if len(args) < 3 {
		return args
	}
	name := string(bytes.ToUpper(args[0]))
	switch name {
	case "EXPIRE", "PEXPIRE":
		n, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			return args
		}
		if name == "EXPIRE" {
			n *= 1000
		}
		out := [][]byte{[]byte("PEXPIREAT"), args[1], strconv.AppendInt(nil, ranAt()+n, 10)}
		return append(out, args[3:]...) // NX, XX, GT, LT
	case "SETEX", "PSETEX":
		if len(args) != 4 {
			return args
		}
		n, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			return args
		}
		if name == "SETEX" {
			n *= 1000
		}
		return [][]byte{[]byte("SET"), args[1], args[3], []byte("PXAT"), strconv.AppendInt(nil, ranAt()+n, 10)}
	case "SET":
		for i := 3; i+1 < len(args); i++ {
			opt := string(bytes.ToUpper(args[i]))
			if opt != "EX" && opt != "PX" {
				continue
			}
			n, err := strconv.ParseInt(string(args[i+1]), 10, 64)
			if err != nil {
				return args
			}
			if opt == "EX" {
				n *= 1000
			}
			out := slices.Clone(args)
			out[i], out[i+1] = []byte("PXAT"), strconv.AppendInt(nil, ranAt()+n, 10)
			return out
		}
	case "RESTORE", "RESTORE-ASKING":
		if len(args) < 4 || slices.ContainsFunc(args[4:], func(a []byte) bool { return bytes.EqualFold(a, []byte("ABSTTL")) }) {
			return args
		}
		n, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil || n == 0 {
			return args
		}
		out := slices.Clone(args)
		out[2] = strconv.AppendInt(nil, ranAt()+n, 10)
		return append(out, []byte("ABSTTL"))
	}
	return args
}

// sourceClock maps stream offsets to the source's clock, from samples of
// its offset and TIME taken together: a command that ends at or before a
// sample's offset ran before that sample's time. The error is at most the
// interval between samples.
type sourceClock struct {
	mu      sync.Mutex
	samples []clockSample // by offset
}

type clockSample struct {
	off   int64     // master_repl_offset, read before TIME
	ms    int64     // the source's TIME, in Unix ms
	local time.Time // our clock when TIME was read
}

func (c *sourceClock) add(off, ms int64, local time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.samples); n > 0 && off < c.samples[n-1].off {
		return // a reply that overtook another: keep them ordered
	}
	c.samples = append(c.samples, clockSample{off, ms, local})
}

// at returns the source's time when the command that ends at end had run
// (at the latest): the first sample at or past end, or the source's time
// now, from the newest sample, when none is yet. Samples before end are
// dropped: the stream is applied in order.
func (c *sourceClock) at(end int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.samples), func(i int) bool { return c.samples[i].off >= end })
	if i > 0 {
		c.samples = c.samples[i-1:] // keep one before, for the clock's pace
		i = 1
	}
	if i < len(c.samples) {
		return c.samples[i].ms
	}
	if len(c.samples) == 0 {
		return time.Now().UnixMilli()
	}
	last := c.samples[len(c.samples)-1]
	return last.ms + time.Since(last.local).Milliseconds()
}

// expiryOf returns the expiry a command in the absolute form of
// absoluteTTL leaves its key with (Unix ms; 0 for none), and false for a
// command that leaves the key's expiry as it was (or one it cannot read).
func expiryOf(args [][]byte) (int64, bool) {
	if len(args) < 2 {
		return 0, false
	}
	abs := func(unit int64, a []byte) (int64, bool) {
		n, err := strconv.ParseInt(string(a), 10, 64)
		return n * unit, err == nil
	}
	switch string(bytes.ToUpper(args[0])) {
	case "PEXPIREAT":
		if len(args) >= 3 {
			return abs(1, args[2])
		}
	case "EXPIREAT":
		if len(args) >= 3 {
			return abs(1000, args[2])
		}
	case "PERSIST", "GETSET":
		return 0, true
	case "SET", "GETEX":
		first := 3 // SET key value [options]
		if bytes.EqualFold(args[0], []byte("GETEX")) {
			first = 2
		}
		for i := first; i < len(args); i++ {
			switch opt := string(bytes.ToUpper(args[i])); {
			case (opt == "PXAT" || opt == "EXAT") && i+1 < len(args):
				if opt == "EXAT" {
					return abs(1000, args[i+1])
				}
				return abs(1, args[i+1])
			case opt == "KEEPTTL", opt == "EX", opt == "PX":
				return 0, false
			case opt == "PERSIST":
				return 0, true
			}
		}
		return 0, first == 3 // SET without a TTL clears it; GETEX without one keeps it
	case "RESTORE", "RESTORE-ASKING":
		if len(args) < 4 {
			return 0, false
		}
		ttl, ok := abs(1, args[2])
		absolute := slices.ContainsFunc(args[4:], func(a []byte) bool { return bytes.EqualFold(a, []byte("ABSTTL")) })
		if !ok || (ttl != 0 && !absolute) {
			return 0, false
		}
		return ttl, true
	}
	return 0, false
}
