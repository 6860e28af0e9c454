package admin

// CLUSTER MIGRATION, answered in the shapes of Redis 8.4's atomic slot
// migration. What the build in ../shared/redis-builds/redis-unstable-asm
// (Redis unstable, June 2026, reporting 255.255.255) answered, as raw RESP2,
// on a cluster of two and then three masters:
//
//	CLUSTER MIGRATION IMPORT 0 100          $40 78db6cc7…28  (the task id, a bulk string)
//	CLUSTER MIGRATION IMPORT 200 300 400 500 501 501
//	                                        one id: one task for all the ranges
//	CLUSTER MIGRATION IMPORT 8000 8300      -ERR slots belong to different source nodes
//	CLUSTER MIGRATION STATUS ALL            *0 when there is no task, else one
//	                                        array per task, newest first:
//	  *1
//	    *24 id $40 78db…28  slots "0-100"  source <node id>  dest <node id>
//	        operation "import"  state "completed"  last_error ""  retries :0
//	        create_time :1796102326840  start_time :1796102326840
//	        end_time :1796102326844  write_pause_ms :0
//	  (after HELLO 3 the inner arrays are maps, %12, with the same fields)
//	CLUSTER MIGRATION STATUS ID <id>        the same, one task: *1 *24 …
//	CLUSTER MIGRATION STATUS ID nosuch      *0
//	CLUSTER MIGRATION CANCEL ID <id>|ALL    :1 for a running task cancelled,
//	                                        :0 for an unknown or finished one
//
// Field by field: slots are "start-end" ranges joined by spaces, a single
// slot too ("7000-7000", "200-300 400-501": adjacent ranges merged); times
// are integers, milliseconds since the epoch, -1 when not yet (end_time of
// a task that is running or failed); retries and write_pause_ms are
// integers; last_error is "" when there is none; states seen: completed,
// canceled (last_error "Cancelled due to user request (state: …)"), failed
// (last_error "Main channel - Failed to sync with source node: Connection
// refused …", retries :4), and while running the steps of 8.4's machine
// ("accumulate-buffer", …). The source node reports the same task with
// operation "migrate".
//
// Errors seen: "ERR wrong number of arguments for 'cluster|migration'
// command" (fewer than 4 words, an odd count of IMPORT slots, STATUS/CANCEL
// with ID and no id or with more words), "ERR unknown argument" (an unknown
// subcommand or STATUS/CANCEL option), "ERR Invalid or out of range slot",
// "ERR start slot number 10 is greater than end slot number 5", "ERR Slot
// 250 specified multiple times", "ERR this node is already the owner of the
// slot range", "ERR overlapping import exists for slot range: 3300-3300",
// "ERR another ASM task is already in progress".
//
// This port answers the same shapes, with two differences in substance:
// ranges owned by several sources start one task per source, and IMPORT
// then answers an array of their ids (one task: the bulk id, as 8.4); and
// the states are the sidecar's (running, completed, failed,
// canceled). Each task's array holds 8.4's twelve fields first, in 8.4's
// order, then slotmover's own (see taskFields).

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/slotmover/slotmover/sidecar"
	"github.com/slotmover/slotmover/slots"
)

// CLUSTER MIGRATION IMPORT|STATUS|CANCEL …; the arity (at least 4 words)
// was checked by dispatch.
func (s *Server) migration(c redcon.Conn, sess *session, args [][]byte) {
	switch strings.ToLower(string(args[2])) {
	case "import":
		s.migrationImport(c, sess, args[3:])
	case "status":
		id, ok := taskSelector(c, args)
		if !ok {
			return
		}
		tasks, err := s.m.Status(id)
		if errors.Is(err, sidecar.ErrUnknownTask) && id != "" {
			tasks, err = nil, nil // 8.4: an unknown id is an empty list
		}
		if err != nil {
			s.replyManagerError(c, "status", err)
			return
		}
		writeTasks(c, tasks)
	case "cancel":
		id, ok := taskSelector(c, args)
		if !ok {
			return
		}
		var tasks []sidecar.Task
		var err error
		if id != "" {
			// 8.4 answers :0 for an unknown task or one that has ended;
			// the Manager is not asked to cancel an ended task (Local
			// would refuse it as too late).
			tasks, err = s.m.Status(id)
			if errors.Is(err, sidecar.ErrUnknownTask) || err == nil && (len(tasks) == 0 || ended(tasks[0].State)) {
				c.WriteInt(0)
				return
			}
		}
		if err == nil {
			tasks, err = s.m.Cancel(id)
		}
		if errors.Is(err, sidecar.ErrUnknownTask) && id != "" {
			tasks, err = nil, nil // gone meanwhile: 8.4's :0
		}
		if err != nil {
			s.replyManagerError(c, "cancel", err)
			return
		}
		n := cancelled(tasks)
		s.log.Info("admin: cancel", "id", sess.id, "addr", sess.addr, "task", idOrAll(id), "cancelled", n)
		c.WriteInt(n)
	case "budget": // slotmover's: BUDGET <budget> ID <id>|ALL
		if len(args) < 5 {
			c.WriteError(wrongArity("cluster|migration"))
			return
		}
		s.control(c, sess, string(args[2]), string(args[3]), append(args[:3:3], args[4:]...))
	default:
		if a := sidecar.Action(strings.ToLower(string(args[2]))); slices.Contains(sidecar.Actions, a) {
			s.control(c, sess, string(a), "", args) // slotmover's: PAUSE, RESUME, HOLD-CUTOVER, RELEASE-CUTOVER
			return
		}
		c.WriteError("ERR unknown argument")
	}
}

