// Package deploy holds the files that install slotmover (a systemd unit,
// a Kubernetes example; the Dockerfile is at the repository's root) and
// the tests that keep them true to the binary.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/slotmover/slotmover/daemon/config"
)

// unitValues reads the values of key in a unit file.
func unitValues(t *testing.T, unit []byte, key string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k == key {
			out = append(out, v)
		}
	}
	return out
}

// The unit runs `slotmover serve` with a configuration and a state
// directory the sidecar uses, gives it longer than its shutdown grace to
// stop, and passes systemd's own check where systemd-analyze is at hand.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("systemd/slotmover.service")
	if err != nil {
		t.Fatal(err)
	}
	exec_ := unitValues(t, unit, "ExecStart")
	if len(exec_) != 1 {
		t.Fatalf("ExecStart: %q", exec_)
	}
	args := strings.Fields(exec_[0])
	if len(args) < 2 || filepath.Base(args[0]) != "slotmover" || args[1] != "serve" {
		t.Fatalf("ExecStart %q: want slotmover serve …", exec_[0])
	}
	// The flags parse, and with $STATE_DIRECTORY set (as StateDirectory=
	// sets it) and no state.dir, the records go there.
	cfgFile := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(cfgFile, []byte("node:\n  address: 127.0.0.1:6379\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := append([]string(nil), args[2:]...)
	for i, a := range flags {
		if a == "/etc/slotmover/sidecar.yaml" {
			flags[i] = cfgFile
		}
	}
	env := map[string]string{"STATE_DIRECTORY": "/var/lib/slotmover"}
	c, err := config.Load(flags, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("slotmover %s: %v", strings.Join(args[1:], " "), err)
	}
	if dir, err := c.State.DirOrDefault(func(k string) string { return env[k] }); err != nil || dir != "/var/lib/slotmover" {
		t.Errorf("state directory %q (%v), want systemd's /var/lib/slotmover", dir, err)
	}
	if got := unitValues(t, unit, "StateDirectory"); len(got) != 1 || got[0] != "slotmover" {
		t.Errorf("StateDirectory %q, want slotmover", got)
	}
	stop := unitValues(t, unit, "TimeoutStopSec")
	if d, err := time.ParseDuration(strings.Join(stop, "") + "s"); err != nil || d <= 2*time.Minute {
		t.Errorf("TimeoutStopSec %q: want more than the sidecar's 2 min shutdown grace", stop)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze: the unit's syntax is not checked")
	}
	// verify wants the command to exist: the same unit, ExecStart on a
	// binary that does.
	dir := t.TempDir()
	copy := bytes.Replace(unit, []byte(args[0]), []byte("/bin/true"), 1)
	path := filepath.Join(dir, "slotmover.service")
	if err := os.WriteFile(path, copy, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// Outside a booted systemd (a container, CI) verify cannot reach the
	// manager; only what it says of the file counts.
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "slotmover.service") {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(lines, "\n"))
	}
}

type probe struct {
	HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
}

