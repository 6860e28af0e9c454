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
