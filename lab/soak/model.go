package soak

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// The model holds, for every key the workload touches, what the cluster may
// hold given the replies the workload received. It does no I/O: the workers
// feed it replies and reads, it answers with findings. An acknowledged write
// narrows what may be there to one state; a write whose outcome is unknown
// (timeout, broken connection) widens it to "before or after"; a read or a
// reply that tells which narrows it again.

// absent stands for "no such key, field or member" among possible values.
const absent = "\x00absent"

// anyValue is a field whose possible values grew past maxAlts: it is not
// checked until a write with a known outcome sets it again.
const anyValue = "\x00any"

// maxAlts bounds the possible values kept per key or field.
const maxAlts = 8

// tol is the slack, in milliseconds, when deciding whether a key has
// expired: Redis keeps expiry times in whole milliseconds.
const tol = 2

// category is the kind of a disagreement between the cluster and the model.
type category uint8

const (
	catLost        category = iota // an acknowledged write is missing
	catWrong                       // a value no acknowledged history explains
	catResurrected                 // a key seen after it must have expired
	numCategories
)

func (c category) String() string {
	return [...]string{"lost", "wrong", "resurrected"}[c]
}

// window is when an operation ran, in Unix milliseconds: it was sent at
// start and answered at end, so the server executed it somewhere between.
type window struct{ start, end int64 }

// finding is one disagreement between the cluster and the model.
type finding struct {
	cat    category
	detail string
}

func found(cat category, format string, args ...any) []finding {
	return []finding{{cat: cat, detail: fmt.Sprintf(format, args...)}}
}

// ---- strings (plain and volatile) ----

// strAlt is one possible state of a string key: its value (or absent) and,
// for a key with a TTL, the window in which it expires (0 for none).
type strAlt struct {
	val        string
	emin, emax int64
	was        string // for an absent key seen gone by expiry: the value that expired
}

// present reports whether the key may still exist at time t (Unix ms).
func (a strAlt) mayLiveAt(t int64) bool {
	return a.val != absent && (a.emax == 0 || t <= a.emax+tol)
}

// mustLiveThrough reports whether the key surely exists until time t.
func (a strAlt) mustLiveThrough(t int64) bool {
	return a.val != absent && (a.emin == 0 || t < a.emin-tol)
}

// strModel is a string key, with or without a TTL.
type strModel struct {
	alts    []strAlt
	unknown bool // too many possibilities: unchecked until a known write
}

func newStrModel() *strModel { return &strModel{alts: []strAlt{{val: absent}}} }

func (m *strModel) add(alts ...strAlt) {
	for _, a := range alts {
		if !slices.Contains(m.alts, a) {
			m.alts = append(m.alts, a)
		}
	}
	if len(m.alts) > maxAlts {
		m.unknown = true
	}
}

// set is SET key val [PX ttl] (ttl 0 for none), or DEL when val is absent.
func (m *strModel) set(val string, ttl int64, w window, sure bool) {
	a := strAlt{val: val}
	if ttl > 0 && val != absent {
		a.emin, a.emax = w.start+ttl, w.end+ttl
	}
	if sure {
		m.alts, m.unknown = []strAlt{a}, false
		return
	}
	m.add(a)
}

// existence says whether the key must or may exist while w runs.
func (m *strModel) existence(w window) (must, may bool) {
	if m.unknown {
		return false, true
	}
	must = true
	for _, a := range m.alts {
		must = must && a.mustLiveThrough(w.end)
		may = may || a.mayLiveAt(w.start)
	}
	return must, may
}

// del is DEL (reply the number removed, or -1 when unknown).
func (m *strModel) del(reply int64, w window, sure bool) []finding {
	var f []finding
	if sure {
		f = m.checkExists(reply, w, "DEL")
	}
	m.set(absent, 0, w, sure)
	return f
}

