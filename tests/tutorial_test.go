package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotmover/slotmover/lab/localcluster"
)

const tutorialScript = "../docs/tutorial.sh"

// The tutorial, docs/tutorial.md, quotes docs/tutorial.sh whole: this test
// holds the quote to the script, and runs the script as a reader would (on
// its own ports), with slotmover, nats-server, redis-server and redis-cli on
// the PATH. Every step's output must show it did what the tutorial says.
func TestTutorial(t *testing.T) {
	script, err := os.ReadFile(tutorialScript)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../docs/tutorial.md")
	if err != nil {
		t.Fatal(err)
	}
	quote := "<!-- docs/tutorial.sh, quoted whole -->\n```bash\n" + string(script) + "```\n"
	if !strings.Contains(string(page), quote) {
		t.Fatal("docs/tutorial.md does not quote docs/tutorial.sh whole, between its marker and a bash fence")
	}

	bin := filepath.Dir(slotmoverBin)
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	// The harness's redis-server and redis-cli (a build of the matrix, or
	// the PATH's), under the names the script uses.
	for name, target := range map[string]string{"redis-server": localcluster.ServerBin, "redis-cli": localcluster.CliBin()} {
		path, err := exec.LookPath(target)
		if err != nil {
			t.Skipf("no %s: %v", name, err)
		}
		link := filepath.Join(bin, name)
		os.Remove(link)
		if err := os.Symlink(path, link); err != nil {
			t.Fatal(err)
		}
	}
	base, natsPort := tutorialPorts(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", tutorialScript)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "BASE="+strconv.Itoa(base),
		"NATS_PORT="+strconv.Itoa(natsPort), "DIR="+filepath.Join(dir, "run"))
	// Its own process group, so that a timeout stops the daemons it
	// started too; the servers it daemonized are stopped by their pidfiles.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		for i := 1; i <= 4; i++ {
			if b, err := os.ReadFile(filepath.Join(dir, "run", strconv.Itoa(i), "redis.pid")); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	out, err := cmd.CombinedOutput()
	text := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(string(out), "")
	if err != nil {
		logs, _ := filepath.Glob(filepath.Join(dir, "run", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			text += fmt.Sprintf("\n---- %s (its end):\n%s", filepath.Base(l), b[max(0, len(b)-3000):])
		}
		t.Fatalf("tutorial: %v\n%s", err, text)
	}
	t.Logf("tutorial:\n%s", text)
	for _, want := range []string{
		"moved: slots 0-999 from 127.0.0.1:" + strconv.Itoa(base+1) + " to 127.0.0.1:" + strconv.Itoa(base+4),
		"to do: rollback slots 6000 on 127.0.0.1:" + strconv.Itoa(base+4),
		"done: rollback slots 6000 on 127.0.0.1:" + strconv.Itoa(base+4),
		"1000-1999  127.0.0.1:" + strconv.Itoa(base+1) + "  completed  done",
		`slotmover_tasks{state="completed"}`,
		"master-4  127.0.0.1:" + strconv.Itoa(base+4) + "  0", // slotmover ls
		"[OK] 20000 keys in 4 masters.",
		"[OK] All nodes agree about slots configuration.",
		"[OK] All 16384 slots covered.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the tutorial's output lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`all (\d+) moves moved`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Errorf("the tutorial's plan was not applied in full")
	}
	// Step 3's check, before the NATS steps, shows every key; the last one
	// shows the rebalance evened them out (5000 a master, within 5%).
	last := text[strings.LastIndex(text, "== 6."):]
	for _, m := range regexp.MustCompile(`-> (\d+) keys`).FindAllStringSubmatch(last, -1) {
		if n, _ := strconv.Atoi(m[1]); n < 4750 || n > 5250 {
			t.Errorf("after the rebalance a master holds %d keys, want 5000 ± 5%%", n)
		}
	}
}

// tutorialPorts picks a base port whose +1…4 (masters), +10001…10004 (their
// cluster buses), +101…104 (admin ports) and +201…204 (metrics) are free,
// and a port for NATS.
func tutorialPorts(t *testing.T) (base, nats int) {
	free := func(p int) bool {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for range 100 {
		// Below the kernel's ephemeral range (32768 on), even the buses.
		base = 15000 + rand.IntN(7000)
		ok := free(base + 300)
		for i := 1; i <= 4 && ok; i++ {
			ok = free(base+i) && free(base+10000+i) && free(base+100+i) && free(base+200+i)
		}
		if ok {
			return base, base + 300
		}
	}
	t.Fatal("no free ports for the tutorial")
	return 0, 0
}
