package command

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// YieldCPU raises the nice value of every thread of this process to at
// least n, so that when CPU runs short the server a sidecar sits beside
// runs before the sidecar does. Linux keeps a nice value per thread and a
// new thread takes its creator's, so once every thread has it, so have
// those started later. A higher value, set by a service manager, stays.
func YieldCPU(n int) error {
	if n <= 0 {
		return nil // 0 leaves the process as it was started
	}
	// A thread started while a pass ran may have been missed: pass again
	// until one changes nothing (a few at most: the runtime starts few).
	for range maxPasses {
		changed, err := nicePass(n)
		if err != nil || !changed {
			return err
		}
	}
	return nil
}

const maxPasses = 8

func nicePass(n int) (changed bool, err error) {
	nices, err := ThreadNices(os.Getpid())
	if err != nil {
		return false, err
	}
	for tid, nice := range nices {
		if nice >= n {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, syscall.ESRCH) {
			return changed, fmt.Errorf("set thread %d's nice value to %d: %w", tid, n, err)
		}
		changed = true
	}
	return changed, nil
}

// ThreadNices is the nice value of each thread of process pid, by thread
// id. A thread that ends while it is read is left out.
func ThreadNices(pid int) (map[int]int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list process %d's threads: %w", pid, err)
	}
	nices := make(map[int]int, len(tasks))
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended
		}
		nices[tid] = 20 - prio // the system call gives 20 - nice
	}
	return nices, nil
}
