package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/slots"
)

// worker runs the workload on the units it owns, one command at a time, so
// its models are exact without locks; then it verifies them. Everything in
// it belongs to its goroutine until Run has waited for it.
type worker struct {
	id    int
	cfg   *Config
	cc    *redis.ClusterClient
	rng   *rand.Rand
	units []*unit
	big   []*unit
	// bySlot finds this worker's units in a slot, and moving the slots of
	// the moves in flight: a share of the operations goes there.
	bySlot map[uint16][]*unit
	moving func() []uint16
	t0     time.Time // the soak's start: latency samples are offsets from it

	ops       map[string]int64
	errs      map[string]int64
	errsBy    map[string]int64 // "<command> <error kind>"
	logged    int
	uncertain int64
	samples   []uint64 // start offset µs << 32 | latency µs; a uniform sample past maxSamples
	timed     int64    // operations timed, sampled or not
	over50ms  int64
	maxLat    time.Duration
	find      findings
	verified  int // keys checked by the final pass
	unchecked []string
	// Outside the load, operations are counted apart and not timed.
	quiet    bool
	quietOps int64
	cur      *key // the key being read, for its history
}

// findings counts disagreements: distinct keys per category, events, and
// the first few examples.
type findings struct {
	keys     [numCategories]int
	events   [numCategories]int
	examples [numCategories][]string
}

const maxExamples = 10

// maxSamples bounds the latency samples kept over all workers (8 bytes each).
const maxSamples = 4_000_000

func (f *findings) add(k *key, fs []finding) {
	for _, x := range fs {
		f.events[x.cat]++
		if k.flagged[x.cat] {
			continue
		}
		k.flagged[x.cat] = true
		f.keys[x.cat]++
		if len(f.examples[x.cat]) < maxExamples {
			f.examples[x.cat] = append(f.examples[x.cat], fmt.Sprintf("%s (%s): %s; recent operations: %s", k.name, k.kind, x.detail, k.history()))
		}
	}
}

func (f *findings) merge(o *findings) {
	for c := range numCategories {
		f.keys[c] += o.keys[c]
		f.events[c] += o.events[c]
		for _, e := range o.examples[c] {
			if len(f.examples[c]) < maxExamples {
				f.examples[c] = append(f.examples[c], e)
			}
		}
	}
}

func newWorker(id int, cfg *Config, cc *redis.ClusterClient, units []*unit, t0 time.Time) *worker {
	wk := &worker{
		id: id, cfg: cfg, cc: cc, t0: t0,
		rng:    rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(id))),
		ops:    map[string]int64{},
		errs:   map[string]int64{},
		errsBy: map[string]int64{},
	}
	wk.bySlot = map[uint16][]*unit{}
	for u := id; u < len(units); u += cfg.Workers {
		wk.units = append(wk.units, units[u])
		x := slots.ForString(units[u].prim.name)
		wk.bySlot[x] = append(wk.bySlot[x], units[u])
		if units[u].prim.kind == kBigList || units[u].prim.kind == kBigHash {
			wk.big = append(wk.big, units[u])
		}
	}
	return wk
}

// load runs operations until stop is closed, ctx ends or maxOps ran, at
// about rate operations a second (0 for as fast as it goes).
func (wk *worker) load(ctx context.Context, stop <-chan struct{}, rate float64, maxOps int64, deadline time.Time) {
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	next := time.Now()
	for n := int64(0); n < maxOps && len(wk.units) > 0; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		now := time.Now()
		if now.After(deadline) {
			return
		}
		if interval > 0 {
			if wait := next.Sub(now); wait > 0 {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			} else if -wait > time.Second {
				next = now // after a long stall, no burst to make up for it
			}
			next = next.Add(interval)
		}
		wk.step(ctx)
	}
}

// fill writes every key once before the load starts, so that moves copy
// data from the first one on. At most two writes per key.
func (wk *worker) fill(ctx context.Context) {
	wk.quiet = true
	defer func() { wk.quiet = false }()
	for _, u := range wk.units {
		if ctx.Err() != nil {
			return
		}
		o := wk.writeOp(u.prim)
		for try := 0; try < 10 && (o.label == "DEL" || o.label == "PEXPIRE"); try++ {
			o = wk.writeOp(u.prim) // a write that creates the key
		}
		wk.run(ctx, o)
		wk.run(ctx, wk.counterOp(u.ctr, false))
	}
}

