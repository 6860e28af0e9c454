package soak

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a soak.
type Report struct {
	Cluster      string  `json:"cluster"`
	Seed         int64   `json:"seed"`
	Run          string  `json:"run"` // the run ID in key names
	Workers      int     `json:"workers"`
	Keys         int     `json:"keys"`
	LoadSeconds  float64 `json:"load_seconds"`
	TotalSeconds float64 `json:"total_seconds"`

	Unloaded  int64            `json:"unloaded_ops"` // writing every key first, and the final pass
	OpsTotal  int64            `json:"ops_total"`
	OpsPerSec float64          `json:"ops_per_sec"`
	Ops       map[string]int64 `json:"ops"`           // by command
	Uncertain int64            `json:"uncertain_ops"` // writes whose outcome was unknown
	// Errors are the workload's failed commands by kind: the server's error
	// code, or the transport fault.
	Errors map[string]int64 `json:"errors"`
	// ErrorsByCommand splits them by command: "GET MOVED".
	ErrorsByCommand map[string]int64 `json:"errors_by_command"`
	// ClientRedirects are error replies seen by the node clients inside the
	// cluster client, including those go-redis followed by itself.
	ClientRedirects map[string]int64 `json:"client_redirects"`
	// ServerErrors are INFO errorstats, end minus start, summed over the
	// nodes known at the start and at the end (all clients, not only the
	// workload).
	ServerErrors map[string]int64 `json:"server_errors"`

	// BigKeys are the elements of each big key at the end, by key.
	BigKeys map[string]int `json:"big_keys"`

	Latency LatencyReport `json:"latency"`
	Moves   MovesReport   `json:"moves"`
	Verdict Verdict       `json:"verdict"`

	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"` // why it did not pass
}

// Latency sums up operation latencies, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// LatencyReport splits latencies by when operations ran: overall, while a
// move was in flight, and overlapping a write pause of a cutover.
type LatencyReport struct {
	Overall      Latency `json:"overall"`
	DuringMoves  Latency `json:"during_moves"`
	DuringPauses Latency `json:"during_pauses"`
	Over50ms     int64   `json:"ops_over_50ms"`
	// Sampled says the percentiles come from a uniform sample of the
	// operations (long or unthrottled runs); counts and max are exact.
	Sampled bool `json:"sampled"`
}

// MovesReport counts moves by outcome.
type MovesReport struct {
	Started    int         `json:"started"`
	Moved      int         `json:"moved"`
	Refused    int         `json:"refused"`
	RolledBack int         `json:"rolled_back"`
	Failed     int         `json:"failed"`
	Pause      Latency     `json:"pause"` // the Summary.PauseMS of moved moves
	SlowPauses int         `json:"pauses_over_50ms"`
	List       []MoveEntry `json:"list"`
	// CrashArmed moves had the crash fault set (--crash-every); Crashed of
	// them stopped with it right after the release; Repaired of those were
	// given back to their source by fix (they count as rolled back), or
	// Forward of them finished by it (Valkey 8; they count as moved), with
	// RepairedSlots slots in all. CrashMissed armed moves moved all the
	// same: the fault did nothing, and the soak fails.
	CrashArmed    int `json:"crash_armed"`
	Crashed       int `json:"crashed"`
	Repaired      int `json:"repaired"`
	Forward       int `json:"forward"`
	RepairedSlots int `json:"repaired_slots"`
	CrashMissed   int `json:"crash_missed"`
	// SameSource counts the moved moves that ran while another move from
	// the same source was in flight: their cutovers share one write pause.
	SameSource int `json:"same_source_overlaps"`
}