// checkExists compares a reply that says whether the key existed (1 or 0).
func (m *strModel) checkExists(reply int64, w window, cmd string) []finding {
	must, may := m.existence(w)
	switch {
	case reply == 0 && must:
		return found(catLost, "%s found no key; expected %s", cmd, m.describe())
	case reply == 1 && !may:
		return m.unexpected(w, "", cmd+" found the key")
	}
	return nil
}

// unexpected classifies a key that exists though the model says it cannot;
// got is its value, "" when not known.
func (m *strModel) unexpected(w window, got, what string) []finding {
	for _, a := range m.alts {
		if a.val != absent && a.emax != 0 && w.start > a.emax+tol {
			return found(catResurrected, "%s %d ms after it must have expired (at %d at the latest)", what, w.start-a.emax, a.emax)
		}
		if a.val == absent && a.was != "" && (got == "" || got == a.was) {
			return found(catResurrected, "%s after a read found it expired", what)
		}
	}
	return found(catWrong, "%s; expected %s", what, m.describe())
}

// pexpire is PEXPIRE key ttl; reply 1 if it set the TTL, 0 if there was no key.
func (m *strModel) pexpire(ttl, reply int64, w window, sure bool) []finding {
	var next []strAlt
	for _, a := range m.alts {
		if a.mayLiveAt(w.start) {
			next = append(next, strAlt{val: a.val, emin: w.start + ttl, emax: w.end + ttl})
		}
	}
	if !sure {
		m.add(next...)
		return nil
	}
	f := m.checkExists(reply, w, "PEXPIRE")
	switch {
	case reply == 0:
		m.alts, m.unknown = []strAlt{{val: absent}}, false
	case len(next) == 0 || m.unknown:
		m.unknown = true // it exists, but with no value the model can name
	default:
		m.alts = next
	}
	return f
}

// check compares a GET that returned got (absent for nil) during w.
func (m *strModel) check(got string, w window) []finding {
	if m.unknown {
		return nil
	}
	var keep []strAlt
	for _, a := range m.alts {
		switch {
		case a.val == absent:
			if got == absent {
				keep = append(keep, a)
			}
		case got == absent:
			if a.emax != 0 && w.end >= a.emin-tol {
				keep = append(keep, a) // it may have expired before the read
			}
		case got == a.val && a.mayLiveAt(w.start):
			keep = append(keep, a)
		}
	}
	if len(keep) == 0 {
		if got == absent {
			return found(catLost, "read nothing; expected %s", m.describe())
		}
		return m.unexpected(w, got, fmt.Sprintf("read %q", got))
	}
	if got == absent {
		// Gone, by expiry or never written: an expired key never comes back.
		gone := strAlt{val: absent}
		for _, a := range keep {
			if a.val != absent {
				gone.was = a.val
			}
		}
		keep = []strAlt{gone}
	}
	m.alts = keep
	return nil
}

func (m *strModel) describe() string {
	if m.unknown {
		return "anything"
	}
	var parts []string
	for _, a := range m.alts {
		switch {
		case a.val == absent:
			parts = append(parts, "no key")
		case a.emax != 0:
			parts = append(parts, fmt.Sprintf("%q expiring in [%d,%d]", a.val, a.emin, a.emax))
		default:
			parts = append(parts, strconv.Quote(a.val))
		}
	}
	return joinOr(parts)
}

// ---- counters ----

// counterModel is an INCR counter: its value lies in [lo, hi] (absent is 0).
type counterModel struct{ lo, hi int64 }

// incr is INCRBY key d with its reply (the new value).
func (m *counterModel) incr(d, reply int64, sure bool) []finding {
	if !sure {
		m.hi += d
		return nil
	}
	var f []finding
	switch {
	case reply < m.lo+d:
		f = found(catLost, "INCRBY %d returned %d; acknowledged history says %d..%d", d, reply, m.lo+d, m.hi+d)
	case reply > m.hi+d:
		f = found(catWrong, "INCRBY %d returned %d; acknowledged history says %d..%d", d, reply, m.lo+d, m.hi+d)
	}
	// Follow the server from here: a finding is reported once, not at every step after it.
	m.lo, m.hi = reply, reply
	return f
}

