package sidecar

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Records read back at a start are acted on only if they are this node's
// and make sense; the others are skipped, logged, and never reach fix.
func TestCheckRecord(t *testing.T) {
	const me, src = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678", "0123456789abcdef0123456789abcdef01234567"
	good := Task{ID: "3f2a9c01bd7e", Slots: "0-99,200", Source: src, Dest: me, State: StateRunning}
	for _, tc := range []struct {
		name   string
		change func(*Task)
		want   string // "" for a usable record
	}{
		{"good", func(*Task) {}, ""},
		{"ended", func(t *Task) { t.State = StateCompleted }, ""},
		{"another node's", func(t *Task) { t.Dest = src }, "not into this node"},
		{"no dest", func(t *Task) { t.Dest = "" }, "not into this node"},
		{"slot out of range", func(t *Task) { t.Slots = "16000-16384" }, "out of range"},
		{"slots unreadable", func(t *Task) { t.Slots = "0-99;flushall" }, "not a slot number"},
		{"no slots", func(t *Task) { t.Slots = "" }, "empty"},
		{"unknown state", func(t *Task) { t.State = "paused" }, "unknown state"},
		{"no state", func(t *Task) { t.State = "" }, "unknown state"},
		{"source not an ID", func(t *Task) { t.Source = "127.0.0.1:7001" }, "not a node ID"},
		{"source upper case", func(t *Task) { t.Source = strings.ToUpper(src) }, "not a node ID"},
		{"no source", func(t *Task) { t.Source = "" }, "not a node ID"},
		{"source is this node", func(t *Task) { t.Source = me }, "source is this node"},
		{"no ID", func(t *Task) { t.ID = "" }, "not one token"},
		{"ID with a dot", func(t *Task) { t.ID = "a.b" }, "not one token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := good
			tc.change(&rec)
			err := CheckRecord(rec, me)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrBadRecord saying %q", err, tc.want)
			}
			var log bytes.Buffer
			kept := Usable([]Task{good, rec}, me, slog.New(slog.NewTextHandler(&log, nil)))
			if len(kept) != 1 || kept[0].ID != good.ID || !strings.Contains(log.String(), "task record skipped") {
				t.Fatalf("Usable kept %+v; log %s", kept, log.String())
			}
		})
	}
}