// step runs one operation on a random unit: mostly reads; writes alone, in
// MULTI/EXEC or in EVAL; big keys get a share of their own and more writes.
func (wk *worker) step(ctx context.Context) {
	u := wk.units[wk.rng.IntN(len(wk.units))]
	writeOdds := 1.0 / float64(wk.cfg.ReadRatio+1)
	switch {
	case len(wk.big) > 0 && wk.rng.IntN(10) == 0:
		u, writeOdds = wk.big[wk.rng.IntN(len(wk.big))], 0.5
	case wk.cfg.HotShare > 0 && wk.rng.Float64() < wk.cfg.HotShare:
		// Keys that are moving right now are where a mover loses writes.
		if hot := wk.hotUnit(); hot != nil {
			u, writeOdds = hot, 0.5
		}
	}
	if wk.rng.Float64() >= writeOdds {
		if wk.rng.IntN(10) < 7 {
			wk.read(ctx, u.prim, false)
		} else {
			wk.read(ctx, u.ctr, false)
		}
		return
	}
	switch r := wk.rng.IntN(100); {
	case r < 10:
		wk.multi(ctx, wk.counterOp(u.ctr, true), wk.writeOp(u.prim))
	case r < 15:
		wk.eval(ctx, wk.counterOp(u.ctr, true), wk.writeOp(u.prim))
	case r < 40:
		if wk.rng.IntN(50) == 0 {
			wk.run(ctx, delOp(u.ctr))
		} else {
			wk.run(ctx, wk.counterOp(u.ctr, false))
		}
	default:
		wk.run(ctx, wk.writeOp(u.prim))
	}
}

// hotUnit returns one of the worker's units in a slot being moved, or nil.
func (wk *worker) hotUnit() *unit {
	if wk.moving == nil {
		return nil
	}
	xs := wk.moving()
	for try := 0; try < 4 && len(xs) > 0; try++ {
		if us := wk.bySlot[xs[wk.rng.IntN(len(xs))]]; len(us) > 0 {
			return us[wk.rng.IntN(len(us))]
		}
	}
	return nil
}

func windowOf(t0, t1 time.Time) window {
	return window{start: t0.UnixMilli(), end: (t1.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)}
}

func (wk *worker) record(label string, t0, t1 time.Time) {
	if wk.quiet {
		wk.quietOps++
		return
	}
	wk.ops[label]++
	start := t0.Sub(wk.t0).Microseconds()
	lat := t1.Sub(t0).Microseconds()
	x := uint64(start)<<32 | uint64(min(lat, 1<<32-1))
	wk.timed++
	wk.maxLat = max(wk.maxLat, t1.Sub(t0))
	if t1.Sub(t0) > 50*time.Millisecond {
		wk.over50ms++
	}
	// Memory stays bounded on long or unthrottled runs: past the cap, keep a
	// uniform sample (reservoir), which the percentiles read the same way.
	limit := maxSamples / int64(wk.cfg.Workers)
	switch {
	case int64(len(wk.samples)) < limit:
		wk.samples = append(wk.samples, x)
	default:
		if i := wk.rng.Int64N(wk.timed); i < limit {
			wk.samples[i] = x
		}
	}
}

// failed counts an error by kind, and by command and kind; the first few
// are logged, to line them up with the moves' logs.
func (wk *worker) failed(k *key, label string, err error) {
	kind := errKind(err)
	wk.errs[kind]++
	wk.errsBy[label+" "+kind]++
	if wk.logged < maxLoggedErrors && !wk.quiet && k != nil {
		wk.logged++
		wk.cfg.Logger.Warn("soak: operation failed", "worker", wk.id, "command", label, "key", k.name, "error", err)
	}
}

// maxLoggedErrors is how many failed operations each worker logs.
const maxLoggedErrors = 3

