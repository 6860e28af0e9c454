package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/internal/localcluster"
)

// asmResult is what the built-in atomic slot migration reports.
type asmResult struct {
	SwitchMS float64  // when the last import completed: the target served the slots
	PauseMS  float64  // the longest write_pause_ms of the tasks, source or target
	Notes    []string // retries and the like
}

// asmPoll is how often the migrations' status is read.
const asmPoll = 10 * time.Millisecond

// moveWithASM sends CLUSTER MIGRATION IMPORT to the target for each share
// (one task per source, one after the other), polls CLUSTER MIGRATION
// STATUS until each task completed, then waits until the sources have trimmed the moved keys, so
// that the wall time includes the source's cleanup as the other methods'
// does. Every status change goes to asm.log in dir.
func moveWithASM(ctx context.Context, c *localcluster.Cluster, p plan, dir string) (asmResult, error) {
	var res asmResult
	start := time.Now()
	logf, err := os.Create(filepath.Join(dir, "asm.log"))
	if err != nil {
		return res, fmt.Errorf("asm log: %w", err)
	}
	defer logf.Close()
	logLine := func(format string, args ...any) {
		fmt.Fprintf(logf, "%8.3f s  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	tc := c.Nodes[targetNode].Client()
	defer tc.Close()
	// The server runs one import at a time ("another ASM task is already
	// in progress"): the shares go one after the other.
	ids := make([]string, len(p.Shares))
	for i, sh := range p.Shares {
		args := []any{"CLUSTER", "MIGRATION", "IMPORT"}
		for _, r := range sh.Slots.Ranges() {
			args = append(args, r.Start, r.End)
		}
		id, err := tc.Do(ctx, args...).Text()
		if err != nil {
			return res, fmt.Errorf("CLUSTER MIGRATION IMPORT %s (from %s): %w", sh.Slots, c.Nodes[sh.Source].Addr, err)
		}
		ids[i] = id
		logLine("import %s from %s: task %s", sh.Slots, c.Nodes[sh.Source].Addr, id)
		if err := asmWait(ctx, tc, id, &res, logLine); err != nil {
			return res, err
		}
	}
	res.SwitchMS = ms(time.Since(start))
	logLine("every import completed")
	// The sources: their side of each task completed, the keys trimmed.
	for i, sh := range p.Shares {
		src := c.Nodes[sh.Source]
		sc := src.Client()
		err := func() error {
			defer sc.Close()
			for {
				st, err := asmStatus(ctx, sc, ids[i])
				if err != nil {
					return err
				}
				if st["state"] == "completed" {
					res.PauseMS = max(res.PauseMS, atof(st["write_pause_ms"]))
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("asm task %s on the source %s: %w (state %s)", ids[i], src.Addr, ctx.Err(), st["state"])
				case <-time.After(asmPoll):
				}
			}
			for {
				// A source that gave up its last slot becomes the
				// target's replica and loads its data: nothing to trim.
				if role, err := sc.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "slave" {
					logLine("source %s: became a replica of the target", src.Addr)
					return nil
				}
				n, err := countKeys(ctx, sc, sh.Slots)
				if err != nil && !strings.Contains(err.Error(), "LOADING") {
					return err
				}
				if err == nil && n == 0 {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the source %s still holds %d keys of the moved slots: %w", src.Addr, n, ctx.Err())
				case <-time.After(asmPoll):
				}
			}
		}()
		if err != nil {
			return res, err
		}
		logLine("source %s: task completed, keys trimmed", src.Addr)
	}
	return res, nil
}

// asmWait polls the target's import task id until it completed.
func asmWait(ctx context.Context, tc *redis.Client, id string, res *asmResult, logLine func(string, ...any)) error {
	last := ""
	for {
		st, err := asmStatus(ctx, tc, id)
		if err != nil {
			return err
		}
		if s := st["state"]; s != last {
			last = s
			logLine("task %s: state %s (retries %s, last_error %q)", id, s, st["retries"], st["last_error"])
		}
		n := atof(st["retries"])
		switch st["state"] {
		case "completed":
			res.PauseMS = max(res.PauseMS, atof(st["write_pause_ms"]))
			if n > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("asm task %s took %.0f retries", id, n))
			}
			return nil
		case "canceled", "cancelled":
			return fmt.Errorf("asm task %s was canceled: %s", id, st["last_error"])
		}
		// "failed" is retried by the target; the move timeout bounds it.
		if n > 20 {
			return fmt.Errorf("asm task %s: %.0f retries, last error %q", id, n, st["last_error"])
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("asm task %s: %w (state %s, last error %q)", id, ctx.Err(), last, st["last_error"])
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
