package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// JournalTTL is how long the journal keeps a task after it ended, as the
// NATS bucket does.
const JournalTTL = 30 * 24 * time.Hour

// ErrStateLocked is OpenJournal's refusal when another live process holds
// the node's state: a second sidecar for the same node.
var ErrStateLocked = errors.New("another sidecar holds this node's state")

// Journal keeps a sidecar's task records in its state directory, so that
// a restart finds the tasks a dead sidecar left without NATS: the file
// <node-id>.tasks.json, rewritten whole (a temporary file, fsync, rename,
// fsync of the directory) whenever a task starts or changes state or
// phase. Progress counters alone do not cost a write; they are saved with
// the next one.
//
// The journal also locks the node: <node-id>.lock is held with flock for
// the process's life (the kernel drops it when the process dies, however
// it dies), so that two sidecars sharing a state directory never repair
// or run tasks of one node at once.
type Journal struct {
	dir, path string
	lock      *os.File

	mu    sync.Mutex
	recs  map[string]Task
	order []string // task IDs, oldest first
}

// OpenJournal locks nodeID's state in dir (created if missing) and reads
// its records; holder says who locks it (shown to a second sidecar that
// finds it locked: ErrStateLocked). An unreadable records file refuses
// the open: the tasks it would show cannot be repaired from it.
func OpenJournal(dir, nodeID, holder string) (*Journal, error) {
	if !isNodeID(nodeID) {
		return nil, fmt.Errorf("state of node %q: not a node ID", nodeID)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	lockPath := filepath.Join(dir, nodeID+".lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		other, _ := os.ReadFile(lockPath)
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (it locks %s)", ErrStateLocked, strings.TrimSpace(string(other)), lockPath)
		}
		return nil, fmt.Errorf("state lock %s: %w", lockPath, err)
	}
	// Who holds the lock is only shown to a second sidecar: a failed
	// write of it does not matter.
	if lock.Truncate(0) == nil {
		lock.WriteAt([]byte(holder+"\n"), 0)
	}
	j := &Journal{dir: dir, path: filepath.Join(dir, nodeID+".tasks.json"), lock: lock, recs: map[string]Task{}}
	data, err := os.ReadFile(j.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return j, nil
	case err != nil:
		lock.Close()
		return nil, fmt.Errorf("task records: %w", err)
	}
	var recs []Task
	if err := json.Unmarshal(data, &recs); err != nil {
		lock.Close()
		return nil, fmt.Errorf("task records %s unreadable (check its tasks with slotmover fix, then move it aside): %w", j.path, err)
	}
	for _, t := range recs {
		if t.Over() && !t.EndTime.IsZero() && time.Since(t.EndTime) > JournalTTL {
			continue
		}
		if _, ok := j.recs[t.ID]; !ok {
			j.order = append(j.order, t.ID)
		}
		j.recs[t.ID] = t
	}
	return j, nil
}

// Path is the records file.
func (j *Journal) Path() string { return j.path }

// Records returns the records read at the open and kept since, oldest
// first.
func (j *Journal) Records() []Task {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]Task, 0, len(j.order))
	for _, id := range j.order {
		out = append(out, j.recs[id])
	}
	return out
}

// Keep records t, and saves the file if t is new or its state, phase,
// result or error changed. Calls for one task must come in order (as
// OnChange's do).
func (j *Journal) Keep(t Task) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	old, ok := j.recs[t.ID]
	if !ok {
		j.order = append(j.order, t.ID)
	}
	j.recs[t.ID] = t
	if ok && old.State == t.State && old.Phase == t.Phase && old.Result == t.Result && old.LastError == t.LastError {
		return nil
	}
	return j.save()
}

// save writes every record to the file atomically; j.mu is held.
func (j *Journal) save() error {
	recs := make([]Task, 0, len(j.order))
	for _, id := range j.order {
		recs = append(recs, j.recs[id])
	}
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return fmt.Errorf("task records: %w", err)
	}
	tmp, err := os.CreateTemp(j.dir, filepath.Base(j.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("task records: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), j.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("task records %s: %w", j.path, err)
	}
	// The rename is durable once the directory is.
	d, err := os.Open(j.dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("task records %s: sync the directory: %w", j.path, err)
	}
	return nil
}

// Close releases the node's lock.
func (j *Journal) Close() error {
	return j.lock.Close()
}