// outcome applies a command's result to the model.
func (wk *worker) outcome(o *op, reply any, err error, w window) {
	switch {
	case err == nil || err == redis.Nil:
		wk.find.add(o.k, o.acked(reply, w))
	case serverError(err) != "":
		// The server answered with an error: the write did not run.
		wk.failed(o.k, o.label, err)
		msg := serverError(err)
		if strings.HasPrefix(msg, "WRONGTYPE") {
			wk.find.add(o.k, found(catWrong, "%s: %s", o.label, msg))
		} else if o.refused != nil {
			wk.find.add(o.k, o.refused(msg))
		}
	default:
		wk.failed(o.k, o.label, err)
		wk.uncertain++
		o.unknown(w)
	}
}

// run sends one write.
func (wk *worker) run(ctx context.Context, o *op) {
	t0 := time.Now()
	reply, err := wk.cc.Do(ctx, o.args...).Result()
	t1 := time.Now()
	wk.record(o.label, t0, t1)
	o.k.remember(histEntry{at: t0, took: t1.Sub(t0), what: describeArgs(o.args), result: describeReply(reply, err)})
	wk.outcome(o, reply, err, windowOf(t0, t1))
}

// multi sends both writes in one MULTI/EXEC (one slot: same hash tag).
func (wk *worker) multi(ctx context.Context, a, b *op) {
	t0 := time.Now()
	pipe := wk.cc.TxPipeline()
	ca := pipe.Do(ctx, a.args...)
	cb := pipe.Do(ctx, b.args...)
	_, err := pipe.Exec(ctx)
	t1 := time.Now()
	wk.record("MULTI", t0, t1)
	w := windowOf(t0, t1)
	for _, x := range []struct {
		o *op
		c *redis.Cmd
	}{{a, ca}, {b, cb}} {
		x.o.k.remember(histEntry{at: t0, took: t1.Sub(t0), what: "MULTI " + describeArgs(x.o.args), result: describeReply(x.c.Val(), x.c.Err())})
	}
	if err != nil && serverError(err) == "" {
		// The transaction may or may not have run, as a whole.
		wk.failed(b.k, "MULTI", err)
		wk.uncertain++
		a.unknown(w)
		b.unknown(w)
		return
	}
	wk.outcome(a, ca.Val(), ca.Err(), w)
	wk.outcome(b, cb.Val(), cb.Err(), w)
}

// eval runs both writes in the EVAL script.
func (wk *worker) eval(ctx context.Context, a, b *op) {
	t0 := time.Now()
	reply, err := wk.cc.Do(ctx, evalArgs(a, b)...).Result()
	t1 := time.Now()
	wk.record("EVAL", t0, t1)
	w := windowOf(t0, t1)
	for _, o := range []*op{a, b} {
		o.k.remember(histEntry{at: t0, took: t1.Sub(t0), what: "EVAL " + describeArgs(o.args), result: describeReply(reply, err)})
	}
	if msg := serverError(err); err != nil && err != redis.Nil && msg != "" {
		wk.failed(b.k, "EVAL", err)
		switch {
		case strings.Contains(msg, "WRONGTYPE"):
			// The script failed in its second call: the first one ran.
			wk.find.add(b.k, found(catWrong, "EVAL %s: %s", b.label, msg))
			wk.uncertain++
			a.unknown(w)
		case strings.Contains(msg, "script"):
			wk.uncertain++
			a.unknown(w)
			b.unknown(w)
		}
		return
	}
	if err != nil && err != redis.Nil {
		wk.failed(b.k, "EVAL", err)
		wk.uncertain++
		a.unknown(w)
		b.unknown(w)
		return
	}
	rs, ok := reply.([]any)
	if !ok || len(rs) != 2 {
		wk.find.add(b.k, found(catWrong, "EVAL replied %v", reply))
		return
	}
	wk.find.add(a.k, a.acked(rs[0], w))
	wk.find.add(b.k, b.acked(rs[1], w))
}

// do sends one read and records it; a read error changes nothing.
func (wk *worker) do(ctx context.Context, label string, args ...any) (any, window, bool) {
	t0 := time.Now()
	reply, err := wk.cc.Do(ctx, args...).Result()
	t1 := time.Now()
	wk.record(label, t0, t1)
	if wk.cur != nil {
		wk.cur.remember(histEntry{at: t0, took: t1.Sub(t0), what: describeArgs(args), result: describeReply(reply, err)})
	}
	if err != nil && err != redis.Nil {
		wk.failed(wk.cur, label, err)
		return nil, window{}, false
	}
	return reply, windowOf(t0, t1), true
}

