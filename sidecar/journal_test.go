package sidecar

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// The journal keeps records across opens, writes the file on a change of
// state or phase (not on progress alone), drops tasks ended long ago, and
// refuses a second holder of the node's state while the first lives.
func TestJournal(t *testing.T) {
	const node = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	dir := t.TempDir()
	j, err := OpenJournal(dir, node, "pid 1 admin 127.0.0.1:7100")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenJournal(dir, node, "pid 2"); !errors.Is(err, ErrStateLocked) || !strings.Contains(err.Error(), "pid 1 admin 127.0.0.1:7100") {
		t.Fatalf("second open: %v, want ErrStateLocked naming the holder", err)
	}
	old := Task{ID: "old", State: StateCompleted, EndTime: time.Now().Add(-JournalTTL - time.Hour)}
	run := Task{ID: "run", State: StateRunning, Phase: "snapshot"}
	for _, rec := range []Task{old, run} {
		if err := j.Keep(rec); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := os.ReadFile(j.Path())
	if err != nil {
		t.Fatal(err)
	}
	run.KeysCopied = 42 // progress only: not written
	if err := j.Keep(run); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(j.Path()); string(now) != string(saved) {
		t.Fatal("a progress update rewrote the file")
	}
	run.Phase = "catchup"
	if err := j.Keep(run); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j2, err := OpenJournal(dir, node, "pid 2")
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	got := j2.Records()
	if len(got) != 1 || got[0].ID != "run" || got[0].Phase != "catchup" || got[0].KeysCopied != 42 {
		t.Fatalf("records after reopening: %+v", got)
	}
	if left, _ := os.ReadDir(dir); len(left) != 2 {
		t.Fatalf("the state directory holds %d files, want the lock and the records", len(left))
	}
	if err := os.WriteFile(j2.Path(), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	j2.Close()
	if _, err := OpenJournal(dir, node, "pid 3"); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("open of a torn file: %v", err)
	}
}
