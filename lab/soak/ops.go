package soak

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// op is one write on one key and what its outcome means for the model.
// The same op runs alone, inside MULTI/EXEC, or inside an EVAL.
type op struct {
	label string
	args  []any // command name, key, arguments
	k     *key
	// acked handles the reply of a write that ran.
	acked func(reply any, w window) []finding
	// unknown handles a write that may or may not have run.
	unknown func(w window)
	// refused, if set, judges an error reply (the write did not run).
	refused func(msg string) []finding
}

// The TTLs of volatile keys: mostly short, so keys expire during the run
// (and during moves), some long, so TTLs travel with moved keys.
func (wk *worker) ttl() int64 {
	if wk.rng.IntN(10) < 7 {
		return 100 + wk.rng.Int64N(2900)
	}
	return int64(30*time.Second/time.Millisecond) + wk.rng.Int64N(int64(10*time.Minute/time.Millisecond))
}

// counterOp is INCRBY (INCR for 1) on a counter; tx says it runs inside
// MULTI or EVAL, where the script needs INCRBY.
func (wk *worker) counterOp(k *key, tx bool) *op {
	d := int64(1)
	if wk.rng.IntN(3) == 0 {
		d = 1 + wk.rng.Int64N(9)
	}
	o := &op{label: "INCRBY", args: []any{"INCRBY", k.name, d}, k: k}
	if d == 1 && !tx {
		o.label, o.args = "INCR", []any{"INCR", k.name}
	}
	o.acked = func(r any, _ window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "%s replied %v", o.label, r)
		}
		return k.ctr.incr(d, n, true)
	}
	o.unknown = func(window) { k.ctr.incr(d, 0, false) }
	return o
}

// delOp is DEL on any key but the big ones.
func delOp(k *key) *op {
	o := &op{label: "DEL", args: []any{"DEL", k.name}, k: k}
	o.acked = func(r any, w window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "DEL replied %v", r)
		}
		return modelDel(k, n, w, true)
	}
	o.unknown = func(w window) { modelDel(k, -1, w, false) }
	return o
}

func modelDel(k *key, reply int64, w window, sure bool) []finding {
	switch {
	case k.str != nil:
		return k.str.del(reply, w, sure)
	case k.ctr != nil:
		return k.ctr.del(reply, sure)
	case k.seq != nil:
		return k.seq.del(reply, sure)
	default:
		return k.fld.del(reply, sure)
	}
}

// writeOp picks a write for a primary key.
func (wk *worker) writeOp(k *key) *op {
	r := wk.rng.IntN(100)
	switch k.kind {
	case kBigList:
		return wk.pushOp(k, bigBatch)
	case kBigHash:
		return wk.bigHashOp(k)
	}
	if r < 2 {
		return delOp(k)
	}
	switch k.kind {
	case kString:
		return wk.setOp(k, 0)
	case kVolatile:
		switch {
		case r < 45:
			return wk.setOp(k, wk.ttl())
		case r < 75:
			return wk.pexpireOp(k)
		case r < 85:
			return wk.setOp(k, 0)
		default:
			return delOp(k)
		}
	case kList:
		if len(k.seq.items) >= smallSeqMax {
			return delOp(k)
		}
		return wk.pushOp(k, 1+wk.rng.IntN(3))
	case kStream:
		if len(k.seq.items) >= smallSeqMax {
			return delOp(k)
		}
		return wk.xaddOp(k)
	case kHash:
		return wk.hsetOp(k)
	case kSet:
		if r < 70 {
			return wk.saddOp(k, distinctFields(wk.rng, "m", setMembers, 2), false)
		}
		return wk.saddOp(k, distinctFields(wk.rng, "m", setMembers, 1), true)
	case kZset:
		if r < 50 {
			return wk.zaddOp(k)
		}
		return wk.zincrOp(k)
	case kCounter:
		return wk.counterOp(k, false)
	}
	return delOp(k)
}

func (wk *worker) setOp(k *key, ttl int64) *op {
	v := k.value(wk.id)
	o := &op{label: "SET", args: []any{"SET", k.name, v}, k: k}
	if ttl > 0 {
		o.label, o.args = "SET PX", append(o.args, "PX", ttl)
	}
	o.acked = func(r any, w window) []finding {
		if s, _ := r.(string); s != "OK" {
			return found(catWrong, "%s replied %v", o.label, r)
		}
		k.str.set(v, ttl, w, true)
		return nil
	}
	o.unknown = func(w window) { k.str.set(v, ttl, w, false) }
	return o
}

func (wk *worker) pexpireOp(k *key) *op {
	ttl := wk.ttl()
	o := &op{label: "PEXPIRE", args: []any{"PEXPIRE", k.name, ttl}, k: k}
	o.acked = func(r any, w window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "PEXPIRE replied %v", r)
		}
		return k.str.pexpire(ttl, n, w, true)
	}
	o.unknown = func(w window) { k.str.pexpire(ttl, -1, w, false) }
	return o
}

func (wk *worker) pushOp(k *key, n int) *op {
	ns := k.seq.take(n)
	args := []any{"RPUSH", k.name}
	for _, x := range ns {
		args = append(args, x)
	}
	o := &op{label: "RPUSH", args: args, k: k}
	o.acked = func(r any, _ window) []finding {
		l, ok := asInt(r)
		if !ok {
			return found(catWrong, "RPUSH replied %v", r)
		}
		return k.seq.push(ns, l, true)
	}
	o.unknown = func(window) { k.seq.push(ns, -1, false) }
	return o
}