// control answers slotmover's controls of running tasks, in CANCEL's
// shape: the count of tasks changed (:0 for an unknown or ended one).
func (s *Server) control(c redcon.Conn, sess *session, action, budget string, sel [][]byte) {
	ctl, err := sidecar.ParseControl(action, budget)
	if err != nil {
		c.WriteError("ERR " + err.Error())
		return
	}
	id, ok := taskSelector(c, sel)
	if !ok {
		return
	}
	tasks, err := s.m.Control(id, ctl)
	if errors.Is(err, sidecar.ErrUnknownTask) && id != "" {
		tasks, err = nil, nil
	}
	if err != nil {
		s.replyManagerError(c, action, err)
		return
	}
	s.log.Info("admin: "+action, "id", sess.id, "addr", sess.addr, "task", idOrAll(id), "budget", budget, "changed", len(tasks))
	c.WriteInt(len(tasks))
}

// taskSelector reads STATUS/CANCEL's "ID <id>" or "ALL": the id, or "" for
// every task, as Manager takes them.
func taskSelector(c redcon.Conn, args [][]byte) (string, bool) {
	switch strings.ToLower(string(args[3])) {
	case "all":
		if len(args) == 4 {
			return "", true
		}
	case "id":
		if len(args) == 5 {
			if len(args[4]) == 0 {
				c.WriteError("ERR task id is empty")
				return "", false
			}
			return string(args[4]), true
		}
	default:
		c.WriteError("ERR unknown argument")
		return "", false
	}
	c.WriteError(wrongArity("cluster|migration"))
	return "", false
}

func idOrAll(id string) string {
	if id == "" {
		return "ALL"
	}
	return id
}

// cancelled counts the tasks a Cancel stopped, as 8.4's reply does: the
// Manager returns just those.
func cancelled(tasks []sidecar.Task) int { return len(tasks) }

func ended(state string) bool {
	return state == sidecar.StateCompleted || state == sidecar.StateFailed || state == sidecar.StateCanceled
}