// read checks a key against the model; full reads whole big keys (the
// final pass). It reports whether the reads got answers.
func (wk *worker) read(ctx context.Context, k *key, full bool) bool {
	wk.cur = k
	defer func() { wk.cur = nil }()
	switch k.kind {
	case kString, kVolatile:
		r, w, ok := wk.do(ctx, "GET", "GET", k.name)
		if !ok {
			return false
		}
		got := absent
		if s, isStr := r.(string); isStr {
			got = s
		}
		wk.find.add(k, k.str.check(got, w))
	case kCounter:
		r, _, ok := wk.do(ctx, "GET", "GET", k.name)
		if !ok {
			return false
		}
		var n int64
		if r != nil {
			var isInt bool
			if n, isInt = asInt(r); !isInt {
				wk.find.add(k, found(catWrong, "counter holds %v", r))
				return true
			}
		}
		wk.find.add(k, k.ctr.check(n))
	case kList, kBigList:
		return wk.readList(ctx, k, full)
	case kStream:
		return wk.readStream(ctx, k)
	case kBigHash:
		return wk.readBigHash(ctx, k, full)
	case kHash:
		r, _, ok := wk.do(ctx, "HGETALL", "HGETALL", k.name)
		if !ok {
			return false
		}
		wk.checkPairs(k, r)
	case kSet:
		r, _, ok := wk.do(ctx, "SMEMBERS", "SMEMBERS", k.name)
		if !ok {
			return false
		}
		got := map[string]string{}
		for _, m := range asStrings(r) {
			got[m] = "1"
		}
		wk.find.add(k, k.fld.check(got, true))
	case kZset:
		r, _, ok := wk.do(ctx, "ZRANGE", "ZRANGE", k.name, 0, -1, "WITHSCORES")
		if !ok {
			return false
		}
		wk.checkPairs(k, r)
	}
	return true
}

// checkPairs checks a flat field/value reply against a field model.
func (wk *worker) checkPairs(k *key, r any) {
	flat := asStrings(r)
	got := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		got[flat[i]] = flat[i+1]
	}
	wk.find.add(k, k.fld.check(got, true))
}

func (wk *worker) readList(ctx context.Context, k *key, full bool) bool {
	if full || len(k.seq.items) <= fullReadLimit {
		r, _, ok := wk.do(ctx, "LRANGE", "LRANGE", k.name, 0, -1)
		if !ok {
			return false
		}
		got, bad := asSeq(asStrings(r), "")
		if bad != "" {
			wk.find.add(k, found(catWrong, "list holds %q", bad))
			return true
		}
		wk.find.add(k, k.seq.checkAll(got))
		return true
	}
	r, _, ok := wk.do(ctx, "LLEN", "LLEN", k.name)
	if !ok {
		return false
	}
	n, _ := asInt(r)
	r, _, ok = wk.do(ctx, "LRANGE", "LRANGE", k.name, -50, -1)
	if !ok {
		return false
	}
	got, bad := asSeq(asStrings(r), "")
	if bad != "" {
		wk.find.add(k, found(catWrong, "list holds %q", bad))
		return true
	}
	wk.find.add(k, k.seq.checkTail(got, n))
	return true
}

func (wk *worker) readStream(ctx context.Context, k *key) bool {
	r, _, ok := wk.do(ctx, "XRANGE", "XRANGE", k.name, "-", "+")
	if !ok {
		return false
	}
	entries, _ := r.([]any)
	got := make([]int64, 0, len(entries))
	for _, e := range entries {
		parts, _ := e.([]any)
		if len(parts) != 2 {
			wk.find.add(k, found(catWrong, "stream entry %v", e))
			return true
		}
		id, _ := parts[0].(string)
		n, err := strconv.ParseInt(strings.TrimPrefix(id, "1-"), 10, 64)
		fields := asStrings(parts[1])
		if err != nil || !strings.HasPrefix(id, "1-") || len(fields) != 2 || fields[0] != "v" || fields[1] != strconv.FormatInt(n, 10) {
			wk.find.add(k, found(catWrong, "stream entry %s %v was never added", id, fields))
			return true
		}
		got = append(got, n)
	}
	wk.find.add(k, k.seq.checkAll(got))
	return true
}

