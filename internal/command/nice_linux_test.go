package command

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// niceChild, when set, makes the test binary a child that runs
// YieldCPU on threads started before and after, and prints every thread's
// nice value: a test must not change its own process's.
const niceChild = "SLOTMOVER_TEST_NICE_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(niceChild); spec != "" {
		os.Exit(runNiceChild(spec))
	}
	os.Exit(m.Run())
}

// runNiceChild parses "first,then": YieldCPU(first) unless 0, then
// YieldCPU(then), with threads started around each call.
func runNiceChild(spec string) int {
	var first, then int
	if _, err := fmt.Sscanf(spec, "%d,%d", &first, &then); err != nil {
		fmt.Println(err)
		return 1
	}
	hold := make(chan struct{})
	defer close(hold)
	// A locked goroutine that waits keeps its thread, so the runtime
	// starts another for the rest: each call adds 4 threads.
	startThreads := func() {
		var locked sync.WaitGroup
		locked.Add(4)
		for range 4 {
			go func() {
				runtime.LockOSThread()
				locked.Done()
				<-hold
			}()
		}
		locked.Wait()
	}
	startThreads()
	for _, n := range []int{first, then} {
		if err := YieldCPU(n); err != nil {
			fmt.Println(err)
			return 1
		}
		startThreads()
	}
	byThread, err := ThreadNices(os.Getpid())
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var nices []string
	for _, nice := range byThread {
		nices = append(nices, strconv.Itoa(nice))
	}
	fmt.Println(strings.Join(nices, " "))
	return 0
}

func TestYieldCPUNicesEveryThread(t *testing.T) {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	started := 20 - prio // the child's, unless this test runs under nice already
	for _, tc := range []struct {
		name        string
		first, then int
	}{
		{"raised", 0, 10},
		{"left higher", 15, 10},
		{"zero leaves it", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := strconv.Itoa(max(started, tc.first, tc.then))
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d", niceChild, tc.first, tc.then))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			nices := strings.Fields(string(out))
			if len(nices) < 12 {
				t.Fatalf("child saw %d threads (%q), want the 12 or more it started", len(nices), out)
			}
			for i, n := range nices {
				if n != want {
					t.Fatalf("thread %d of %d has nice %s, want %s: %q", i, len(nices), n, want, out)
				}
			}
		})
	}
}