// migrationImport checks every range before the Manager is called: slot
// numbers 0-16383, start <= end, pairs, no slot twice.
func (s *Server) migrationImport(c redcon.Conn, sess *session, rest [][]byte) {
	set, msg := parseImportRanges(rest)
	if msg != "" {
		c.WriteError(msg)
		return
	}
	ctx, cancel := s.requestContext()
	defer cancel()
	tasks, err := s.m.Import(ctx, sidecar.Request{Slots: set})
	if err != nil {
		s.replyManagerError(c, "import", err)
		return
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	s.log.Info("admin: import", "id", sess.id, "addr", sess.addr, "slots", set.String(), "tasks", ids)
	switch len(ids) {
	case 0:
		c.WriteError("ERR no task was started")
	case 1:
		c.WriteBulkString(ids[0])
	default:
		c.WriteArray(len(ids))
		for _, id := range ids {
			c.WriteBulkString(id)
		}
	}
}

// parseImportRanges reads <start> <end> pairs into a set, or says what is
// wrong in 8.4's words (with the offending value added).
func parseImportRanges(rest [][]byte) (*slots.Set, string) {
	if len(rest) == 0 || len(rest)%2 != 0 {
		return nil, wrongArity("cluster|migration")
	}
	set := &slots.Set{}
	for i := 0; i < len(rest); i += 2 {
		start, ok1 := parseSlot(rest[i])
		end, ok2 := parseSlot(rest[i+1])
		if !ok1 || !ok2 {
			bad := rest[i]
			if ok1 {
				bad = rest[i+1]
			}
			return nil, fmt.Sprintf("ERR Invalid or out of range slot '%.32s' (slots are 0-%d)", bad, slots.Count-1)
		}
		if start > end {
			return nil, fmt.Sprintf("ERR start slot number %d is greater than end slot number %d", start, end)
		}
		for x := start; x <= end; x++ {
			if set.Contains(x) {
				return nil, fmt.Sprintf("ERR Slot %d specified multiple times", x)
			}
		}
		set.AddRange(slots.Range{Start: start, End: end})
	}
	return set, ""
}

// parseSlot takes decimal digits only (no sign, no spaces), 0-16383.
func parseSlot(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 {
		return 0, false
	}
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n >= slots.Count {
		return 0, false
	}
	return uint16(n), true
}

// replyManagerError turns a Manager's error into -ERR <message>: the
// connection stays open and nothing else is answered.
func (s *Server) replyManagerError(c redcon.Conn, op string, err error) {
	s.log.Warn("admin: manager refused", "op", op, "err", err)
	c.WriteError("ERR " + err.Error())
}

// fieldKind says how a field is written: a bulk string or an integer, as
// 8.4 writes its own fields.
type fieldKind int

const (
	bulkField fieldKind = iota
	intField
)

// taskFields are the fields of a task's STATUS array, in order: 8.4's
// twelve, then slotmover's.
var taskFields = []struct {
	name string
	kind fieldKind
	get  func(t *sidecar.Task) any // string or int64
}{
	{"id", bulkField, func(t *sidecar.Task) any { return t.ID }},
	{"slots", bulkField, func(t *sidecar.Task) any { return slotRanges(t.Slots) }},
	{"source", bulkField, func(t *sidecar.Task) any { return t.Source }},
	{"dest", bulkField, func(t *sidecar.Task) any { return t.Dest }},
	{"operation", bulkField, func(t *sidecar.Task) any { return orDefault(t.Operation, "import") }},
	{"state", bulkField, func(t *sidecar.Task) any { return t.State }},
	{"last_error", bulkField, func(t *sidecar.Task) any { return t.LastError }},
	{"retries", intField, func(t *sidecar.Task) any { return int64(t.Retries) }},
	{"create_time", intField, func(t *sidecar.Task) any { return unixMilli(t.CreateTime) }},
	{"start_time", intField, func(t *sidecar.Task) any { return unixMilli(t.StartTime) }},
	{"end_time", intField, func(t *sidecar.Task) any { return unixMilli(t.EndTime) }},
	{"write_pause_ms", intField, func(t *sidecar.Task) any { return int64(math.Round(t.WritePauseMS)) }},
	// slotmover's own
	{"phase", bulkField, func(t *sidecar.Task) any { return t.Phase }},
	{"result", bulkField, func(t *sidecar.Task) any { return t.Result }},
	{"source_addr", bulkField, func(t *sidecar.Task) any { return t.SourceAddr }},
	{"dest_addr", bulkField, func(t *sidecar.Task) any { return t.DestAddr }},
	{"keys_copied", intField, func(t *sidecar.Task) any { return t.KeysCopied }},
	{"bytes_copied", intField, func(t *sidecar.Task) any { return t.BytesCopied }},
	{"lag_bytes", intField, func(t *sidecar.Task) any { return t.LagBytes }},
	{"orphans_removed", intField, func(t *sidecar.Task) any { return t.OrphansRemoved }},
	{"budget", bulkField, func(t *sidecar.Task) any { return t.Budget }},
	{"holding", bulkField, func(t *sidecar.Task) any { return strings.Join(t.Holding, "; ") }},
	{"throttled_ms", intField, func(t *sidecar.Task) any { return t.ThrottledMS }},
	{"paused_ms", intField, func(t *sidecar.Task) any { return t.PausedMS }},
	{"cutover_held", intField, func(t *sidecar.Task) any { return boolInt(t.CutoverHeld) }},
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// writeTasks writes STATUS's reply: an array of tasks, newest first, each a
// flat array of field names and values.
func writeTasks(c redcon.Conn, tasks []sidecar.Task) {
	sorted := append([]sidecar.Task(nil), tasks...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreateTime.After(sorted[j].CreateTime) })
	c.WriteArray(len(sorted))
	for i := range sorted {
		t := &sorted[i]
		c.WriteArray(2 * len(taskFields))
		for _, f := range taskFields {
			c.WriteBulkString(f.name)
			switch v := f.get(t).(type) {
			case int64:
				c.WriteInt64(v)
			case string:
				c.WriteBulkString(v)
			}
		}
	}
}

// slotRanges writes a slot spec ("0-5460,6000") as 8.4 does: "0-5460
// 6000-6000". A spec that does not parse is passed on as it is.
func slotRanges(spec string) string {
	set, err := slots.Parse(spec)
	if err != nil {
		return spec
	}
	rs := set.Ranges()
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%d-%d", r.Start, r.End)
	}
	return strings.Join(parts, " ")
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
