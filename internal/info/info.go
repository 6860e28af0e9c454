// Package info reads the text of Redis's INFO command.
package info

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fields is one INFO reply: every "name:value" line, by name.
type Fields map[string]string

// Parse reads the text of an INFO reply; section headers and blank lines
// are skipped.
func Parse(text string) Fields {
	f := Fields{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[k] = v
		}
	}
	return f
}

// Read sends INFO <section> to c and parses the reply.
func Read(ctx context.Context, c *redis.Client, section string) (Fields, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, c.Options().Addr, err)
	}
	return Parse(text), nil
}

// Int returns a numeric field.
func (f Fields) Int(name string) (int64, error) {
	v, ok := f[name]
	if !ok {
		return 0, fmt.Errorf("INFO has no %s", name)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO field %s: %w", name, err)
	}
	return n, nil
}

// Sub reads a field made of comma-separated key=value pairs, such as
// "slave0:ip=…,port=…,state=online,offset=…" or "db0:keys=…,expires=…".
func (f Fields) Sub(name string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(f[name], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// ErrorStats reads INFO errorstats: error prefix ("MOVED", "ERR") → count.
func (f Fields) ErrorStats() map[string]int64 {
	out := map[string]int64{}
	for name := range f {
		if kind, ok := strings.CutPrefix(name, "errorstat_"); ok {
			n, _ := strconv.ParseInt(f.Sub(name)["count"], 10, 64)
			out[kind] = n
		}
	}
	return out
}

// ReadInt reads one numeric field of an INFO section of c.
func ReadInt(ctx context.Context, c *redis.Client, section, name string) (int64, error) {
	f, err := Read(ctx, c, section)
	if err != nil {
		return 0, err
	}
	return f.Int(name)
}
