package metrics

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/slotmover/slotmover/sidecar"
)

// The shipped alert rules and Grafana dashboard query only metrics this
// package exports, and every rule and panel has a query; promtool, where
// installed, accepts the rules.
func TestAlertsAndDashboardUseExportedMetrics(t *testing.T) {
	running := []sidecar.Task{{ID: "a", State: sidecar.StateRunning, Phase: "catch-up"}}
	m := New(Sources{Tasks: func() []sidecar.Task { return running }, Version: "v1.0.0",
		NATSLost: func() int64 { return 0 }, NATSConnected: func() bool { return true }})
	// Labelled families appear once they have a child.
	m.Observe(sidecar.Task{ID: "a", State: sidecar.StateRunning, LagBytes: 1})
	m.Observe(sidecar.Task{ID: "b", State: sidecar.StateCompleted, Result: "moved", WritePauseMS: 3})
	_, scrapeBody := scrape(t, m, "/metrics", nil)
	exported := map[string]bool{}
	for _, line := range strings.Split(scrapeBody, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}

	rulesText, err := os.ReadFile("../configs/monitoring/prometheus-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(rulesText, &rules); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("a rule without alert or expr: %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	dashText, err := os.ReadFile("../configs/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dashText, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d queries read", len(exprs))
	}
	name := regexp.MustCompile(`slotmover_[a-z_]+`)
	for _, e := range exprs {
		for _, n := range name.FindAllString(e, -1) {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%s is not a metric slotmover exports (in %q)", n, e)
			}
		}
	}

	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", "../configs/monitoring/prometheus-alerts.yaml").CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool is not installed (Debian: the prometheus package): the rules' syntax is not checked")
	}
}