// MoveEntry is one move.
type MoveEntry struct {
	Seq       int     `json:"seq"`
	Source    string  `json:"source"`
	Target    string  `json:"target"`
	Slots     string  `json:"slots"`
	SlotCount int     `json:"slot_count"`
	Class     string  `json:"class"`
	Result    string  `json:"result"`
	Snapshot  string  `json:"snapshot"` // the snapshot path it took
	StartS    float64 `json:"start_s"`  // seconds after the soak started
	StartAt   string  `json:"start_at"`
	// PausesAt are the cutover attempts' write pauses: when each began, and
	// how long; AttemptPausesMS their lengths.
	PausesAt        []string  `json:"pauses_at,omitempty"`
	AttemptPausesMS []float64 `json:"attempt_pauses_ms,omitempty"`
	TotalMS         int64     `json:"total_ms"`
	PauseMS         float64   `json:"pause_ms"`
	Attempts        int       `json:"cutover_attempts"`
	KeysCopied      int64     `json:"keys_copied"`
	BigKeys         int64     `json:"big_keys"`
	DeltaCommands   int64     `json:"delta_commands"`
	Error           string    `json:"error,omitempty"`
	// The crash record (see Outcome): armed to crash; crashed after the
	// release with CrashError; Repaired by fix, with Repairs, giving
	// RepairedSlots back to the source (Forward: to the target), whose
	// ownership the own views of the masters OwnerProvenOn showed afterwards.
	CrashArmed    bool     `json:"crash_armed,omitempty"`
	Crashed       bool     `json:"crashed,omitempty"`
	CrashError    string   `json:"crash_error,omitempty"`
	Repaired      bool     `json:"repaired,omitempty"`
	Forward       bool     `json:"forward,omitempty"`
	Repairs       []string `json:"repairs,omitempty"`
	RepairedSlots int      `json:"repaired_slots,omitempty"`
	OwnerProvenOn []string `json:"owner_proven_on,omitempty"`
}

// Verdict is what the checker found: keys with lost writes, wrong values,
// and keys that came back after they expired. Each must be 0.
type Verdict struct {
	LostWrites  int                 `json:"lost_writes"`
	WrongReads  int                 `json:"wrong_reads"`
	Resurrected int                 `json:"resurrected"`
	Events      map[string]int      `json:"events"` // findings, counting repeats on one key
	Examples    map[string][]string `json:"examples,omitempty"`
	KeysChecked int                 `json:"keys_checked"` // by the final pass
	Unchecked   int                 `json:"keys_unchecked"`
	UncheckedEx []string            `json:"unchecked_examples,omitempty"`
}

