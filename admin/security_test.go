package admin

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// readToEOF reads c until the server closes it; a read that times out
// means the server left the connection open.
func readToEOF(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the connection was not closed by the server (read %q): %v", got, err)
	}
	return string(got)
}

// A web page can make a browser send an HTTP request to the admin port
// (cross-protocol scripting), which the inline protocol would read line by
// line, the body included. As Redis does, a command named POST or Host:
// closes the connection at once, and nothing after it runs: not the body,
// not commands pipelined in the same read, with or without a password.
func TestHTTPRequestClosesTheConnection(t *testing.T) {
	body := "CLUSTER MIGRATION IMPORT 0 100\r\n"
	post := fmt.Sprintf("POST /x HTTP/1.1\r\nHost: 127.0.0.1:7100\r\nUser-Agent: test\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for _, tc := range []struct {
		name string
		cfg  Config
		req  string
	}{
		{"POST", Config{}, post},
		{"post, with a password", Config{Password: "sekret"}, strings.Replace(post, "POST", "post", 1)},
		{"Host: first", Config{}, "Host: 127.0.0.1:7100\r\n\r\n" + body},
		{"HOST: after another line", Config{}, "PUT /x HTTP/1.1\r\nHOST: 127.0.0.1:7100\r\n\r\n" + body},
		{"POST in RESP, then a pipelined import", Config{}, "*1\r\n$4\r\nPOST\r\n*5\r\n$7\r\nCLUSTER\r\n$9\r\nMIGRATION\r\n$6\r\nIMPORT\r\n$1\r\n0\r\n$3\r\n100\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			var log syncBuffer
			s := serveLogged(t, tc.cfg, f, slog.New(slog.NewTextHandler(&log, nil)))
			c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.WriteString(c, tc.req); err != nil {
				t.Fatal(err)
			}
			// Unanswered, as Redis: even the reply to PUT, read in the
			// same batch, is dropped.
			if got := readToEOF(t, c); got != "" {
				t.Errorf("the server answered %q", got)
			}
			if imports, _ := f.seen(); len(imports) != 0 {
				t.Fatalf("the request's body reached the manager: imports %q", imports)
			}
			if tasks, err := f.Status(""); err != nil || len(tasks) != 0 {
				t.Fatalf("tasks after the request: %v, %v", tasks, err)
			}
			// The port still serves everyone else.
			r := dialRaw(t, s.addr)
			if tc.cfg.Password != "" {
				r.do("AUTH", tc.cfg.Password)
			}
			if got := r.do("ECHO", "still here"); got != resp("still here") {
				t.Fatalf("ECHO on a new connection: %q", got)
			}
			if l := log.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "cross-protocol") {
				t.Errorf("no warning logged:\n%s", l)
			}
		})
	}
}
