package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin writes an executable shell script (or, with mode 0o444, a text
// file that is not executable) into dir.
func fakeBin(t *testing.T, dir, name, script string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersionOf(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		line, want string
		debug      bool
	}{
		{"Redis server v=6.2.16 sha=00000000:0 malloc=libc bits=64 build=34aa1837ecf254ad", "Redis 6.2.16", false},
		{"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0", "Redis 7.0.15", true},
		{"Valkey server v=8.0.1 sha=00000000:1 malloc=libc bits=64 build=86b7c7311dfd9f84", "Valkey 8.0.1", true},
		{"Server v=7.2.7 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=7b437c5e5e42e6f", "Valkey 7.2.7", true},
	} {
		bin := fakeBin(t, dir, fmt.Sprint("server-", i), "echo '"+c.line+"'", 0o755)
		v, err := VersionOf(bin)
		if err != nil || v.String() != c.want || v.AtLeast(7, 0) != c.debug || v.Line != c.line {
			t.Errorf("%s: %v (at least 7.0: %v), %v; want %s", c.line, v, v.AtLeast(7, 0), err, c.want)
		}
	}
	if _, err := VersionOf(fakeBin(t, dir, "odd", "echo hello", 0o755)); err == nil {
		t.Error("no error for output that is not a version line")
	}
	if _, err := VersionOf(filepath.Join(dir, "absent")); err == nil {
		t.Error("no error for a missing binary")
	}
	if v, err := ServerVersion(); err != nil || v.Major < 6 {
		t.Errorf("the harness's own server: %v, %v", v, err)
	}
}

// CliBin follows ServerBin: the cli beside it (valkey-cli beside
// valkey-server, skipping a redis-cli that is not executable), unless
// SLOTMOVER_REDIS_CLI says otherwise.
func TestCliBinFollowsServer(t *testing.T) {
	saved := ServerBin
	t.Cleanup(func() { ServerBin = saved })
	t.Setenv("SLOTMOVER_REDIS_CLI", "")

	valkey := t.TempDir()
	ServerBin = fakeBin(t, valkey, "valkey-server", "exit 0", 0o755)
	fakeBin(t, valkey, "redis-cli", "broken", 0o444)
	want := fakeBin(t, valkey, "valkey-cli", "exit 0", 0o755)
	if got := CliBin(); got != want {
		t.Errorf("beside valkey-server: %s, want %s", got, want)
	}

	redis := t.TempDir()
	ServerBin = fakeBin(t, redis, "redis-server", "exit 0", 0o755)
	want = fakeBin(t, redis, "redis-cli", "exit 0", 0o755)
	if got := CliBin(); got != want {
		t.Errorf("beside redis-server: %s, want %s", got, want)
	}

	ServerBin = fakeBin(t, t.TempDir(), "redis-server", "exit 0", 0o755)
	if got := CliBin(); got != "redis-cli" {
		t.Errorf("no cli beside the server: %s, want redis-cli from the PATH", got)
	}

	t.Setenv("SLOTMOVER_REDIS_CLI", "/opt/my/redis-cli")
	if got := CliBin(); got != "/opt/my/redis-cli" {
		t.Errorf("with SLOTMOVER_REDIS_CLI: %s", got)
	}
}

// A missing binary is named with where to get it and how to point at
// another build.
func TestNeedBinaries(t *testing.T) {
	if err := NeedBinaries("sh"); err != nil {
		t.Fatal(err)
	}
	err := NeedBinaries("sh", "no-such-redis-server")
	if err == nil || !strings.Contains(err.Error(), "need no-such-redis-server") ||
		!strings.Contains(err.Error(), "apt-get install redis-server redis-tools") || !strings.Contains(err.Error(), "SLOTMOVER_REDIS_SERVER=") {
		t.Fatalf("%v", err)
	}
}
