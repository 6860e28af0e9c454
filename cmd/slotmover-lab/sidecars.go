package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/slotmover/slotmover/daemon"
	"github.com/slotmover/slotmover/daemon/config"
	"github.com/slotmover/slotmover/internal/command"
)

// sidecars are sidecars running in this process; stop ends them.
type sidecars struct {
	list   []sidecarAt
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// sidecarAt is one of them: its master, its NATS alias, where it serves
// and logs.
type sidecarAt struct {
	node, alias, admin, metrics, log string
}

func (s *sidecars) stop() {
	s.cancel()
	s.wg.Wait()
}

// sidecarFiles are the i-th (from 0) local sidecar's NATS alias, state
// directory and log file in dir.
func sidecarFiles(dir string, i int) (alias, state, log string) {
	return fmt.Sprintf("master-%d", i+1), filepath.Join(dir, fmt.Sprintf("sidecar-%d-state", i+1)), filepath.Join(dir, fmt.Sprintf("sidecar-%d.log", i+1))
}

// startSidecars runs a sidecar beside each of nodes, in this process, as
// `slotmover serve` would with NATS at natsURL (aliases master-1, …), each
// logging to a file in dir, and waits until each serves. Stop the result,
// also after an error.
func startSidecars(natsURL string, nodes []string, dir string) (*sidecars, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sc := &sidecars{cancel: cancel}
	type started struct {
		i              int
		admin, metrics string
		err            error
	}
	ready := make(chan started, len(nodes))
	for i, node := range nodes {
		cfg := config.Defaults()
		cfg.Node.Address = node
		cfg.Admin.Listen, cfg.Metrics.Listen = "127.0.0.1:0", "127.0.0.1:0"
		cfg.NATS.Servers = []string{natsURL}
		alias, state, logPath := sidecarFiles(dir, i)
		cfg.NATS.Alias, cfg.State.Dir = alias, state
		f, err := os.Create(logPath)
		if err != nil {
			return sc, err
		}
		sc.list = append(sc.list, sidecarAt{node: node, alias: cfg.NATS.Alias, log: logPath})
		log := slog.New(slog.NewTextHandler(f, nil))
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			defer f.Close()
			err := daemon.Serve(ctx, cfg, log, daemon.Options{Version: command.Version(version),
				Ready: func(admin, metrics string) { ready <- started{i: i, admin: admin, metrics: metrics} }})
			if err != nil {
				ready <- started{i: i, err: err}
			}
		}()
	}
	deadline := time.After(30 * time.Second)
	for range nodes {
		select {
		case s := <-ready:
			if s.err != nil {
				return sc, fmt.Errorf("sidecar of %s: %w", sc.list[s.i].node, s.err)
			}
			sc.list[s.i].admin, sc.list[s.i].metrics = s.admin, s.metrics
		case <-deadline:
			return sc, errors.New("the sidecars did not start within 30 s")
		}
	}
	return sc, nil
}

// sidecarProcs are sidecars running as processes of their own, as in
// production: their work is not this process's.
type sidecarProcs struct {
	cmds []*exec.Cmd
	done []chan struct{} // closed when the process has been waited for
}

// startSidecarProcs runs `exe serve` (exe: the slotmover binary) beside
// each of nodes with NATS at natsURL, each logging to a file in dir, and
// waits until each serves. Stop the result, also after an error.
func startSidecarProcs(exe, natsURL string, nodes []string, dir string) (*sidecarProcs, error) {
	sp := &sidecarProcs{}
	var logs []string
	for i, node := range nodes {
		alias, state, logPath := sidecarFiles(dir, i)
		f, err := os.Create(logPath)
		if err != nil {
			return sp, err
		}
		cmd := exec.Command(exe, "serve", "--node", node, "--nats", natsURL, "--nats-alias", alias,
			"--admin", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--state-dir", state)
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Start()
		f.Close() // the child has its own descriptor
		if err != nil {
			return sp, fmt.Errorf("start the sidecar of %s: %w", node, err)
		}
		done := make(chan struct{})
		go func() {
			cmd.Wait()
			close(done)
		}()
		sp.cmds, sp.done, logs = append(sp.cmds, cmd), append(sp.done, done), append(logs, logPath)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, logPath := range logs {
		for {
			b, _ := os.ReadFile(logPath)
			if bytes.Contains(b, []byte("msg=serving")) {
				break
			}
			select {
			case <-sp.done[i]:
				return sp, fmt.Errorf("the sidecar of %s exited: %s", nodes[i], bytes.TrimSpace(b))
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				return sp, fmt.Errorf("the sidecar of %s did not serve within 30 s (log %s)", nodes[i], logPath)
			}
		}
	}
	return sp, nil
}

// stop ends the sidecars as systemd would: SIGTERM, then SIGKILL after
// the shutdown grace.
func (sp *sidecarProcs) stop() {
	for _, cmd := range sp.cmds {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range sp.cmds {
		select {
		case <-sp.done[i]:
		case <-time.After(daemon.ShutdownGrace + 5*time.Second):
			cmd.Process.Kill()
			<-sp.done[i]
		}
	}
}

// findSlotmover returns the slotmover binary that runs the sidecars of
// the bench's fleet: given, else beside this executable, else on the PATH.
// The lab measures the binary an operator ships; it has no serve of its
// own.
func findSlotmover(given string) (string, error) {
	if given != "" {
		return exec.LookPath(given)
	}
	if exe, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(exe), "slotmover")); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("slotmover")
	if err != nil {
		return "", errors.New("the fleet's sidecars run as `slotmover serve`: no slotmover beside slotmover-lab or on the PATH " +
			"(go build -o DIR/ ./cmd/slotmover ./cmd/slotmover-lab, or --slotmover FILE)")
	}
	return p, nil
}