func (s *soak) report(workers []*worker, rd *redirects, before, after map[string]map[string]int64, loadEnd, verifyEnd time.Time, runID string) *Report {
	r := &Report{
		Cluster: s.cfg.Addr, Seed: s.cfg.Seed, Run: runID, Workers: len(workers),
		LoadSeconds:     loadEnd.Sub(s.t0).Seconds(),
		TotalSeconds:    verifyEnd.Sub(s.t0).Seconds(),
		Ops:             map[string]int64{},
		Errors:          map[string]int64{},
		ErrorsByCommand: map[string]int64{},
		ClientRedirects: rd.snapshot(),
		ServerErrors:    map[string]int64{},
		BigKeys:         map[string]int{},
	}
	var all []uint64
	var find findings
	var timed int64
	var maxLat time.Duration
	for _, wk := range workers {
		for k, n := range wk.ops {
			r.Ops[k] += n
			r.OpsTotal += n
		}
		for k, n := range wk.errs {
			r.Errors[k] += n
		}
		for k, n := range wk.errsBy {
			r.ErrorsByCommand[k] += n
		}
		r.Uncertain += wk.uncertain
		r.Unloaded += wk.quietOps
		all = append(all, wk.samples...)
		timed += wk.timed
		maxLat = max(maxLat, wk.maxLat)
		r.Latency.Over50ms += wk.over50ms
		find.merge(&wk.find)
		r.Keys += 2 * len(wk.units)
		for _, u := range wk.big {
			r.BigKeys[u.prim.name] = len(u.prim.seq.items)
		}
		r.Verdict.KeysChecked += wk.verified
		r.Verdict.Unchecked += len(wk.unchecked)
		for _, k := range wk.unchecked {
			if len(r.Verdict.UncheckedEx) < maxExamples {
				r.Verdict.UncheckedEx = append(r.Verdict.UncheckedEx, k)
			}
		}
	}
	r.OpsPerSec = float64(r.OpsTotal) / max(r.LoadSeconds, 0.001)
	for addr, m := range after {
		for k, n := range m {
			r.ServerErrors[k] += n - before[addr][k]
		}
	}
	for _, k := range redirectKinds {
		r.ServerErrors[k] += 0 // always show the redirect kinds, zero or not
	}

	s.mu.Lock()
	moves := slices.Clone(s.moves)
	s.mu.Unlock()
	sort.Slice(moves, func(i, j int) bool { return moves[i].start.Before(moves[j].start) })
	var moveSpans, pauseSpans []span
	var pauses []int64
	for _, m := range moves {
		sum := m.out.Summary
		e := MoveEntry{
			Seq: m.move.Seq, Source: m.move.SourceAddr, Target: m.move.TargetAddr,
			Slots: m.move.Slots.String(), SlotCount: m.move.Slots.Len(), Class: m.class, Result: sum.Result, Snapshot: sum.Snapshot,
			StartS: m.start.Sub(s.t0).Seconds(), TotalMS: sum.TotalMS, PauseMS: sum.PauseMS,
			Attempts: sum.CutoverAttempts, KeysCopied: sum.KeysCopied, BigKeys: sum.BigKeys, DeltaCommands: sum.DeltaCommands,
		}
		e.StartAt = m.start.UTC().Format("15:04:05.000")
		for _, p := range m.out.Pauses {
			e.PausesAt = append(e.PausesAt, fmt.Sprintf("%s+%s", p.Start.UTC().Format("15:04:05.000"), p.End.Sub(p.Start).Round(10*time.Microsecond)))
			e.AttemptPausesMS = append(e.AttemptPausesMS, float64(p.End.Sub(p.Start).Microseconds())/1000)
		}
		if m.out.Err != nil {
			e.Error = m.out.Err.Error()
		}
		o := m.out
		e.CrashArmed, e.Crashed, e.CrashError, e.Repaired, e.Forward = o.CrashArmed, o.Crashed, o.CrashError, o.Repaired, o.Forward
		e.Repairs, e.RepairedSlots, e.OwnerProvenOn = o.Repairs, o.RepairedSlots, o.OwnerProvenOn
		if e.CrashArmed {
			r.Moves.CrashArmed++
			if m.class == classMoved && !e.Crashed {
				r.Moves.CrashMissed++
			}
		}
		if e.Crashed {
			r.Moves.Crashed++
		}
		if e.Repaired {
			r.Moves.Repaired++
			r.Moves.RepairedSlots += e.RepairedSlots
		}
		if e.Forward {
			r.Moves.Forward++
		}
		r.Moves.List = append(r.Moves.List, e)
		switch m.class {
		case classMoved:
			r.Moves.Moved++
			pauses = append(pauses, int64(sum.PauseMS*1000))
			if sum.PauseMS > 50 {
				r.Moves.SlowPauses++
			}
		case classRefused:
			r.Moves.Refused++
		case classRolledBack:
			r.Moves.RolledBack++
		default:
			r.Moves.Failed++
		}
		if m.class != classRefused {
			r.Moves.Started++
			moveSpans = append(moveSpans, span{s.micros(m.start), s.micros(m.end)})
		}
		for _, p := range m.out.Pauses {
			// A millisecond either side: the window is taken from log times.
			pauseSpans = append(pauseSpans, span{s.micros(p.Start) - 1000, s.micros(p.End) + 1000})
		}
	}
	for i, a := range moves {
		if a.class != classMoved {
			continue
		}
		for j, b := range moves {
			if i != j && b.class != classRefused && a.move.SourceID == b.move.SourceID && b.start.Before(a.end) && a.start.Before(b.end) {
				r.Moves.SameSource++
				break
			}
		}
	}
	slices.Sort(pauses)
	r.Moves.Pause = summarize(pauses)

	moveSpans, pauseSpans = merge(moveSpans), merge(pauseSpans)
	r.Latency.Overall = summarize(latencies(all, nil))
	r.Latency.Overall.Count, r.Latency.Overall.Max = int(timed), float64(maxLat.Microseconds())/1000
	r.Latency.Sampled = timed > int64(len(all))
	r.Latency.DuringMoves = summarize(latencies(all, func(start, _ int64) bool { return overlaps(moveSpans, start, start) }))
	r.Latency.DuringPauses = summarize(latencies(all, func(start, lat int64) bool { return overlaps(pauseSpans, start, start+lat) }))

	v := &r.Verdict
	v.LostWrites, v.WrongReads, v.Resurrected = find.keys[catLost], find.keys[catWrong], find.keys[catResurrected]
	v.Events = map[string]int{}
	v.Examples = map[string][]string{}
	for c := range numCategories {
		v.Events[c.String()] = find.events[c]
		if len(find.examples[c]) > 0 {
			v.Examples[c.String()] = find.examples[c]
		}
	}

	if v.LostWrites > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d keys lost acknowledged writes", v.LostWrites))
	}
	if v.WrongReads > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d keys read wrong values", v.WrongReads))
	}
	if v.Resurrected > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d keys came back after they expired", v.Resurrected))
	}
	if r.Moves.Failed > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d moves failed without a clean rollback", r.Moves.Failed))
	}
	if r.Moves.CrashMissed > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d moves armed to crash after the release moved all the same", r.Moves.CrashMissed))
	}
	if v.Unchecked > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d keys could not be read by the final pass", v.Unchecked))
	}
	r.Pass = len(r.Failures) == 0
	return r
}

