package admin

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Doer sends a command: a go-redis client.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Ask sends CLUSTER MIGRATION <verb…> ID <id> (ALL for id "") to an
// admin port through c, as status, cancel and the controls do, and
// returns the reply as records of field → value; a count (CANCEL and the
// controls answer one) as one record {"count": n}.
func Ask(ctx context.Context, c Doer, verb []string, id string) ([]map[string]any, error) {
	args := []any{"CLUSTER", "MIGRATION"}
	for _, v := range verb {
		args = append(args, v)
	}
	if id != "" {
		args = append(args, "ID", id)
	} else {
		args = append(args, "ALL")
	}
	reply, err := c.Do(ctx, args...).Result()
	if err != nil {
		return nil, err
	}
	if n, ok := reply.(int64); ok {
		return []map[string]any{{"count": n}}, nil
	}
	tasks, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: the reply is %T, not a list of tasks", strings.ToLower(strings.Join(verb, " ")), reply)
	}
	out := []map[string]any{}
	for _, t := range tasks {
		fields, _ := t.([]any)
		rec := map[string]any{}
		for i := 0; i+1 < len(fields); i += 2 {
			rec[fmt.Sprint(fields[i])] = fields[i+1]
		}
		out = append(out, rec)
	}
	return out, nil
}
