package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/sidecar"
)

func scrape(t *testing.T, m *Metrics, path string, ready error) (int, string) {
	t.Helper()
	return get(t, m.Handler(func(context.Context) error { return ready }, false), path)
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Progress records add up, per task, to counters that only grow; the lag
// of a running task is a gauge that goes when it ends; an ended task's
// pause and result are counted once.
func TestObserve(t *testing.T) {
	var tasks []sidecar.Task
	var lost int64 = 3
	connected := true
	m := New(Sources{Tasks: func() []sidecar.Task { return tasks }, Version: "v9.9.9",
		NATSLost: func() int64 { return lost }, NATSConnected: func() bool { return connected }})
	run := sidecar.Task{ID: "a", State: sidecar.StateRunning}
	for _, step := range []struct {
		keys, bytes, lag, throttled int64
		holding                     []string
	}{{10, 100, 500, 0, nil}, {25, 300, 40, 1500, []string{"over budget"}}, {25, 300, 0, 2500, []string{"paused"}}} {
		run.KeysCopied, run.BytesCopied, run.LagBytes, run.ThrottledMS, run.Holding = step.keys, step.bytes, step.lag, step.throttled, step.holding
		m.Observe(run)
	}
	run.Phase = "claim"
	tasks = []sidecar.Task{run, {ID: "b", State: sidecar.StateFailed, Phase: "failed"}}
	_, body := scrape(t, m, "/metrics", nil)
	for _, want := range []string{
		"slotmover_keys_copied_total 25", "slotmover_bytes_copied_total 300", `slotmover_lag_bytes{task="a"} 0`,
		"slotmover_throttled_seconds_total 2.5", `slotmover_held{task="a"} 1`,
		`slotmover_tasks{state="running"} 1`, `slotmover_tasks{state="failed"} 1`, `slotmover_tasks{state="completed"} 0`,
		`slotmover_running_tasks{phase="claim"} 1`,
		"slotmover_nats_lost_total 3", "slotmover_nats_connected 1",
		fmt.Sprintf(`slotmover_build_info{goversion=%q,version="v9.9.9"} 1`, runtime.Version()),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no %q in the scrape", want)
		}
	}
	run.State, run.Result, run.WritePauseMS, run.OrphansRemoved = sidecar.StateCompleted, "moved", 4.5, 25
	m.Observe(run)
	_, body = scrape(t, m, "/metrics", nil)
	for _, want := range []string{
		"slotmover_write_pause_seconds_count 1", "slotmover_write_pause_seconds_sum 0.0045",
		`slotmover_tasks_ended_total{result="moved",state="completed"} 1`, "slotmover_orphans_removed_total 25",
		"slotmover_keys_copied_total 25",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("after the end, no %q in the scrape", want)
		}
	}
	if strings.Contains(body, `slotmover_running_tasks{phase="failed"}`) {
		t.Error("an ended task counted among the running by its phase")
	}
	if strings.Contains(body, `slotmover_lag_bytes{task="a"}`) || strings.Contains(body, `slotmover_held{task="a"}`) {
		t.Error("an ended task keeps its lag or held gauge")
	}
	connected = false
	if _, body = scrape(t, m, "/metrics", nil); !strings.Contains(body, "slotmover_nats_connected 0\n") {
		t.Error("NATS down, and slotmover_nats_connected is not 0")
	}
	for _, ready := range []error{nil, errors.New("NATS not connected")} {
		if code, _ := scrape(t, m, "/healthz", ready); code != 200 {
			t.Errorf("healthz (ready: %v): %d, want 200 while the process serves", ready, code)
		}
	}
	if code, _ := scrape(t, m, "/readyz", nil); code != 200 {
		t.Errorf("readyz while ready: %d", code)
	}
	if code, body := scrape(t, m, "/readyz", errors.New("NATS not connected")); code != 503 || !strings.Contains(body, "NATS not connected") {
		t.Errorf("readyz while unready: %d %q", code, body)
	}
}

// Go's profiles are served only when asked for: they cost CPU while they
// run and show the program's internals.
func TestProfiles(t *testing.T) {
	m := New(Sources{Tasks: func() []sidecar.Task { return nil }, Version: "v9.9.9"})
	ready := func(context.Context) error { return nil }
	if code, _ := get(t, m.Handler(ready, false), "/debug/pprof/goroutine?debug=1"); code != http.StatusNotFound {
		t.Errorf("profiles off: /debug/pprof/goroutine answered %d, want 404", code)
	}
	code, body := get(t, m.Handler(ready, true), "/debug/pprof/goroutine?debug=1")
	if code != 200 || !strings.Contains(body, "TestProfiles") {
		t.Errorf("profiles on: /debug/pprof/goroutine answered %d without this test's goroutine: %.200q", code, body)
	}
	if code, _ := get(t, m.Handler(ready, true), "/metrics"); code != 200 {
		t.Errorf("profiles on: /metrics answered %d", code)
	}
}