func (wk *worker) readBigHash(ctx context.Context, k *key, full bool) bool {
	if full {
		r, _, ok := wk.do(ctx, "HGETALL", "HGETALL", k.name)
		if !ok {
			return false
		}
		flat := asStrings(r)
		var got []int64
		for i := 0; i+1 < len(flat); i += 2 {
			n, err := strconv.ParseInt(strings.TrimPrefix(flat[i], "b"), 10, 64)
			if err != nil || flat[i+1] != fmt.Sprint("v", n) {
				wk.find.add(k, found(catWrong, "field %s = %q was never written", flat[i], flat[i+1]))
				return true
			}
			got = append(got, n)
		}
		slices.Sort(got) // a hash has no order: compare the set
		wk.find.add(k, k.seq.checkAll(got))
		return true
	}
	r, _, ok := wk.do(ctx, "HLEN", "HLEN", k.name)
	if !ok {
		return false
	}
	n, _ := asInt(r)
	if fd := k.seq.checkLen(n, "HLEN"); fd != nil {
		wk.find.add(k, fd)
		return true
	}
	ns := k.seq.sample(wk.rng.IntN, 5)
	if len(ns) == 0 {
		return true
	}
	args := []any{"HMGET", k.name}
	for _, x := range ns {
		args = append(args, fmt.Sprint("b", x))
	}
	r, _, ok = wk.do(ctx, "HMGET", args...)
	if !ok {
		return false
	}
	vals, _ := r.([]any)
	for i, x := range ns {
		sure, _ := k.seq.has(x)
		var v any
		if i < len(vals) {
			v = vals[i]
		}
		switch {
		case v == nil && sure:
			wk.find.add(k, found(catLost, "field b%d missing (acknowledged)", x))
		case v != nil && v != fmt.Sprint("v", x):
			wk.find.add(k, found(catWrong, "field b%d = %v", x, v))
		}
	}
	return true
}

// verify is the final pass: every key of every unit, whole, with retries
// for transport errors.
func (wk *worker) verify(ctx context.Context) {
	wk.quiet = true
	for _, u := range wk.units {
		for _, k := range []*key{u.prim, u.ctr} {
			ok := false
			for attempt := 0; attempt < 5 && !ok && ctx.Err() == nil; attempt++ {
				if attempt > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
				ok = wk.read(ctx, k, true)
			}
			if ok {
				wk.verified++
			} else {
				wk.unchecked = append(wk.unchecked, k.name)
			}
		}
	}
}

// describeArgs shortens a command for a key's history.
func describeArgs(args []any) string {
	var b strings.Builder
	for i, a := range args {
		if i == 1 {
			continue // the key: the history is the key's own
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, a)
		if b.Len() > 60 {
			return b.String()[:60] + "…"
		}
	}
	return b.String()
}

func describeReply(r any, err error) string {
	switch {
	case err == redis.Nil:
		return "nil"
	case err != nil:
		return "error " + err.Error()
	}
	s := fmt.Sprint(r)
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

func asStrings(r any) []string {
	xs, _ := r.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// asSeq parses sequence numbers; bad is the first element that is not one.
func asSeq(xs []string, prefix string) ([]int64, string) {
	out := make([]int64, 0, len(xs))
	for _, x := range xs {
		n, err := strconv.ParseInt(strings.TrimPrefix(x, prefix), 10, 64)
		if err != nil {
			return nil, x
		}
		out = append(out, n)
	}
	return out, ""
}

// latencies extracts sorted latencies (µs) of samples for which keep says yes.
func latencies(samples []uint64, keep func(start, lat int64) bool) []int64 {
	var out []int64
	for _, s := range samples {
		start, lat := int64(s>>32), int64(s&(1<<32-1))
		if keep == nil || keep(start, lat) {
			out = append(out, lat)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
