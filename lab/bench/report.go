package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a benchmark: one row per workload and method.
type Report struct {
	Server      string   `json:"server"`
	ASMServer   string   `json:"asm_server,omitempty"` // the asm method's build
	SmallSlots  string   `json:"small_slots,omitempty"`
	Keys        int      `json:"keys"`
	ValueSize   int      `json:"value_size"`
	Types       bool     `json:"types"`
	BigKeys     bool     `json:"big_keys"`
	BigElements int      `json:"big_elements,omitempty"`
	BigTypes    []string `json:"big_types,omitempty"`
	LoadRate    int      `json:"load_rate"`
	Budget      string   `json:"budget"` // slotmover's
	Runs        int      `json:"runs"`
	// The fleet workload's shape, when it ran.
	Fleet *FleetShape `json:"fleet,omitempty"`
	Rows  []*Row      `json:"rows"`
}

// Row is a method on a workload: the median of its runs.
type Row struct {
	Workload string `json:"workload"`
	Method   string `json:"method"`

	WallMS     float64  `json:"wall_ms"`                      // median over the runs that worked
	Ratio      *float64 `json:"ratio_to_slotmover,omitempty"` // wall time ÷ slotmover's on the workload
	KeysMoved  int64    `json:"keys_moved"`
	KeysPerSec float64  `json:"keys_per_sec"`
	PauseMS    *float64 `json:"pause_ms"`  // slotmover, asm
	SwitchMS   *float64 `json:"switch_ms"` // slotmover, asm: the slots were served by the target from then on
	Snapshot   string   `json:"snapshot,omitempty"`

	// Of the median run: the sources' forks during the move, their longest
	// stall (see ServerProbe.StallMS) and their PING latencies (idle p99,
	// p99 and max during the move).
	Forks      *int64 `json:"forks"`
	StallMS    *int64 `json:"stall_max_ms"`
	StallEvent string `json:"stall_event,omitempty"`
	// TargetStallMS is the target's longest event, as StallMS the sources'.
	TargetStallMS    *int64 `json:"target_stall_max_ms"`
	TargetStallEvent string `json:"target_stall_event,omitempty"`
	// Commands of 5 ms or more in the sources' and the target's slow logs.
	StallsOver5MS       int      `json:"commands_over_5ms"`
	TargetStallsOver5MS int      `json:"target_commands_over_5ms"`
	PingIdleP99         *float64 `json:"ping_idle_p99_ms"`
	PingP99             *float64 `json:"ping_p99_ms"`
	PingMax             *float64 `json:"ping_max_ms"`

	// Client is what the fleet's writer saw in the median run.
	Client *ClientLatency `json:"client,omitempty"`
	Median int            `json:"median_run,omitempty"` // the median run's number

	ServerRedirects Redirects `json:"server_redirects"` // of the median run
	ClientRedirects Redirects `json:"client_redirects"`
	LoadOps         int64     `json:"load_ops"`
	LostWrites      int64     `json:"lost_writes"` // over every run
	Failed          int       `json:"failed_runs"`
	Warnings        []string  `json:"warnings,omitempty"`
	Skipped         string    `json:"skipped,omitempty"` // why the method did not run

	Runs []RunResult `json:"runs"`
}

// FleetShape is the fleet workload's cluster and writer.
type FleetShape struct {
	Masters  int `json:"masters"`
	New      int `json:"new"`
	Parallel int `json:"parallel"`
	Writer   int `json:"writer_ops_per_sec"`
}

func newReport(cfg *Config) *Report {
	r := &Report{
		Server: serverVersion(), Keys: cfg.Keys, ValueSize: cfg.ValueSize, Types: cfg.Types,
		BigKeys: cfg.BigKeys, LoadRate: cfg.LoadRate, Budget: cfg.Budget.String(), Runs: cfg.Runs,
	}
	if slices.Contains(cfg.Workloads, WorkloadSmall) {
		r.SmallSlots = cfg.SmallSlots
	}
	if cfg.BigKeys {
		r.BigElements, r.BigTypes = cfg.BigElements, cfg.BigTypes
	}
	if slices.Contains(cfg.Workloads, WorkloadFleet) {
		r.Fleet = &FleetShape{Masters: cfg.FleetMasters, New: cfg.FleetNew, Parallel: cfg.Parallel, Writer: cmp.Or(cfg.LoadRate, DefaultFleetLoadRate)}
		r.BigElements = cfg.BigElements
	}
	for _, w := range cfg.Workloads {
		for _, m := range cfg.Methods {
			if applies(w, m) {
				r.Rows = append(r.Rows, &Row{Workload: w, Method: m})
			}
		}
	}
	return r
}