type container struct {
	Name  string
	Args  []string
	Env   []struct{ Name, Value string }
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	LivenessProbe  probe `yaml:"livenessProbe"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func (c container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// The Kubernetes example's sidecar loads: its configuration from the
// ConfigMap with its environment, the master it serves in the same pod,
// its ports and probes where the configuration puts them, its records on
// a volume, and time enough to stop.
func TestKubernetesExample(t *testing.T) {
	f, err := os.Open("kubernetes/redis-with-slotmover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cm struct {
		Kind string
		Data map[string]string
	}
	var sts struct {
		Kind string
		Spec struct {
			Template struct {
				Spec struct {
					TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
					Containers                    []container
				}
			}
		}
	}
	dec := yaml.NewDecoder(f)
	for _, doc := range []any{&cm, &sts} {
		if err := dec.Decode(doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		t.Fatalf("a third document, or bad YAML: %v", err)
	}
	if cm.Kind != "ConfigMap" || sts.Kind != "StatefulSet" {
		t.Fatalf("kinds %q, %q", cm.Kind, sts.Kind)
	}
	pod := sts.Spec.Template.Spec
	var redis, side container
	for _, c := range pod.Containers {
		switch c.Name {
		case "redis":
			redis = c
		case "slotmover":
			side = c
		}
	}
	if len(side.Args) == 0 || side.Args[0] != "serve" {
		t.Fatalf("the sidecar's args %q: want serve", side.Args)
	}
	// The ConfigMap's file, its secrets' paths in a folder of the test.
	dir := t.TempDir()
	for _, name := range []string{"redis-password", "admin-password"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := strings.ReplaceAll(cm.Data["sidecar.yaml"], "/etc/slotmover/secrets/", dir+"/")
	cfgFile := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range side.Env {
		env[e.Name] = e.Value
	}
	env["SLOTMOVER_CONFIG"] = cfgFile
	env["SLOTMOVER_NATS_ALIAS"] = "redis-0" // from the pod's name
	c, err := config.Load(side.Args[1:], func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the sidecar's configuration: %v", err)
	}
	portOf := func(addr string) string { _, p, _ := strings.Cut(addr, ":"); return p }
	switch {
	case portOf(c.Node.Address) != "6379" || redis.port("redis") != 6379:
		t.Errorf("the sidecar serves %s, the redis container listens on %d", c.Node.Address, redis.port("redis"))
	case c.Node.Password != "secret" || c.Admin.Password != "secret":
		t.Errorf("passwords not read from the secret's files")
	case portOf(c.Admin.Listen) != "7100" || side.port("admin") != 7100, portOf(c.Metrics.Listen) != "7101" || side.port("metrics") != 7101:
		t.Errorf("admin %s and metrics %s, container ports %+v", c.Admin.Listen, c.Metrics.Listen, side.Ports)
	case side.LivenessProbe.HTTPGet.Path != "/healthz" || side.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		side.LivenessProbe.HTTPGet.Port != "metrics" || side.ReadinessProbe.HTTPGet.Port != "metrics":
		t.Errorf("probes %+v, %+v: want /healthz and /readyz on the metrics port", side.LivenessProbe, side.ReadinessProbe)
	case pod.TerminationGracePeriodSeconds <= 120:
		t.Errorf("terminationGracePeriodSeconds %d: want more than the sidecar's 2 min shutdown grace", pod.TerminationGracePeriodSeconds)
	}
	onVolume := false
	for _, m := range side.VolumeMounts {
		onVolume = onVolume || m.Name == "state" && m.MountPath == c.State.Dir
	}
	if !onVolume {
		t.Errorf("the state directory %s is not on the state volume (%+v)", c.State.Dir, side.VolumeMounts)
	}
}

// The image builds, where a container engine runs, and its binary says
// its version.
func TestContainerImage(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker: the image is not built")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info").CombinedOutput(); err != nil {
		t.Skipf("no container engine running (docker info: %v): the image is not built\n%s", err, firstLine(out))
	}
	if testing.Short() {
		t.Skip("-short: the image is not built")
	}
	// A machine without a registry cannot build it, whatever the file.
	for _, base := range []string{"golang:1.26", "gcr.io/distroless/static-debian12:nonroot"} {
		if exec.CommandContext(ctx, docker, "image", "inspect", base).Run() == nil {
			continue
		}
		if out, err := exec.CommandContext(ctx, docker, "pull", base).CombinedOutput(); err != nil {
			t.Skipf("the base image %s cannot be pulled (%v): the image is not built\n%s", base, err, firstLine(out))
		}
	}
	tag := "slotmover-test:" + strings.ToLower(t.Name())
	build := exec.CommandContext(ctx, docker, "build", "--build-arg", "VERSION=v0.0.0-test", "-t", tag, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	defer exec.Command(docker, "rmi", tag).Run()
	out, err := exec.CommandContext(ctx, docker, "run", "--rm", tag, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "slotmover v0.0.0-test ") {
		t.Fatalf("slotmover version in the image: %q, %v", out, err)
	}
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return line
}

// scripts/release.sh builds the release: an archive per architecture,
// each holding a static binary that reports the release's version, and
// checksums that sha256sum accepts. The amd64 binary runs here; the arm64
// one is checked by its ELF header.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	out := t.TempDir()
	const version = "v9.8.7-test"
	cmd := exec.Command("bash", "../scripts/release.sh", version, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, b)
	}
	check := exec.Command("sha256sum", "-c", "checksums.txt")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, b)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		name := "slotmover_" + version + "_linux_" + arch
		dir := t.TempDir()
		if b, err := exec.Command("tar", "-xzf", filepath.Join(out, name+".tar.gz"), "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("untar %s: %v\n%s", name, err, b)
		}
		for _, f := range []string{"README.md", "docs/operations.md", "deploy/systemd/slotmover.service", "configs/production.yaml"} {
			if _, err := os.Stat(filepath.Join(dir, name, f)); err != nil {
				t.Errorf("%s lacks %s: %v", name, f, err)
			}
		}
		bin := filepath.Join(dir, name, "slotmover")
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
		if f.Machine != machine {
			t.Errorf("%s: an ELF for %v, want %v", name, f.Machine, machine)
		}
		if _, err := f.DynamicSymbols(); err == nil {
			t.Errorf("%s: dynamically linked; want a static binary", name)
		}
		f.Close()
		if arch == "amd64" {
			b, err := exec.Command(bin, "version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(b), "slotmover "+version+" ") {
				t.Errorf("%s version: %v: %q", name, err, b)
			}
		}
	}
}
