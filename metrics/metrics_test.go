package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/sidecar"
)

func scrape(t *testing.T, m *Metrics, path string, healthy error) (int, string) {
	t.Helper()
	srv := httptest.NewServer(m.Handler(func(context.Context) error { return healthy }))
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
	m := New(func() []sidecar.Task { return tasks }, func() int64 { return lost })
	run := sidecar.Task{ID: "a", State: sidecar.StateRunning}
	for _, step := range []struct{ keys, bytes, lag int64 }{{10, 100, 500}, {25, 300, 40}, {25, 300, 0}} {
		run.KeysCopied, run.BytesCopied, run.LagBytes = step.keys, step.bytes, step.lag
		m.Observe(run)
	}
	tasks = []sidecar.Task{run, {ID: "b", State: sidecar.StateFailed}}
	_, body := scrape(t, m, "/metrics", nil)
	for _, want := range []string{
		"slotmover_keys_copied_total 25", "slotmover_bytes_copied_total 300", `slotmover_lag_bytes{task="a"} 0`,
		`slotmover_tasks{state="running"} 1`, `slotmover_tasks{state="failed"} 1`, `slotmover_tasks{state="completed"} 0`,
		"slotmover_nats_lost_total 3",
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
	if strings.Contains(body, `slotmover_lag_bytes{task="a"}`) {
		t.Error("an ended task keeps its lag gauge")
	}
	if code, _ := scrape(t, m, "/healthz", nil); code != 200 {
		t.Errorf("healthz while healthy: %d", code)
	}
	if code, body := scrape(t, m, "/healthz", errors.New("node down")); code != 503 || !strings.Contains(body, "node down") {
		t.Errorf("healthz while unhealthy: %d %q", code, body)
	}
}