func (m *counterModel) del(reply int64, sure bool) []finding {
	var f []finding
	if sure {
		switch {
		case reply == 0 && m.lo > 0:
			f = found(catLost, "DEL found no counter; expected %d..%d", m.lo, m.hi)
		case reply == 1 && m.hi == 0:
			f = found(catWrong, "DEL found a counter that was never incremented")
		}
		m.hi = 0
	}
	m.lo = 0
	return f
}

// check compares a GET of the counter (nil read as 0).
func (m *counterModel) check(got int64) []finding {
	switch {
	case got < m.lo:
		return found(catLost, "counter is %d; acknowledged increments make it %d..%d", got, m.lo, m.hi)
	case got > m.hi:
		return found(catWrong, "counter is %d; acknowledged increments make it %d..%d", got, m.lo, m.hi)
	}
	m.lo, m.hi = got, got
	return nil
}

// ---- sequences (lists, streams, growing hashes) ----

// item is one pushed element, identified by its sequence number; sure
// unless the push that carried it had an unknown outcome.
type item struct {
	n    int64
	sure bool
}

// seqModel is a collection that only grows by elements numbered in
// increasing order: RPUSH of sequence numbers, XADD with IDs 1-<n>, HSET of
// fields b<n>. The actual collection must hold every sure element, no
// element that was never pushed, in order.
type seqModel struct {
	items []item
	nsure int
	next  int64 // the next sequence number to push
}

// take reserves k sequence numbers for a push.
func (m *seqModel) take(k int) []int64 {
	ns := make([]int64, k)
	for i := range ns {
		m.next++
		ns[i] = m.next
	}
	return ns
}

// push records a push of ns; length is the reply (the new size) or -1.
func (m *seqModel) push(ns []int64, length int64, sure bool) []finding {
	for _, n := range ns {
		m.items = append(m.items, item{n: n, sure: sure})
	}
	if !sure {
		return nil
	}
	m.nsure += len(ns)
	if length < 0 {
		return nil
	}
	return m.checkLen(length, "push")
}

// checkLen compares a size reply and, when it settles which uncertain
// elements exist, updates the model.
func (m *seqModel) checkLen(length int64, what string) []finding {
	lo, hi := int64(m.nsure), int64(len(m.items))
	switch {
	case length < lo:
		return found(catLost, "%s: size %d, but %d acknowledged elements (up to %d pushed)", what, length, lo, hi)
	case length > hi:
		return found(catWrong, "%s: size %d, but only %d elements were ever pushed (%d acknowledged)", what, length, hi, lo)
	case length == hi:
		for i := range m.items {
			m.items[i].sure = true
		}
		m.nsure = len(m.items)
	case length == lo:
		m.items = slices.DeleteFunc(m.items, func(it item) bool { return !it.sure })
	}
	return nil
}

func (m *seqModel) del(reply int64, sure bool) []finding {
	var f []finding
	if sure {
		switch {
		case reply == 0 && m.nsure > 0:
			f = found(catLost, "DEL found nothing; %d acknowledged elements expected", m.nsure)
		case reply == 1 && len(m.items) == 0:
			f = found(catWrong, "DEL found a key that holds nothing pushed")
		}
		m.items, m.nsure = nil, 0
		return f
	}
	for i := range m.items {
		m.items[i].sure = false
	}
	m.nsure = 0
	return nil
}

// checkAll compares the whole collection's elements, in order.
func (m *seqModel) checkAll(got []int64) []finding {
	f := m.match(got, 0)
	if f == nil {
		m.items = m.items[:0]
		for _, n := range got {
			m.items = append(m.items, item{n: n, sure: true})
		}
		m.nsure = len(m.items)
	}
	return f
}

// checkTail compares the last elements and the size of a big collection.
func (m *seqModel) checkTail(got []int64, length int64) []finding {
	if f := m.checkLen(length, "size"); f != nil {
		return f
	}
	if len(got) == 0 {
		if m.nsure > 0 {
			return found(catLost, "tail is empty; %d acknowledged elements expected", m.nsure)
		}
		return nil
	}
	from := sort.Search(len(m.items), func(i int) bool { return m.items[i].n >= got[0] })
	if from == len(m.items) || m.items[from].n != got[0] {
		return found(catWrong, "tail starts with %d, which was never pushed", got[0])
	}
	return m.match(got, from)
}

