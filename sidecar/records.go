package sidecar

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/slotmover/slotmover/slots"
)

// ErrBadRecord marks a task record read back from the bucket or the state
// file that must not be acted on.
var ErrBadRecord = errors.New("bad task record")

// CheckRecord says why a record read back at a start must not be acted on,
// or nil. Recover hands a running record to fix, which writes to the
// cluster: a record another node's sidecar wrote, or one altered or
// corrupted in the store, would repair slots this sidecar never touched.
// So a record must be this node's (Dest is nodeID), name a readable,
// non-empty slot spec (Parse keeps it within 0-16383), a known state, an
// ID that is a bucket key's last token, and a source that looks like a
// node ID other than this one.
func CheckRecord(t Task, nodeID string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %q: %s", ErrBadRecord, t.ID, fmt.Sprintf(format, args...))
	}
	if !isToken(t.ID) {
		return bad("the ID is not one token of letters, digits, - or _")
	}
	if t.Dest != nodeID {
		return bad("it imports into node %q, not into this node %s", t.Dest, nodeID)
	}
	if _, err := slots.Parse(t.Slots); err != nil {
		return bad("slots %q: %v", t.Slots, err)
	}
	switch t.State {
	case StateRunning, StateCompleted, StateFailed, StateCanceled:
	default:
		return bad("unknown state %q", t.State)
	}
	if !isNodeID(t.Source) {
		return bad("source %q is not a node ID (40 lowercase hex digits)", t.Source)
	}
	if t.Source == nodeID {
		return bad("its source is this node")
	}
	return nil
}

// Usable returns the records that pass CheckRecord, in order; the others
// are logged and skipped.
func Usable(recs []Task, nodeID string, log *slog.Logger) []Task {
	out := make([]Task, 0, len(recs))
	for _, t := range recs {
		if err := CheckRecord(t, nodeID); err != nil {
			log.Warn("task record skipped: not acted on nor shown", "task", t.ID, "error", err)
			continue
		}
		out = append(out, t)
	}
	return out
}

// isNodeID reports whether s is a cluster node ID: 40 lowercase hex digits.
func isNodeID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isToken reports whether s is a non-empty word of letters, digits, - and
// _ of at most 64 bytes: safe as a NATS subject token and a file name.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
