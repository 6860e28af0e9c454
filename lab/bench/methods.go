package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slotmover/slotmover/cutover"
	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/mover"
	"github.com/slotmover/slotmover/throttle"
)

// reshard runs redis-cli --cluster reshard for the plan and waits for it;
// its output goes to reshard.log in dir.
func reshard(ctx context.Context, cfg *Config, c *localcluster.Cluster, p plan, pipeline int, dir string) error {
	var from []string
	for _, sh := range p.Shares {
		from = append(from, c.IDs[sh.Source])
	}
	args := []string{"--cluster", "reshard", c.Nodes[targetNode].Addr,
		"--cluster-from", strings.Join(from, ","),
		"--cluster-to", c.IDs[targetNode],
		"--cluster-slots", strconv.Itoa(p.NumSlots),
		"--cluster-yes",
		"--cluster-pipeline", strconv.Itoa(pipeline)}
	return runRedisCli(ctx, cfg, filepath.Join(dir, "reshard.log"), args...)
}

// runRedisCli runs redis-cli with args, its output to logPath, and fails
// on a non-zero exit or an [ERR] line (it exits 0 after some failures).
func runRedisCli(ctx context.Context, cfg *Config, logPath string, args ...string) error {
	out, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("redis-cli log: %w", err)
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, cfg.RedisCli, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w (last output: %s)", cfg.RedisCli, strings.Join(args, " "), err, tail(logPath, 400))
	}
	if t := tail(logPath, 4000); strings.Contains(t, "[ERR]") {
		return fmt.Errorf("%s %s reported an error: %s", cfg.RedisCli, args[1], t)
	}
	return nil
}

// tail returns the last n bytes of a file, for error messages.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return strings.TrimSpace(string(bytes.ToValidUTF8(b, nil)))
}

// TaskResult is one slotmover task of a run.
type TaskResult struct {
	Summary mover.Summary `json:"summary"`
	Error   string        `json:"error,omitempty"`
}

// moveWithSlotmover runs one mover.Run per share, all at once, with the
// defaults of `slotmover move` but the snapshot path (mover.SnapshotAuto,
// SnapshotRDB or SnapshotKeys) and the budget; each task logs to its own
// file in dir.
func moveWithSlotmover(ctx context.Context, c *localcluster.Cluster, p plan, snapshot string, budget throttle.Budget, dir string) ([]TaskResult, error) {
	results := make([]TaskResult, len(p.Shares))
	errs := make([]error, len(p.Shares))
	var wg sync.WaitGroup
	for i, sh := range p.Shares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = runTask(ctx, c, sh, snapshot, budget, dir)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return results, fmt.Errorf("slotmover task %d (slots %s from %s): %w", i, p.Shares[i].Slots, c.Nodes[p.Shares[i].Source].Addr, err)
		}
	}
	return results, nil
}

func runTask(ctx context.Context, c *localcluster.Cluster, sh share, snapshot string, budget throttle.Budget, dir string) (TaskResult, error) {
	name := fmt.Sprintf("slotmover-%d", sh.Source)
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return TaskResult{}, fmt.Errorf("task log: %w", err)
	}
	defer f.Close()
	spool := filepath.Join(dir, name+"-spool")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		return TaskResult{}, fmt.Errorf("spool dir: %w", err)
	}
	// The defaults of `slotmover move`, but the snapshot path and budget.
	sum, err := mover.Run(ctx, mover.Options{
		Source:   mover.Conn{Addr: c.Nodes[sh.Source].Addr},
		Target:   mover.Conn{Addr: c.Nodes[targetNode].Addr},
		Slots:    sh.Slots,
		Snapshot: snapshot,
		SpoolDir: spool,
		Cleanup:  cutover.Pace{Sleep: time.Millisecond},
		Budget:   budget,
		Logger:   slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	res := TaskResult{Summary: sum}
	if err != nil {
		res.Error = err.Error()
		return res, err
	}
	if sum.Result != mover.ResultMoved {
		return res, fmt.Errorf("result %s", sum.Result)
	}
	return res, nil
}
