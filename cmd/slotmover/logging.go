package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/slotmover/slotmover/internal/config"
	"github.com/spf13/pflag"
)

// goRedisLog carries go-redis's own messages (connection pool and
// protocol warnings) to slog's default logger, which each command points
// at its own (commandLogger): they come out in the command's format and
// level filter, not as bare "redis: …" lines on stderr.
type goRedisLog struct{}

func (goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().WarnContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// logFlags are --log-level and --log-format, of every command that logs;
// serve takes the same from its configuration.
type logFlags config.Log

func (f *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Level, "log-level", config.DefaultLogLevel, "debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&f.Format, "log-format", config.DefaultLogFormat, "text or json")
}

// check says what is wrong with the flags, before the command starts.
func (f *logFlags) check() error {
	if _, err := config.ParseLogLevel(f.Level); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if err := config.CheckLogFormat(f.Format); err != nil {
		return fmt.Errorf("--log-format: %w", err)
	}
	return nil
}

// logger returns the command's logger, writing to w, made the default too.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	l, err := config.Log(*f).Logger(w)
	return commandLogger(l), err
}

// commandLogger makes l the default logger, for go-redis's messages and
// the log package, and returns it.
func commandLogger(l *slog.Logger) *slog.Logger {
	slog.SetDefault(l)
	return l
}
