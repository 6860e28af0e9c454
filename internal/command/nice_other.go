//go:build !linux

package command

import (
	"errors"
	"fmt"
)

// YieldCPU would raise this process's nice value to n: slotmover does so
// on Linux only, where its servers run.
func YieldCPU(n int) error {
	if n <= 0 {
		return nil
	}
	return fmt.Errorf("nice value %d: %w", n, errors.ErrUnsupported)
}

// ThreadNices would list process pid's threads' nice values: on Linux only.
func ThreadNices(pid int) (map[int]int, error) {
	return nil, fmt.Errorf("threads of process %d: %w", pid, errors.ErrUnsupported)
}
