package mover

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/cluster"
)

// view builds one master's CLUSTER NODES: owners maps node → its slot
// fields as that master sees them; me gets the marks.
func view(t *testing.T, me string, owners map[string]string, marks string) *cluster.Topology {
	t.Helper()
	var lines []string
	for i, id := range []string{"a", "b", "c"} {
		flags := "master"
		if id == me {
			flags = "myself,master"
		}
		line := fmt.Sprintf("%s 127.0.0.1:%d@1%d %s - 0 0 %d connected %s", id, 7000+i, 7000+i, flags, i+1, owners[id])
		if id == me {
			line += " " + marks
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	top, err := cluster.Parse(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// Every state a move can stop in, at once on three masters a, b, c:
// slots 0-9 were being imported by b (stopped in the snapshot), 10-19
// released by a to b but not claimed, 20-29 moved from a to b with a's
// cleanup stopped half-way (marks on), 40 moved from a to c with no cleanup
// at all, and 30 is a legacy migration from a to c.
func TestPlanRepairs(t *testing.T) {
	seen := func(aSlots string) map[string]string {
		return map[string]string{"a": aSlots, "b": "20-29 5000-9999", "c": "40 10000-16383"}
	}
	states := map[string]*NodeState{
		// a released 10-19 to b: in its own view b owns them.
		"a": {Top: view(t, "a", map[string]string{"a": "0-9 30-39 41-4999", "b": "10-29 5000-9999", "c": "40 10000-16383"},
			"[20-<-b] [21-<-b] [30->-c]"), Stray: map[uint16]int64{10: 3, 11: 1, 20: 5, 40: 2}},
		"b": {Top: view(t, "b", seen("0-19 30-39 41-4999"), "[5-<-a] [10-<-a] [11-<-a]"), Stray: map[uint16]int64{5: 7, 10: 3, 11: 1}},
		"c": {Top: view(t, "c", seen("0-19 30-39 41-4999"), "[30-<-a]"), Stray: map[uint16]int64{30: 4}},
	}
	repairs, notes := PlanRepairs(states)
	var got []string
	for _, r := range repairs {
		got = append(got, fmt.Sprintf("%s %s %s %s", r.Kind, r.NodeID, r.Slots, r.Owner))
	}
	want := []string{
		"claim b 10-11 ",    // a released them to b: finish forward first
		"rollback a 20-21 ", // a's cleanup marks (b owns): purge, clear
		"cleanup a 10-11 b", // a's orphans of the claimed slots
		"cleanup a 40 c",    // orphans of a finished move without cleanup
		"rollback b 5 ",     // b's import that a never released
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("repairs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "slot 30 is migrating") {
		t.Fatalf("notes: %q", notes)
	}
	// Nothing half-done: nothing to do.
	clean := map[string]*NodeState{
		"a": {Top: view(t, "a", seen("0-19 30-39 41-4999"), "")},
		"b": {Top: view(t, "b", seen("0-19 30-39 41-4999"), "")},
	}
	if repairs, notes := PlanRepairs(clean); len(repairs) != 0 || len(notes) != 0 {
		t.Fatalf("a clean cluster: %v, %q", repairs, notes)
	}
}
