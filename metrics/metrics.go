// Package metrics exposes a sidecar's tasks to Prometheus, on /metrics,
// with /healthz beside it.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/slotmover/slotmover/sidecar"
)

// Metrics follows the tasks' records (Observe) and reads the task table
// at each scrape (tasks by state).
type Metrics struct {
	reg *prometheus.Registry

	keys, bytes, orphans prometheus.Counter
	lag                  *prometheus.GaugeVec
	pause                prometheus.Histogram
	ended                *prometheus.CounterVec

	mu   sync.Mutex
	seen map[string]sidecar.Task // the last record of each running task
}

// New registers the collectors. status lists the tasks; lost counts the
// events and records NATS could not take (nil without NATS).
func New(status func() []sidecar.Task, lost func() int64) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		keys: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotmover_keys_copied_total", Help: "Keys copied to this node by its imports.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotmover_bytes_copied_total", Help: "Bytes of keys copied to this node by its imports.",
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotmover_orphans_removed_total", Help: "Keys removed from sources after the switch (cleanup progress).",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slotmover_lag_bytes", Help: "Bytes of the source's stream not yet applied, per running task.",
		}, []string{"task"}),
		pause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "slotmover_write_pause_seconds", Help: "Write pause of each task's last cutover on its source.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slotmover_tasks_ended_total", Help: "Tasks ended, by state and the mover's result (failures by kind).",
		}, []string{"state", "result"}),
		seen: map[string]sidecar.Task{},
	}
	byState := prometheus.NewDesc("slotmover_tasks", "Tasks known to this sidecar, by state.", []string{"state"}, nil)
	m.reg.MustRegister(m.keys, m.bytes, m.orphans, m.lag, m.pause, m.ended,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectorFunc{byState, func(ch chan<- prometheus.Metric) {
			counts := map[string]int{sidecar.StateRunning: 0, sidecar.StateCompleted: 0, sidecar.StateFailed: 0, sidecar.StateCanceled: 0}
			for _, t := range status() {
				counts[t.State]++
			}
			for state, n := range counts {
				ch <- prometheus.MustNewConstMetric(byState, prometheus.GaugeValue, float64(n), state)
			}
		}})
	if lost != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slotmover_nats_lost_total", Help: "Task events and records that NATS could not take.",
		}, func() float64 { return float64(lost()) }))
	}
	return m
}

// Observe takes a task's new record (use it in the manager's OnChange).
func (m *Metrics) Observe(t sidecar.Task) {
	m.mu.Lock()
	prev := m.seen[t.ID]
	if t.Over() {
		delete(m.seen, t.ID)
	} else {
		m.seen[t.ID] = t
	}
	m.mu.Unlock()
	m.keys.Add(float64(max(t.KeysCopied-prev.KeysCopied, 0)))
	m.bytes.Add(float64(max(t.BytesCopied-prev.BytesCopied, 0)))
	m.orphans.Add(float64(max(t.OrphansRemoved-prev.OrphansRemoved, 0)))
	if !t.Over() {
		m.lag.WithLabelValues(t.ID).Set(float64(t.LagBytes))
		return
	}
	m.lag.DeleteLabelValues(t.ID)
	m.ended.WithLabelValues(t.State, t.Result).Inc()
	if t.WritePauseMS > 0 {
		m.pause.Observe(t.WritePauseMS / 1000)
	}
}

// Handler serves /metrics, and /healthz, which answers 200 while healthy
// (the local master answers) and 503 with the reason otherwise.
func (m *Metrics) Handler(healthy func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := healthy(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// collectorFunc is a collector of one metric family computed at each scrape.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