// match walks got against the items from index from: got must be a
// subsequence that skips no sure item.
func (m *seqModel) match(got []int64, from int) []finding {
	i := from
	for j, g := range got {
		for i < len(m.items) && m.items[i].n < g {
			if m.items[i].sure {
				return found(catLost, "element %d missing (acknowledged; found %d next, at %d)", m.items[i].n, g, j)
			}
			i++
		}
		if i == len(m.items) || m.items[i].n != g {
			return found(catWrong, "element %d at %d was never pushed there (out of order or unknown)", g, j)
		}
		i++
	}
	for ; i < len(m.items); i++ {
		if m.items[i].sure {
			return found(catLost, "element %d missing (acknowledged; the collection ends after %d elements)", m.items[i].n, len(got))
		}
	}
	return nil
}

// sample returns up to k sequence numbers of sure items, for point reads.
func (m *seqModel) sample(pick func(int) int, k int) []int64 {
	if len(m.items) == 0 {
		return nil
	}
	out := make([]int64, 0, k)
	for range k {
		out = append(out, m.items[pick(len(m.items))].n)
	}
	return out
}

// has reports whether n is a sure item, may be one, or was never pushed.
func (m *seqModel) has(n int64) (sure, maybe bool) {
	i := sort.Search(len(m.items), func(i int) bool { return m.items[i].n >= n })
	if i == len(m.items) || m.items[i].n != n {
		return false, false
	}
	return m.items[i].sure, true
}

// ---- fields (hashes, sets, sorted sets) ----

// fieldModel is a hash, a set (members with value "1") or a sorted set
// (members with their integer scores): for each field, its possible values.
type fieldModel struct {
	fields map[string][]string
}

func newFieldModel() *fieldModel { return &fieldModel{fields: map[string][]string{}} }

func (m *fieldModel) alts(f string) []string {
	if a, ok := m.fields[f]; ok {
		return a
	}
	return []string{absent}
}

// set records field = val (absent to remove it).
func (m *fieldModel) set(f, val string, sure bool) {
	if sure {
		m.fields[f] = []string{val}
		return
	}
	a := m.alts(f)
	if slices.Contains(a, anyValue) || slices.Contains(a, val) {
		return
	}
	a = append(slices.Clone(a), val)
	if len(a) > maxAlts {
		a = []string{anyValue}
	}
	m.fields[f] = a
}

// countChanged compares a reply that counts fields newly created (HSET, SADD,
// ZADD) or removed (SREM) among fs, before the model is updated.
func (m *fieldModel) countChanged(fs []string, reply int64, removing bool, cmd string) []finding {
	var lo, hi int64
	for _, f := range fs {
		a := m.alts(f)
		if slices.Contains(a, anyValue) {
			hi++
			continue
		}
		maybeAbsent := slices.Contains(a, absent)
		surelyAbsent := maybeAbsent && len(a) == 1
		// Creation counts fields that were absent, removal those that existed.
		must, may := surelyAbsent, maybeAbsent
		if removing {
			must, may = !maybeAbsent, !surelyAbsent
		}
		if must {
			lo++
		}
		if may {
			hi++
		}
	}
	switch {
	case reply < lo:
		if removing {
			return found(catLost, "%s removed %d of %v; %d were acknowledged present", cmd, reply, fs, lo)
		}
		return found(catWrong, "%s created %d of %v; %d must have been new", cmd, reply, fs, lo)
	case reply > hi:
		if removing {
			return found(catWrong, "%s removed %d of %v; at most %d could exist", cmd, reply, fs, hi)
		}
		return found(catLost, "%s created %d of %v; at most %d could be missing", cmd, reply, fs, hi)
	}
	return nil
}

