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
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false, fmt.Errorf("list this process's threads: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
		if err != nil || 20-prio >= n { // the system call gives 20 - nice; an error: the thread ended
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, syscall.ESRCH) {
			return changed, fmt.Errorf("set thread %d's nice value to %d: %w", tid, n, err)
		}
		changed = true
	}
	return changed, nil
}
