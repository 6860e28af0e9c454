package command

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/slotmover/slotmover/daemon/config"
)

// RedisLogToSlog carries go-redis's own messages (connection pool and
// protocol warnings) to slog's default logger, which each command points
// at its own (SetLogger): they come out in the command's format and
// level filter, not as bare "redis: …" lines on stderr.
func RedisLogToSlog() { redis.SetLogger(goRedisLog{}) }

type goRedisLog struct{}

func (goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().WarnContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// LogFlags are --log-level and --log-format, of every command that logs;
// serve takes the same from its configuration.
type LogFlags config.Log

// Register adds the flags to fs.
func (f *LogFlags) Register(fs *pflag.FlagSet) {
	fs.StringVar(&f.Level, "log-level", config.DefaultLogLevel, "debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&f.Format, "log-format", config.DefaultLogFormat, "text or json")
}

// Check says what is wrong with the flags, before the command starts.
func (f *LogFlags) Check() error {
	if _, err := config.ParseLogLevel(f.Level); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if err := config.CheckLogFormat(f.Format); err != nil {
		return fmt.Errorf("--log-format: %w", err)
	}
	return nil
}

// Logger returns the command's logger, writing to w, made the default too.
func (f *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	l, err := config.Log(*f).Logger(w)
	if err != nil {
		return nil, err
	}
	return SetLogger(l), nil
}

// SetLogger makes l the default logger, for go-redis's messages and the
// log package, and returns it.
func SetLogger(l *slog.Logger) *slog.Logger {
	slog.SetDefault(l)
	return l
}
