package rdbparse

import (
	"iter"
	"math"
	"strconv"

	"github.com/slotmover/slotmover/chunk"
)

// Commands returns write commands that rebuild the value under key from
// scratch, each as its arguments (command name first), the elements cut
// into commands within lim: SET, RPUSH, SADD, HSET (then HPEXPIREAT for field
// TTLs), ZADD; for streams one XADD per entry with its explicit ID, then
// XSETID (with ENTRIESADDED and MAXDELETEDID when the RDB has them), then per group XGROUP CREATE
// with ENTRIESREAD, XGROUP CREATECONSUMER per consumer, and XCLAIM … FORCE
// JUSTID with TIME and RETRYCOUNT to rebuild the pending entries. No TTL:
// the caller sets it. The arguments alias o and key; treat them as read-only.
//
// What cannot be rebuilt: pending entries whose stream entry was deleted
// (XCLAIM skips IDs that are not in the stream), and consumers' seen/active
// times (XCLAIM sets them to now).
func (o *Object) Commands(key []byte, lim chunk.Limit) iter.Seq[[][]byte] {
	return func(yield func([][]byte) bool) {
		switch o.Kind {
		case KindString:
			yield([][]byte{[]byte("SET"), key, o.String})
		case KindList, KindSet:
			name := "RPUSH"
			if o.Kind == KindSet {
				name = "SADD"
			}
			for i, j := range lim.Split(name, len(o.Items), func(i int) int { return len(o.Items[i]) }) {
				part := o.Items[i:j]
				args := make([][]byte, 0, 2+len(part))
				args = append(args, []byte(name), key)
				if !yield(append(args, part...)) {
					return
				}
			}
		case KindHash:
			hashCommands(o.Fields, key, lim, yield)
		case KindZSet:
			for i, j := range lim.Split("ZADD", len(o.Members), func(i int) int { return len(o.Members[i].Member) + 8 }) {
				part := o.Members[i:j]
				args := make([][]byte, 0, 2+2*len(part))
				args = append(args, []byte("ZADD"), key)
				for _, m := range part {
					args = append(args, formatScore(m.Score), m.Member)
				}
				if !yield(args) {
					return
				}
			}
		case KindStream:
			streamCommands(o.Stream, key, lim, yield)
		}
	}
}

func hashCommands(fields []HashField, key []byte, lim chunk.Limit, yield func([][]byte) bool) {
	withTTL := 0
	for i, j := range lim.Split("HSET", len(fields), func(i int) int { return len(fields[i].Field) + len(fields[i].Value) }) {
		part := fields[i:j]
		args := make([][]byte, 0, 2+2*len(part))
		args = append(args, []byte("HSET"), key)
		for _, f := range part {
			args = append(args, f.Field, f.Value)
			if f.ExpireAt != 0 {
				withTTL++
			}
		}
		if !yield(args) {
			return
		}
	}
	if withTTL == 0 {
		return
	}
	// Field TTLs (Redis >= 7.4), fields of one expiry time together.
	byTime := make(map[int64][][]byte)
	var times []int64
	for _, f := range fields {
		if f.ExpireAt == 0 {
			continue
		}
		if _, ok := byTime[f.ExpireAt]; !ok {
			times = append(times, f.ExpireAt)
		}
		byTime[f.ExpireAt] = append(byTime[f.ExpireAt], f.Field)
	}
	for _, t := range times {
		names := byTime[t]
		for i, j := range lim.Split("HPEXPIREAT", len(names), func(i int) int { return len(names[i]) }) {
			part := names[i:j]
			args := make([][]byte, 0, 5+len(part))
			args = append(args, []byte("HPEXPIREAT"), key, strconv.AppendInt(nil, t, 10),
				[]byte("FIELDS"), strconv.AppendInt(nil, int64(len(part)), 10))
			if !yield(append(args, part...)) {
				return
			}
		}
	}
}

func streamCommands(s *Stream, key []byte, lim chunk.Limit, yield func([][]byte) bool) {
	for _, e := range s.Entries {
		args := make([][]byte, 0, 3+len(e.Fields))
		args = append(args, []byte("XADD"), key, []byte(e.ID.String()))
		if !yield(append(args, e.Fields...)) {
			return
		}
	}
	if len(s.Entries) == 0 {
		// XADD cannot make an empty stream; add one entry and trim it away at
		// once. XSETID below then sets the real last ID and counters.
		id := s.LastID
		if id == (StreamID{}) {
			id.Seq = 1
		}
		if !yield([][]byte{[]byte("XADD"), key, []byte("MAXLEN"), []byte("0"), []byte(id.String()), []byte("f"), []byte("v")}) {
			return
		}
	}
	setID := [][]byte{[]byte("XSETID"), key, []byte(s.LastID.String())}
	if s.Counters {
		setID = append(setID,
			[]byte("ENTRIESADDED"), strconv.AppendUint(nil, s.EntriesAdded, 10),
			[]byte("MAXDELETEDID"), []byte(s.MaxDeletedID.String()))
	}
	if !yield(setID) {
		return
	}
	for _, g := range s.Groups {
		args := [][]byte{[]byte("XGROUP"), []byte("CREATE"), key, g.Name, []byte(g.LastID.String())}
		if g.EntriesRead >= 0 {
			args = append(args, []byte("ENTRIESREAD"), strconv.AppendInt(nil, g.EntriesRead, 10))
		}
		if !yield(args) {
			return
		}
		for _, c := range g.Consumers {
			if !yield([][]byte{[]byte("XGROUP"), []byte("CREATECONSUMER"), key, g.Name, c.Name}) {
				return
			}
		}
		// One XCLAIM per run of pending entries that share consumer, delivery time and count.
		for i := 0; i < len(g.Pending); {
			p := g.Pending[i]
			j := i + 1
			for j < len(g.Pending) && !lim.Full("XCLAIM", j-i, 0) && string(g.Pending[j].Consumer) == string(p.Consumer) &&
				g.Pending[j].DeliveryTime == p.DeliveryTime && g.Pending[j].DeliveryCount == p.DeliveryCount {
				j++
			}
			args := make([][]byte, 0, 12+j-i)
			args = append(args, []byte("XCLAIM"), key, g.Name, p.Consumer, []byte("0"))
			for _, q := range g.Pending[i:j] {
				args = append(args, []byte(q.ID.String()))
			}
			args = append(args,
				[]byte("TIME"), strconv.AppendInt(nil, p.DeliveryTime, 10),
				[]byte("RETRYCOUNT"), strconv.AppendUint(nil, p.DeliveryCount, 10),
				[]byte("FORCE"), []byte("JUSTID"))
			if !yield(args) {
				return
			}
			i = j
		}
	}
}

// formatScore writes a score so that Redis parses back the same double.
func formatScore(f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return []byte("inf")
	case math.IsInf(f, -1):
		return []byte("-inf")
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64)
}