func streamID(n int64) string { return "1-" + strconv.FormatInt(n, 10) }

func (wk *worker) xaddOp(k *key) *op {
	ns := k.seq.take(1)
	id := streamID(ns[0])
	o := &op{label: "XADD", args: []any{"XADD", k.name, id, "v", ns[0]}, k: k}
	o.acked = func(r any, _ window) []finding {
		if s, _ := r.(string); s != id {
			return found(catWrong, "XADD %s replied %v", id, r)
		}
		return k.seq.push(ns, -1, true)
	}
	o.unknown = func(window) { k.seq.push(ns, -1, false) }
	// IDs only grow: a refusal means the stream holds an entry never added.
	o.refused = func(msg string) []finding {
		if strings.Contains(msg, "equal or smaller") {
			return found(catWrong, "XADD %s refused: the stream has a later entry (%s)", id, msg)
		}
		return nil
	}
	return o
}

func (wk *worker) hsetOp(k *key) *op {
	fs := distinctFields(wk.rng, "f", hashFields, 3)
	v := k.value(wk.id)
	args := []any{"HSET", k.name}
	for _, f := range fs {
		args = append(args, f, v)
	}
	o := &op{label: "HSET", args: args, k: k}
	o.acked = func(r any, _ window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "HSET replied %v", r)
		}
		fd := k.fld.countChanged(fs, n, false, "HSET")
		for _, f := range fs {
			k.fld.set(f, v, true)
		}
		return fd
	}
	o.unknown = func(window) {
		for _, f := range fs {
			k.fld.set(f, v, false)
		}
	}
	return o
}

// bigHashOp adds bigBatch new fields b<n> = v<n> to a growing hash.
func (wk *worker) bigHashOp(k *key) *op {
	ns := k.seq.take(bigBatch)
	args := []any{"HSET", k.name}
	for _, n := range ns {
		args = append(args, fmt.Sprint("b", n), fmt.Sprint("v", n))
	}
	o := &op{label: "HSET", args: args, k: k}
	o.acked = func(r any, _ window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "HSET replied %v", r)
		}
		fd := k.seq.push(ns, -1, true)
		if n != int64(len(ns)) {
			fd = append(fd, found(catWrong, "HSET of %d new fields created %d", len(ns), n)...)
		}
		return fd
	}
	o.unknown = func(window) { k.seq.push(ns, -1, false) }
	return o
}

func (wk *worker) saddOp(k *key, ms []string, remove bool) *op {
	name, val := "SADD", "1"
	if remove {
		name, val = "SREM", absent
	}
	args := []any{name, k.name}
	for _, m := range ms {
		args = append(args, m)
	}
	o := &op{label: name, args: args, k: k}
	o.acked = func(r any, _ window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "%s replied %v", name, r)
		}
		fd := k.fld.countChanged(ms, n, remove, name)
		for _, m := range ms {
			k.fld.set(m, val, true)
		}
		return fd
	}
	o.unknown = func(window) {
		for _, m := range ms {
			k.fld.set(m, val, false)
		}
	}
	return o
}

func (wk *worker) zaddOp(k *key) *op {
	m := pickField(wk.rng, "z", zsetMembers)
	score := wk.rng.Int64N(201) - 100
	sc := strconv.FormatInt(score, 10)
	o := &op{label: "ZADD", args: []any{"ZADD", k.name, score, m}, k: k}
	o.acked = func(r any, _ window) []finding {
		n, ok := asInt(r)
		if !ok {
			return found(catWrong, "ZADD replied %v", r)
		}
		fd := k.fld.countChanged([]string{m}, n, false, "ZADD")
		k.fld.set(m, sc, true)
		return fd
	}
	o.unknown = func(window) { k.fld.set(m, sc, false) }
	return o
}

func (wk *worker) zincrOp(k *key) *op {
	m := pickField(wk.rng, "z", zsetMembers)
	d := 1 + wk.rng.Int64N(5)
	o := &op{label: "ZINCRBY", args: []any{"ZINCRBY", k.name, d, m}, k: k}
	o.acked = func(r any, _ window) []finding {
		s, ok := r.(string)
		if !ok {
			return found(catWrong, "ZINCRBY replied %v", r)
		}
		return k.fld.incr(m, d, s, true)
	}
	o.unknown = func(window) { k.fld.incr(m, d, "", false) }
	return o
}

// evalScript writes a unit's counter and runs one more write on its primary
// key, in one slot: ARGV[1] is the increment, ARGV[2..] the second command.
const evalScript = `local n = redis.call('INCRBY', KEYS[1], ARGV[1])
local r = redis.call(ARGV[2], KEYS[2], unpack(ARGV, 3))
return {n, r}`

// evalArgs builds EVAL for a counter op (INCRBY) and a primary op.
func evalArgs(ctr, prim *op) []any {
	args := []any{"EVAL", evalScript, 2, ctr.k.name, prim.k.name, ctr.args[2], prim.args[0]}
	return append(args, prim.args[2:]...)
}

func asInt(r any) (int64, bool) {
	switch v := r.(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