func (r *Report) row(workload, method string) *Row {
	for _, row := range r.Rows {
		if row.Workload == workload && row.Method == method {
			return row
		}
	}
	return nil
}

func (r *Report) add(res RunResult) {
	if row := r.row(res.Workload, res.Method); row != nil {
		row.Runs = append(row.Runs, res)
	}
}

// OK reports whether every run moved its slots and passed every check.
func (r *Report) OK() bool {
	for _, row := range r.Rows {
		for i := range row.Runs {
			if !row.Runs[i].ok() {
				return false
			}
		}
	}
	return true
}

// summarize fills each row from its runs: the median wall time, the other
// numbers of the median run, lost writes and warnings of every run.
func (r *Report) summarize() {
	for _, row := range r.Rows {
		var good []*RunResult
		row.Failed, row.LostWrites, row.Warnings = 0, 0, nil
		for i := range row.Runs {
			run := &row.Runs[i]
			row.LostWrites += run.LostWrites
			if run.Error != "" {
				row.Failed++
				row.Warnings = append(row.Warnings, fmt.Sprintf("run %d failed: %s", run.Run, run.Error))
				continue
			}
			for _, w := range run.Warnings {
				row.Warnings = append(row.Warnings, fmt.Sprintf("run %d: %s", run.Run, w))
			}
			good = append(good, run)
		}
		if len(good) == 0 {
			continue
		}
		sort.Slice(good, func(a, b int) bool { return good[a].WallMS < good[b].WallMS })
		mid := good[(len(good)-1)/2]
		row.WallMS = mid.WallMS
		if len(good)%2 == 0 {
			row.WallMS = (mid.WallMS + good[len(good)/2].WallMS) / 2
		}
		row.KeysMoved = mid.KeysMoved
		if row.WallMS > 0 {
			row.KeysPerSec = float64(row.KeysMoved) / (row.WallMS / 1000)
		}
		row.PauseMS, row.SwitchMS, row.Snapshot = mid.PauseMS, mid.SwitchMS, mid.Snapshot
		row.Forks, row.StallMS, row.StallEvent = mid.Forks, mid.StallMS, mid.StallEvent
		row.TargetStallMS, row.TargetStallEvent = mid.TargetStallMS, mid.TargetStallEvent
		row.StallsOver5MS, row.TargetStallsOver5MS = mid.StallsOver5MS, mid.TargetStallsOver5MS
		row.PingIdleP99, row.PingP99, row.PingMax = mid.PingIdleP99, mid.PingP99, mid.PingMax
		row.ServerRedirects, row.ClientRedirects, row.LoadOps = mid.ServerRedirects, mid.ClientRedirects, mid.LoadOps
		row.Client, row.Median = mid.Client, mid.Run
	}
	for _, row := range r.Rows {
		base := r.row(row.Workload, MethodSlotmover)
		if base != nil && base.WallMS > 0 && row.WallMS > 0 && row.Method != MethodNoMove { // its wall is a set window
			v := row.WallMS / base.WallMS
			row.Ratio = &v
		}
	}
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteTable writes the side-by-side table, then what slotmover's time went
// to, then every warning and note.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	data := fmt.Sprintf("%d keys × %d B", r.Keys, r.ValueSize)
	if r.Types {
		data += ", mixed types"
	}
	if r.BigKeys {
		data += fmt.Sprintf(", big keys of %d elements", r.BigElements)
		if r.BigTypes != nil {
			data += " (" + strings.Join(r.BigTypes, ", ") + ")"
		}
	}
	load := ""
	if r.hasMoves() {
		load = fmt.Sprintf("; background load %d INCR/s", r.LoadRate)
	}
	fmt.Fprintf(&b, "%s; %s; median of %d run(s)%s; slotmover's budget %s\n", r.Server, data, r.Runs, load, r.Budget)
	if r.ASMServer != "" {
		fmt.Fprintf(&b, "asm: %s (its own cluster)\n", r.ASMServer)
	}
	if r.SmallSlots != "" {
		fmt.Fprintf(&b, "small: slots %s of the first master\n", r.SmallSlots)
	}
	if err := r.writeMoves(&b); err != nil {
		return err
	}
	if err := r.writeFleet(&b); err != nil {
		return err
	}

	// Where slotmover's time went, per task of every run.
	var details []string
	for _, row := range r.Rows {
		if _, ok := snapshotOf[row.Method]; !ok {
			continue
		}
		for _, run := range row.Runs {
			for _, t := range run.Tasks {
				s := t.Summary
				details = append(details, fmt.Sprintf("  %s/%s run %d, %s slots %s: %d keys, snapshot %s (%s), rdb %.1f MB, snapshot %d ms, catchup %d ms, switched at %d ms (pause %.1f ms, %d attempt(s)), cleanup %d ms (%d orphans), total %d ms (%d ms held over budget)",
					row.Workload, row.Method, run.Run, s.Source, s.Slots, s.KeysCopied, s.Snapshot, s.SnapshotReason, float64(s.RDBBytes)/1e6,
					s.SnapshotMS, s.CatchupMS, s.SwitchMS, s.PauseMS, s.CutoverAttempts,
					s.CleanupMS, s.OrphansRemoved, s.TotalMS, s.ThrottledMS))
			}
		}
	}
	if len(details) > 0 {
		b.WriteString("\nslotmover tasks:\n" + strings.Join(details, "\n") + "\n")
	}
	var notes []string
	for _, row := range r.Rows {
		if row.Skipped != "" {
			notes = append(notes, fmt.Sprintf("  note %s/%s: skipped: %s", row.Workload, row.Method, row.Skipped))
		}
		for _, warn := range row.Warnings {
			notes = append(notes, fmt.Sprintf("  WARN %s/%s: %s", row.Workload, row.Method, warn))
		}
		for _, run := range row.Runs {
			for _, n := range run.Notes {
				notes = append(notes, fmt.Sprintf("  note %s/%s run %d: %s", row.Workload, row.Method, run.Run, n))
			}
			if run.Dir != "" {
				notes = append(notes, fmt.Sprintf("  note %s/%s run %d: files kept in %s", row.Workload, row.Method, run.Run, run.Dir))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(slices.Compact(notes), "\n") + "\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// hasMoves reports whether a workload that moves slots to one empty
// master ran: all but the fleet.
func (r *Report) hasMoves() bool {
	return slices.ContainsFunc(r.Rows, func(row *Row) bool { return row.Workload != WorkloadFleet })
}

// writeMoves writes the table of the workloads that move slots to one
// empty master.
func (r *Report) writeMoves(b *strings.Builder) error {
	if !r.hasMoves() {
		return nil
	}
	b.WriteString("wall: start of the move to its end, source cleanup included; switched: the target served the slots from then on\n" +
		"snapshot: the path slotmover's tasks took; forks: the sources' total_forks during the move; " +
		"stall: the longest event of a source's main thread during the move (its latency monitor, whole ms: a command, a script, a fork…; a command's name from its slow log); target stall: the same on the target; n ≥5 ms: commands of its slow log that took 5 ms or more; " +
		"ping: a PING to each source every ~1 ms, p99 in the idle second before the move, p99 and max during it (the worst source)\n" +
		"redirects M/A/T: MOVED/ASK/TRYAGAIN " +
		"replies of all nodes during the move (INFO errorstats); load saw: redirects the load's node clients got\n\n")

	tw := tabwriter.NewWriter(b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tmethod\twall\tvs slotmover\tswitched\tkeys moved\tkeys/s\tsnapshot\twrite pause\tforks\tstall\ttarget stall\tping p99 idle\tping p99 move\tping max\tredirects M/A/T\tload saw\tload ops\tlost writes\tcheck\t")
	msOrDash := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f ms", *p)
	}
	for _, row := range r.Rows {
		if row.Workload == WorkloadFleet {
			continue
		}
		wall, ratio, switched, kps, pause, snap, forks := "-", "-", "-", "-", "-", "-", "-"
		stall, tstall := stallCell(row.StallMS, row.StallEvent, row.StallsOver5MS), stallCell(row.TargetStallMS, row.TargetStallEvent, row.TargetStallsOver5MS)
		if row.Snapshot != "" {
			snap = row.Snapshot
		}
		if row.Forks != nil {
			forks = fmt.Sprint(*row.Forks)
		}
		if row.SwitchMS != nil {
			switched = fmt.Sprintf("%.2f s", *row.SwitchMS/1000)
		}
		if row.WallMS > 0 {
			wall = fmt.Sprintf("%.2f s", row.WallMS/1000)
			kps = fmt.Sprintf("%.0f", row.KeysPerSec)
		}
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.1f×", *row.Ratio)
		}
		if row.PauseMS != nil {
			pause = fmt.Sprintf("%.1f ms", *row.PauseMS)
		}
		srv := row.ServerRedirects
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%d\t%d\t%d\t%s\t\n",
			row.Workload, row.Method, wall, ratio, switched, row.KeysMoved, kps, snap, pause, forks, stall, tstall,
			msOrDash(row.PingIdleP99), msOrDash(row.PingP99), msOrDash(row.PingMax),
			srv.Moved, srv.Ask, srv.TryAgain, row.ClientRedirects.Total(), row.LoadOps, row.LostWrites, row.check())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// check is the row's verdict for the table.
func (row *Row) check() string {
	switch {
	case row.Skipped != "":
		return "skipped"
	case len(row.Runs) == 0:
		return "not run"
	case row.Failed == len(row.Runs):
		return "FAILED"
	case row.Failed > 0:
		return fmt.Sprintf("%d FAILED", row.Failed)
	case len(row.Warnings) > 0 || row.LostWrites > 0:
		return "WARN"
	}
	return "ok"
}

// writeFleet writes the fleet workload's table: the writer's latencies
// idle and during, and the longest event of any master, with each
// master's below.
func (r *Report) writeFleet(b *strings.Builder) error {
	if r.Fleet == nil {
		return nil
	}
	f := r.Fleet
	fmt.Fprintf(b, "\nfleet: %d masters holding every slot and %d empty ones, each with a replica; %d keys spread over them and a sorted set of %d members at each end of every range; "+
		"slotmover runs plan --add + apply --nats --parallel %d through a sidecar beside every master; a client sends %d INCR/s over all slots from %s before the rebalance to its end\n"+
		"client: the writer's own round trips, p50/p99/max in ms; event: the longest event of any master's main thread (its latency monitor); redirects: those the writer followed (M/A/T); "+
		"CPU: seconds the host spent during the rebalance, by the servers (their forks included), the mover (sidecars, redis-cli: all but the servers and the bench) and the bench (the writer, NATS)\n\n",
		f.Masters, f.New, r.Keys, r.BigElements, f.Parallel, f.Writer, fleetIdle)
	tw := tabwriter.NewWriter(b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "method\tbudget\twall\tvs slotmover\tclient idle\tclient during\tops/s during\tCPU servers/mover/bench\tlongest event\tforks\tredirects\tthrottled\tlost writes\tcheck\t")
	var perMaster []string
	for _, row := range r.Rows {
		if row.Workload != WorkloadFleet {
			continue
		}
		wall, ratio, idle, during, ops, forks, throttled := "-", "-", "-", "-", "-", "-", "-"
		if row.WallMS > 0 {
			wall = fmt.Sprintf("%.1f s", row.WallMS/1000)
		}
		if row.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *row.Ratio)
		}
		if c := row.Client; c != nil {
			idle = fmt.Sprintf("%.2f/%.2f/%.1f", c.IdleP50MS, c.IdleP99MS, c.IdleMaxMS)
			during = fmt.Sprintf("%.2f/%.2f/%.1f", c.P50MS, c.P99MS, c.MaxMS)
			ops = fmt.Sprintf("%.0f", c.OpsPerSec)
		}
		if row.Forks != nil {
			forks = fmt.Sprint(*row.Forks)
		}
		budget := "-"
		switch row.Method {
		case MethodSlotmoverOff:
			budget = "off"
		case MethodSlotmover, MethodSlotmoverRDB, MethodSlotmoverKeys:
			budget = r.Budget
		}
		var mid *RunResult
		for i := range row.Runs {
			if row.Runs[i].Run == row.Median {
				mid = &row.Runs[i]
			}
		}
		if mid != nil && len(mid.Moves) > 0 {
			var t int64
			for _, o := range mid.Moves {
				t += o.Throttled
			}
			throttled = fmt.Sprintf("%.1f s", float64(t)/1000)
		}
		cpu := "-"
		if mid != nil && mid.CPU != nil {
			cpu = fmt.Sprintf("%.1f/%.1f/%.1f s", mid.CPU.Servers, mid.CPU.Mover, mid.CPU.Bench)
		}
		if mid != nil && len(mid.Sources) > 0 {
			var ev []string
			for _, sp := range mid.Sources {
				ev = append(ev, fmt.Sprint(sp.StallMS))
			}
			perMaster = append(perMaster, fmt.Sprintf("  %s: %s", row.Method, strings.Join(ev, " ")))
		}
		c := row.ClientRedirects
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d/%d\t%s\t%d\t%s\t\n",
			row.Method, budget, wall, ratio, idle, during, ops, cpu, stallCell(row.StallMS, row.StallEvent, 0), forks,
			c.Moved, c.Ask, c.TryAgain, throttled, row.LostWrites, row.check())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if len(perMaster) > 0 {
		b.WriteString("\nlongest event of each master, ms (the old masters, then the new):\n" + strings.Join(perMaster, "\n") + "\n")
	}
	return nil
}

// stallCell is a stall in the table: its ms and event, and how many
// commands took 5 ms or more; "-" for none read.
func stallCell(ms *int64, event string, over5 int) string {
	if ms == nil {
		return "-"
	}
	s := fmt.Sprintf("%d ms", *ms)
	if event != "" {
		s += " " + event
	}
	if over5 > 0 {
		s += fmt.Sprintf(", %d ≥5 ms", over5)
	}
	return s
}