// span is a time interval in µs after the soak's start.
type span struct{ a, b int64 }

func (s *soak) micros(t time.Time) int64 { return t.Sub(s.t0).Microseconds() }

// merge sorts spans and joins overlapping ones, for overlaps' binary search.
func merge(ss []span) []span {
	sort.Slice(ss, func(i, j int) bool { return ss[i].a < ss[j].a })
	var out []span
	for _, x := range ss {
		if n := len(out); n > 0 && x.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, x.b)
			continue
		}
		out = append(out, x)
	}
	return out
}

// overlaps reports whether [a, b] meets one of the merged spans.
func overlaps(ss []span, a, b int64) bool {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].b >= a })
	return i < len(ss) && ss[i].a <= b
}

// summarize takes sorted latencies in µs.
func summarize(lat []int64) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return float64(lat[max(0, min(i, len(lat)-1))]) / 1000
	}
	return Latency{Count: len(lat), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: float64(lat[len(lat)-1]) / 1000}
}

// WriteText prints the report as tables for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "slotmover-lab soak of %s: load %.1f s, total %.1f s, seed %d, run %s, %d workers, %d keys\n\n",
		r.Cluster, r.LoadSeconds, r.TotalSeconds, r.Seed, r.Run, r.Workers, r.Keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ops\t%d\t(%.0f/s, %d with unknown outcome; %d more to write every key first and to verify)\n", r.OpsTotal, r.OpsPerSec, r.Uncertain, r.Unloaded)
	for _, k := range slices.Sorted(maps.Keys(r.Ops)) {
		fmt.Fprintf(tw, "  %s\t%d\t\n", k, r.Ops[k])
	}
	big := map[string]int64{}
	for k, n := range r.BigKeys {
		big[k] = int64(n)
	}
	fmt.Fprintf(tw, "big keys (elements)\t%s\t\n", kv(big))
	fmt.Fprintf(tw, "errors (workload)\t%s\t\n", kv(r.Errors))
	if len(r.ErrorsByCommand) > 0 {
		fmt.Fprintf(tw, "  by command\t%s\t\n", kv(r.ErrorsByCommand))
	}
	fmt.Fprintf(tw, "redirects (client)\t%s\t\n", kv(r.ClientRedirects))
	fmt.Fprintf(tw, "errors (servers, delta)\t%s\t\n", kv(r.ServerErrors))
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "latency ms\tcount\tp50\tp99\tp99.9\tmax\t\n")
	for _, x := range []struct {
		name string
		l    Latency
	}{{"overall", r.Latency.Overall}, {"during moves", r.Latency.DuringMoves}, {"during pauses", r.Latency.DuringPauses}, {"move pauses", r.Moves.Pause}} {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", x.name, x.l.Count, x.l.P50, x.l.P99, x.l.P999, x.l.Max)
	}
	tw.Flush()
	fmt.Fprintf(w, "ops over 50 ms: %d", r.Latency.Over50ms)
	if r.Latency.Sampled {
		fmt.Fprintf(w, " (percentiles from a uniform sample of %d operations)", maxSamples)
	}
	fmt.Fprint(w, "\n\n")

	m := r.Moves
	fmt.Fprintf(w, "moves: %d started, %d moved, %d refused, %d rolled back, %d failed; %d pauses over 50 ms\n",
		m.Started, m.Moved, m.Refused, m.RolledBack, m.Failed, m.SlowPauses)
	if m.SameSource > 0 {
		fmt.Fprintf(w, "moved while another move from the same source was in flight: %d\n", m.SameSource)
	}
	if m.CrashArmed > 0 {
		fmt.Fprintf(w, "armed to crash after the release (--crash-every): %d; crashed: %d; repaired by fix: %d, %d slots (given back to their source and counted as rolled back, or finished forward on Valkey 8 and counted as moved: %d); moved all the same: %d\n",
			m.CrashArmed, m.Crashed, m.Repaired, m.RepairedSlots, m.Forward, m.CrashMissed)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\tat\tsource\ttarget\tslots\tresult\tpause ms\ttotal ms\tkeys\tbig\tdelta\t\n")
	for _, e := range m.List {
		spec := e.Slots
		if len(spec) > 24 {
			spec = spec[:21] + "..."
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s (%d)\t%s\t%.1f\t%d\t%d\t%d\t%d\t\n",
			e.Seq, e.StartAt, e.Source, e.Target, spec, e.SlotCount, e.Class, e.PauseMS, e.TotalMS, e.KeysCopied, e.BigKeys, e.DeltaCommands)
	}
	tw.Flush()
	for _, e := range m.List {
		if e.Error != "" {
			fmt.Fprintf(w, "  move %d (%s): %s\n", e.Seq, e.Class, e.Error)
		}
		switch {
		case e.Crashed:
			fmt.Fprintf(w, "  move %d crashed: %s; fix made %d repairs, giving back %d of its %d slots; the source owns them in the own view of %d masters (%s)\n",
				e.Seq, e.CrashError, len(e.Repairs), e.RepairedSlots, e.SlotCount, len(e.OwnerProvenOn), strings.Join(e.OwnerProvenOn, ", "))
		case e.CrashArmed:
			fmt.Fprintf(w, "  move %d was armed to crash after the release but ended %s (%s)\n", e.Seq, e.Class, e.CrashError)
		}
	}

	v := r.Verdict
	fmt.Fprintf(w, "\nverdict: lost writes %d, wrong reads %d, resurrected %d (keys); %d keys checked at the end, %d unreadable\n",
		v.LostWrites, v.WrongReads, v.Resurrected, v.KeysChecked, v.Unchecked)
	for _, c := range []string{"lost", "wrong", "resurrected"} {
		for _, e := range v.Examples[c] {
			fmt.Fprintf(w, "  %s: %s\n", c, e)
		}
	}
	if len(v.UncheckedEx) > 0 {
		fmt.Fprintf(w, "  unreadable: %s\n", strings.Join(v.UncheckedEx, ", "))
	}
	if r.Pass {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintf(w, "FAIL: %s\n", strings.Join(r.Failures, "; "))
	}
}

func kv(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
