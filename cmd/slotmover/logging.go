package main

import (
	"context"
	"fmt"
	"log/slog"
)

// goRedisLog carries go-redis's own messages (connection pool and
// protocol warnings) to slog's default logger, which each command points
// at its own (commandLogger): they come out in the command's format and
// level filter, not as bare "redis: …" lines on stderr.
type goRedisLog struct{}

func (goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().WarnContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// commandLogger makes l the default logger, for go-redis's messages and
// the log package, and returns it.
func commandLogger(l *slog.Logger) *slog.Logger {
	slog.SetDefault(l)
	return l
}
