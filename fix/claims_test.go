package fix

import (
	"strings"
	"testing"
)

// A master that could not be read is named in a note even when no slot
// of the others points at it: its own marks and keys (an import it had
// under way, orphans) were never seen, and "nothing to repair" would not be
// true of it. The repairs among the masters that were read are still
// planned.
func TestClaimsFixPlanNamesAMasterItCouldNotRead(t *testing.T) {
	owners := cl{owners: map[string]string{"a": "0-5460", "b": "5461-10922", "c": "10923-16383", "d": ""}}
	states := map[string]*NodeState{
		"a": st(t, "a", owners, "", keysIn("0-5460", 1)),
		"b": st(t, "b", owners, "[0-<-a]", merge(keysIn("5461-10922", 1), keysIn("0", 2))),
		"c": st(t, "c", owners, "", keysIn("10923-16383", 1)),
		"d": down("127.0.0.1:7003"),
	}
	p := PlanRepairs(states, nil)
	expect(t, p, "rollback b 0 a")
	if len(p.Notes) != 1 || !strings.HasPrefix(p.Notes[0], "127.0.0.1:7003 could not be read (connection refused): ") ||
		!strings.Contains(p.Notes[0], "run fix again once it is back") {
		t.Fatalf("notes: %q", p.Notes)
	}
	// Every master read: no note.
	states["d"] = st(t, "d", owners, "", nil)
	if p := PlanRepairs(states, nil); len(p.Notes) != 0 {
		t.Fatalf("notes with every master read: %q", p.Notes)
	}
}
