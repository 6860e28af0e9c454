package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
)

// asmResult is what the built-in atomic slot migration reports.
type asmResult struct {
	SwitchMS float64  // when the last import completed: the target served the slots
	PauseMS  float64  // the longest write_pause_ms of the tasks, source or target
	Notes    []string // retries and the like
}

// asmPoll is how often the migrations' status is read.
const asmPoll = 10 * time.Millisecond

// asmImport is one CLUSTER MIGRATION IMPORT: slots of Source, into Target.
type asmImport struct {
	Target, Source *localcluster.Server
	Slots          *slots.Set
}

// moveWithASM imports each share into the target, one after the other.
func moveWithASM(ctx context.Context, c *localcluster.Cluster, p plan, dir string) (asmResult, error) {
	var imports []asmImport
	for _, sh := range p.Shares {
		imports = append(imports, asmImport{Target: c.Nodes[targetNode], Source: c.Nodes[sh.Source], Slots: sh.Slots})
	}
	return importWithASM(ctx, [][]asmImport{imports}, dir)
}

// importWithASM runs each group's imports on its target one after the
// other, the groups side by side, polling CLUSTER MIGRATION STATUS until
// each task completed; then it waits until the sources have trimmed the
// moved keys, so that the wall time includes the source's cleanup as the
// other methods' does. Every status change goes to asm.log in dir.
func importWithASM(ctx context.Context, groups [][]asmImport, dir string) (asmResult, error) {
	var res asmResult
	start := time.Now()
	logf, err := os.Create(filepath.Join(dir, "asm.log"))
	if err != nil {
		return res, fmt.Errorf("asm log: %w", err)
	}
	defer logf.Close()
	var mu sync.Mutex // res and the log, between the groups
	logLine := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(logf, "%8.3f s  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ids := make([][]string, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, imports := range groups {
		wg.Go(func() {
			for _, im := range imports {
				id, pause, note, err := asmImportOne(ctx, im, logLine)
				mu.Lock()
				res.PauseMS = max(res.PauseMS, pause)
				if note != "" {
					res.Notes = append(res.Notes, note)
				}
				mu.Unlock()
				if err != nil {
					errs[g] = err
					return
				}
				ids[g] = append(ids[g], id)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.SwitchMS = ms(time.Since(start))
	logLine("every import completed")
	for g, imports := range groups {
		for i, im := range imports {
			pause, err := asmTrimmed(ctx, im, ids[g][i], logLine)
			if err != nil {
				return res, err
			}
			res.PauseMS = max(res.PauseMS, pause)
		}
	}
	return res, nil
}

// asmImportOne sends the import to its target, again while the server
// answers that another task is in progress (on it or on the source), and
// waits until it completed. It returns the task's ID and write pause, and
// a note of its retries.
func asmImportOne(ctx context.Context, im asmImport, logLine func(string, ...any)) (id string, pauseMS float64, note string, err error) {
	tc := im.Target.Client()
	defer tc.Close()
	args := []any{"CLUSTER", "MIGRATION", "IMPORT"}
	for _, r := range im.Slots.Ranges() {
		args = append(args, r.Start, r.End)
	}
	for {
		id, err = tc.Do(ctx, args...).Text()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "in progress") {
			break
		}
		select {
		case <-ctx.Done():
			return "", 0, "", fmt.Errorf("CLUSTER MIGRATION IMPORT %s (from %s) on %s: %w (last refusal: %v)", im.Slots, im.Source.Addr, im.Target.Addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return "", 0, "", fmt.Errorf("CLUSTER MIGRATION IMPORT %s (from %s) on %s: %w", im.Slots, im.Source.Addr, im.Target.Addr, err)
	}
	logLine("import %s from %s into %s: task %s", im.Slots, im.Source.Addr, im.Target.Addr, id)
	last := ""
	for {
		st, err := asmStatus(ctx, tc, id)
		if err != nil {
			return id, 0, "", err
		}
		if s := st["state"]; s != last {
			last = s
			logLine("task %s: state %s (retries %s, last_error %q)", id, s, st["retries"], st["last_error"])
		}
		n := atof(st["retries"])
		switch st["state"] {
		case "completed":
			if n > 0 {
				note = fmt.Sprintf("asm task %s took %.0f retries", id, n)
			}
			return id, atof(st["write_pause_ms"]), note, nil
		case "canceled", "cancelled":
			return id, 0, "", fmt.Errorf("asm task %s was canceled: %s", id, st["last_error"])
		}
		// "failed" is retried by the target; the move timeout bounds it.
		if n > 20 {
			return id, 0, "", fmt.Errorf("asm task %s: %.0f retries, last error %q", id, n, st["last_error"])
		}
		select {
		case <-ctx.Done():
			return id, 0, "", fmt.Errorf("asm task %s: %w (state %s, last error %q)", id, ctx.Err(), last, st["last_error"])
		case <-time.After(asmPoll):
		}
	}
}

// asmTrimmed waits until the source's side of task id completed and the
// source holds no key of its slots; it returns the source's write pause.
func asmTrimmed(ctx context.Context, im asmImport, id string, logLine func(string, ...any)) (pauseMS float64, err error) {
	src := im.Source
	sc := src.Client()
	defer sc.Close()
	for {
		st, err := asmStatus(ctx, sc, id)
		if err != nil {
			return 0, err
		}
		if st["state"] == "completed" {
			pauseMS = atof(st["write_pause_ms"])
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("asm task %s on the source %s: %w (state %s)", id, src.Addr, ctx.Err(), st["state"])
		case <-time.After(asmPoll):
		}
	}
	for {
		// A source that gave up its last slot becomes the target's
		// replica and loads its data: nothing to trim.
		if role, err := sc.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "slave" {
			logLine("source %s: became a replica of the target", src.Addr)
			return pauseMS, nil
		}
		n, err := countKeys(ctx, sc, im.Slots)
		if err != nil && !strings.Contains(err.Error(), "LOADING") {
			return 0, err
		}
		if err == nil && n == 0 {
			logLine("source %s: task %s completed, keys trimmed", src.Addr, id)
			return pauseMS, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the source %s still holds %d keys of the moved slots: %w", src.Addr, n, ctx.Err())
		case <-time.After(asmPoll):
		}
	}
}

// asmStatus reads CLUSTER MIGRATION STATUS ID id as field → value; the
// reply is a list of one map (RESP3) or flat field/value list (RESP2).
func asmStatus(ctx context.Context, c *redis.Client, id string) (map[string]string, error) {
	v, err := c.Do(ctx, "CLUSTER", "MIGRATION", "STATUS", "ID", id).Slice()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER MIGRATION STATUS ID %s on %s: %w", id, c.Options().Addr, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("CLUSTER MIGRATION STATUS ID %s on %s: no such task", id, c.Options().Addr)
	}
	out := map[string]string{}
	switch e := v[0].(type) {
	case map[any]any:
		for k, val := range e {
			out[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	case []any:
		for j := 0; j+1 < len(e); j += 2 {
			out[fmt.Sprint(e[j])] = fmt.Sprint(e[j+1])
		}
	default:
		return nil, fmt.Errorf("CLUSTER MIGRATION STATUS ID %s on %s: unexpected reply %T", id, c.Options().Addr, v[0])
	}
	return out, nil
}

func atof(s string) float64 {
	f, _ := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return f
}
