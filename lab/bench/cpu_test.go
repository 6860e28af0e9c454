package bench

import (
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		own, kids  int64
		bad        bool
	}{
		{name: "plain", stat: "42 (redis-server) S 1 42 42 0 -1 4194560 900 0 0 0 120 30 7 3 20 0 5 0 100 1000 200", own: 150, kids: 10},
		{name: "name with spaces and parentheses", stat: "42 (redis-server *:7000) (x)) R 1 42 42 0 -1 0 0 0 0 0 5 6 0 1 20 0 1 0 1 1 1", own: 11, kids: 1},
		{name: "cut short", stat: "42 (x) S 1 2 3", bad: true},
		{name: "no name", stat: "42 x S", bad: true},
		{name: "not a number", stat: "42 (x) S 1 42 42 0 -1 0 0 0 0 0 a 6 0 1 20", bad: true},
	} {
		own, kids, err := statTicks(tc.stat)
		if tc.bad != (err != nil) || own != tc.own || kids != tc.kids {
			t.Errorf("%s: %d and %d of children, %v; want %d and %d (error %v)", tc.name, own, kids, err, tc.own, tc.kids, tc.bad)
		}
	}
	busy, err := hostBusy("cpu  100 5 50 9000 10 2 3 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil || busy != 160 {
		t.Errorf("host busy %d, %v; want 160: user, nice, system, irq, softirq", busy, err)
	}
	if _, err := hostBusy("intr 1 2 3"); err == nil {
		t.Error("a /proc/stat without its cpu line read")
	}
}

// A server that spins is counted as a server, and its CPU is not the
// mover's.
func TestCPUSplitsTheServersFromTheRest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	spin := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000000 ]; do i=$((i+1)); done")
	if err := spin.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = spin.Process.Kill()
		_ = spin.Wait()
	}()
	pid := []int{spin.Process.Pid}
	from, err := markCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	const want = 30 // ticks: 0.3 s
	deadline := time.Now().Add(30 * time.Second)
	var to cpuMark
	for {
		if to, err = markCPU(pid); err != nil {
			t.Fatal(err)
		}
		if to.servers-from.servers >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	use := from.since(to)
	if use.Servers < float64(want)/clockTicks || use.Bench >= use.Servers {
		t.Fatalf("the spinning server spent %.2f s, this process %.2f s; want the server at least %.2f s and more than this process", use.Servers, use.Bench, float64(want)/clockTicks)
	}
}

// What a program the bench ran (redis-cli) spent is the mover's, not the
// bench's, though the bench waited for it.
func TestCPUCountsTheBenchsChildrenAsTheMover(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	from, err := markCPU(nil)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	to, err := markCPU(nil)
	if err != nil {
		t.Fatal(err)
	}
	use := from.since(to)
	spent := (child.ProcessState.UserTime() + child.ProcessState.SystemTime()).Seconds()
	if use.Mover < 0.8*spent-0.02 || use.Bench > spent/2 {
		t.Errorf("the child spent %.2f s; counted: mover %.2f s, bench %.2f s", spent, use.Mover, use.Bench)
	}
}
