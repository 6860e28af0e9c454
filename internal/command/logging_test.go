package command

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A message of go-redis's own comes out through the command's logger, in
// its format, not as a bare line on stderr. (EXPIRE of 100 ms makes
// go-redis warn that it sends whole seconds, before any connection.)
func TestGoRedisMessagesGoThroughSlog(t *testing.T) {
	prev := slog.Default()
	defer slog.SetDefault(prev)
	var buf bytes.Buffer
	SetLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	RedisLogToSlog()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	c.Expire(context.Background(), "k", 100*time.Millisecond)
	if out := buf.String(); !strings.Contains(out, `level=WARN msg="specified duration is 100ms`) || !strings.Contains(out, "from=go-redis") {
		t.Fatalf("go-redis's warning is not in the command's log: %q", out)
	}
}