// incr is ZINCRBY: every possible score moves by d; reply is the new score.
func (m *fieldModel) incr(f string, d int64, reply string, sure bool) []finding {
	cur := m.alts(f)
	var next []string // nil when the score was not tracked
	if !slices.Contains(cur, anyValue) {
		for _, a := range cur {
			var v int64
			if a != absent {
				v, _ = strconv.ParseInt(a, 10, 64)
			}
			next = append(next, strconv.FormatInt(v+d, 10))
		}
	}
	if !sure {
		for _, v := range next {
			m.set(f, v, false)
		}
		return nil
	}
	var fd []finding
	if next != nil && !slices.Contains(next, reply) {
		fd = found(catWrong, "ZINCRBY %s %d returned %s; acknowledged history allows %s", f, d, reply, joinOr(next))
	}
	m.fields[f] = []string{reply}
	return fd
}

func (m *fieldModel) existence() (must, may bool) {
	for _, a := range m.fields {
		if slices.Contains(a, anyValue) {
			may = true
			continue
		}
		if !slices.Contains(a, absent) {
			must = true
		}
		if len(a) > 1 || a[0] != absent {
			may = true
		}
	}
	return must, may
}

func (m *fieldModel) del(reply int64, sure bool) []finding {
	var f []finding
	if sure {
		must, may := m.existence()
		switch {
		case reply == 0 && must:
			f = found(catLost, "DEL found nothing; acknowledged fields expected")
		case reply == 1 && !may:
			f = found(catWrong, "DEL found a key with no acknowledged field")
		}
		clear(m.fields)
		return f
	}
	for k := range m.fields {
		m.set(k, absent, false)
	}
	return nil
}

// check compares field values read from the cluster. With all set, got is
// the whole collection and fields missing from the model must be absent;
// otherwise only the fields named in got are checked.
func (m *fieldModel) check(got map[string]string, all bool) []finding {
	var out []finding
	keys := make([]string, 0, len(got))
	for f := range got {
		keys = append(keys, f)
	}
	if all {
		for f := range m.fields {
			if _, ok := got[f]; !ok {
				keys = append(keys, f)
			}
		}
	}
	sort.Strings(keys)
	for _, f := range keys {
		v, ok := got[f]
		if !ok {
			v = absent
		}
		a := m.alts(f)
		switch {
		case slices.Contains(a, anyValue) || slices.Contains(a, v):
			continue
		case v == absent:
			out = append(out, found(catLost, "field %s missing; expected %s", f, describeVals(a))...)
		default:
			out = append(out, found(catWrong, "field %s = %q; expected %s", f, v, describeVals(a))...)
		}
		if len(out) > 0 {
			return out // the first difference says enough
		}
	}
	for _, f := range keys {
		v, ok := got[f]
		if !ok {
			v = absent
		}
		if _, known := m.fields[f]; known || v != absent {
			m.fields[f] = []string{v}
		}
	}
	return nil
}

// checkLen compares a field count (HLEN) with the model.
func (m *fieldModel) checkLen(n int64) []finding {
	var lo, hi int64
	for _, a := range m.fields {
		if slices.Contains(a, anyValue) {
			hi++
			continue
		}
		if !slices.Contains(a, absent) {
			lo++
		}
		if len(a) > 1 || a[0] != absent {
			hi++
		}
	}
	switch {
	case n < lo:
		return found(catLost, "%d fields, but %d acknowledged", n, lo)
	case n > hi:
		return found(catWrong, "%d fields, but at most %d could exist", n, hi)
	}
	return nil
}

func describeVals(a []string) string {
	parts := make([]string, len(a))
	for i, v := range a {
		if v == absent {
			parts[i] = "missing"
		} else {
			parts[i] = strconv.Quote(v)
		}
	}
	return joinOr(parts)
}

func joinOr(parts []string) string {
	switch len(parts) {
	case 0:
		return "nothing"
	case 1:
		return parts[0]
	}
	s := parts[0]
	for _, p := range parts[1:] {
		s += " or " + p
	}
	return s
}
