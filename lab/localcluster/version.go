package localcluster

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Version is what a server binary reports with --version.
type Version struct {
	Product             string // "Redis" or "Valkey"
	Major, Minor, Patch int
	Line                string // the whole --version line
}

func (v Version) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.Product, v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v is major.minor or later. Valkey numbers its
// releases on from Redis 7.2, so one comparison serves both.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// versionLine is "Redis server v=7.0.15 …", "Valkey server v=8.0.1 …", or
// "Server v=7.2.7 …": Valkey 7.2 dropped Redis's name and had no own yet.
var versionLine = regexp.MustCompile(`^(?:(\S+) s|S)erver v=(\d+)\.(\d+)\.(\d+)`)

var versions struct {
	sync.Mutex
	byBin map[string]versionResult
}

type versionResult struct {
	v   Version
	err error
}

// ServerVersion runs `ServerBin --version` (once per binary) and parses it.
func ServerVersion() (Version, error) {
	return VersionOf(ServerBin)
}

// VersionOf runs `bin --version` (once per binary) and parses it.
func VersionOf(bin string) (Version, error) {
	versions.Lock()
	defer versions.Unlock()
	if r, ok := versions.byBin[bin]; ok {
		return r.v, r.err
	}
	var r versionResult
	out, err := exec.Command(bin, "--version").Output()
	line := strings.TrimSpace(string(out))
	m := versionLine.FindStringSubmatch(line)
	switch {
	case err != nil:
		r.err = fmt.Errorf("%s --version: %w", bin, err)
	case m == nil:
		r.err = fmt.Errorf("%s --version: unexpected output %q", bin, line)
	default:
		r.v = Version{Product: cmp.Or(m[1], "Valkey"), Line: line}
		r.v.Major, _ = strconv.Atoi(m[2])
		r.v.Minor, _ = strconv.Atoi(m[3])
		r.v.Patch, _ = strconv.Atoi(m[4])
	}
	if versions.byBin == nil {
		versions.byBin = map[string]versionResult{}
	}
	versions.byBin[bin] = r
	return r.v, r.err
}

// atLeast reports whether ServerBin is major.minor or later; a binary whose
// version cannot be read counts as new (the start then says what is wrong).
func atLeast(major, minor int) bool {
	v, err := ServerVersion()
	return err != nil || v.AtLeast(major, minor)
}

// installHint says where redis-server and redis-cli come from, and how to
// point at another build.
const installHint = "install Redis 7 (on Debian or Ubuntu: apt-get install redis-server redis-tools), or set SLOTMOVER_REDIS_SERVER=/path/to/redis-server (and SLOTMOVER_REDIS_CLI if its redis-cli is not beside it)"

// NeedBinaries reports which of redis-server and redis-cli (or the builds
// named instead) cannot be found, saying where to get them.
func NeedBinaries(bins ...string) error {
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("need %s: %w: %s", bin, err, installHint)
		}
	}
	return nil
}

// CliBin is the redis-cli the harness runs (CheckWithRedisCli): the
// SLOTMOVER_REDIS_CLI environment variable if set, else the cli beside
// ServerBin (valkey-cli beside valkey-server, redis-cli beside
// redis-server), else redis-cli from the PATH. It follows ServerBin when a
// program changes that variable.
func CliBin() string {
	if v := os.Getenv("SLOTMOVER_REDIS_CLI"); v != "" {
		return v
	}
	server := ServerBin
	if !strings.Contains(server, "/") {
		p, err := exec.LookPath(server)
		if err != nil {
			return "redis-cli"
		}
		server = p
	}
	dir, base := filepath.Split(server)
	names := []string{"redis-cli", "valkey-cli"}
	if strings.HasPrefix(base, "valkey") {
		names = []string{"valkey-cli", "redis-cli"}
	}
	for _, n := range names {
		if isExecutable(filepath.Join(dir, n)) {
			return filepath.Join(dir, n)
		}
	}
	return "redis-cli"
}

// isExecutable is true for a regular file with an execute bit (a build's
// folder may hold broken text files under the usual names).
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
