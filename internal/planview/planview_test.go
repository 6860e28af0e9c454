package planview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/planner"
	"github.com/slotmover/slotmover/rollout"
)

var results = []rollout.Outcome{
	{N: 1, Move: planner.Move{Source: "10.0.0.1:7000", Target: "10.0.0.4:7000", Slots: "0-1364"}, Result: mover.ResultMoved, Keys: 9000, Total: 2100, Pause: 3.2},
	{N: 2, Move: planner.Move{Source: "10.0.0.2:7000", Target: "10.0.0.4:7000", Slots: "5461-6825"}, Result: mover.ResultStuck, Task: "t2",
		Err: "claim failed: connection reset", Repair: []string{"slotmover fix --cluster 10.0.0.2:7000 --slots 5461-6825"}},
}

// The table names every move and its result; a move that did not move is
// followed by its error and the command that repairs it, and the last
// line counts the moves that moved.
func TestPrint(t *testing.T) {
	var out bytes.Buffer
	Print(&out, results, false)
	got := out.String()
	for _, want := range []string{
		"move  source",
		"1     10.0.0.1:7000  10.0.0.4:7000  0-1364     moved",
		"move 2 (10.0.0.2:7000 → 10.0.0.4:7000, slots 5461-6825, task t2): stuck: claim failed: connection reset\n",
		"  to repair:\n    slotmover fix --cluster 10.0.0.2:7000 --slots 5461-6825\n",
		"1 of 2 moves moved\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	Print(&out, results[:1], true)
	if got := out.String(); !strings.Contains(got, "keys expected") || !strings.HasSuffix(got, "dry run: nothing changed\n") {
		t.Errorf("dry run:\n%s", got)
	}
}

// apply --json: every outcome, and the count of those that moved.
func TestPrintJSON(t *testing.T) {
	var out bytes.Buffer
	PrintJSON(&out, results, false)
	var rep struct {
		DryRun bool              `json:"dry_run"`
		Moved  int               `json:"moved"`
		Moves  []rollout.Outcome `json:"moves"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.DryRun || rep.Moved != 1 || len(rep.Moves) != 2 || rep.Moves[1].Repair[0] != results[1].Repair[0] {
		t.Fatalf("report: %+v", rep)
	}
}
