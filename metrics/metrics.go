// Package metrics exposes a sidecar's tasks to Prometheus, on /metrics,
// with /healthz (liveness), /readyz (readiness) and, when asked, Go's
// profiles on /debug/pprof/ beside it.
package metrics

import (
	"context"
	"net/http"
	"net/http/pprof"
	"runtime"
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
	throttled, paused    prometheus.Counter
	lag, held            *prometheus.GaugeVec
	pause                prometheus.Histogram
	ended                *prometheus.CounterVec

	mu   sync.Mutex
	seen map[string]sidecar.Task // the last record of each running task
}

// Sources are what the metrics read at each scrape.
type Sources struct {
	Tasks   func() []sidecar.Task
	Version string // slotmover_build_info's version label
	// Without NATS, both nil: the events and records NATS could not
	// take, and whether the connection is up.
	NATSLost      func() int64
	NATSConnected func() bool
}

// New registers the collectors.
func New(src Sources) *Metrics {
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
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotmover_throttled_seconds_total", Help: "Time imports were held because the servers were over their impact budget.",
		}),
		paused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slotmover_paused_seconds_total", Help: "Time imports were held paused by an operator.",
		}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "slotmover_held", Help: "1 while a running task's copy is held (over budget, paused), per task.",
		}, []string{"task"}),
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
	byPhase := prometheus.NewDesc("slotmover_running_tasks", "Running tasks, by the mover's phase (those with none left out).", []string{"phase"}, nil)
	m.reg.MustRegister(m.keys, m.bytes, m.orphans, m.throttled, m.paused, m.lag, m.held, m.pause, m.ended,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectorFunc{[]*prometheus.Desc{byState, byPhase}, func(ch chan<- prometheus.Metric) {
			states := map[string]int{sidecar.StateRunning: 0, sidecar.StateCompleted: 0, sidecar.StateFailed: 0, sidecar.StateCanceled: 0}
			phases := map[string]int{}
			for _, t := range src.Tasks() {
				states[t.State]++
				if !t.Over() {
					phases[t.Phase]++
				}
			}
			for state, n := range states {
				ch <- prometheus.MustNewConstMetric(byState, prometheus.GaugeValue, float64(n), state)
			}
			for phase, n := range phases {
				ch <- prometheus.MustNewConstMetric(byPhase, prometheus.GaugeValue, float64(n), phase)
			}
		}})
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slotmover_build_info", Help: "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": src.Version, "goversion": runtime.Version()},
	}, func() float64 { return 1 }))
	if src.NATSLost != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "slotmover_nats_lost_total", Help: "Task events and records that NATS could not take.",
		}, func() float64 { return float64(src.NATSLost()) }))
	}
	if src.NATSConnected != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "slotmover_nats_connected", Help: "1 while the connection to NATS is up.",
		}, func() float64 {
			if src.NATSConnected() {
				return 1
			}
			return 0
		}))
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
	m.throttled.Add(float64(max(t.ThrottledMS-prev.ThrottledMS, 0)) / 1000)
	m.paused.Add(float64(max(t.PausedMS-prev.PausedMS, 0)) / 1000)
	if !t.Over() {
		m.lag.WithLabelValues(t.ID).Set(float64(t.LagBytes))
		held := 0.0
		if len(t.Holding) > 0 {
			held = 1
		}
		m.held.WithLabelValues(t.ID).Set(held)
		return
	}
	m.lag.DeleteLabelValues(t.ID)
	m.held.DeleteLabelValues(t.ID)
	m.ended.WithLabelValues(t.State, t.Result).Inc()
	if t.WritePauseMS > 0 {
		m.pause.Observe(t.WritePauseMS / 1000)
	}
}

// Handler serves /metrics; /healthz, 200 for as long as the process
// serves it (a liveness probe: a blip of Redis or NATS must not restart
// a sidecar in the middle of a move); and /readyz, 200 when ready returns
// nil, else 503 with its error (a readiness probe). With profiles, it
// also serves Go's profiles on /debug/pprof/ (where a moving sidecar
// spends its CPU); they are off by default, as a profile costs CPU while
// it runs and shows the program's internals. The command line is left
// out: it may hold a password given as a flag.
func (m *Metrics) Handler(ready func(context.Context) error, profiles bool) http.Handler {
	mux := http.NewServeMux()
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// collectorFunc is a collector of metric families computed at each scrape.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
