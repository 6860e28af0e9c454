package main

import (
	"fmt"
	"os"
)

func soakCmd(args []string) int {
	fmt.Fprintln(os.Stderr, "slotmover soak: not built yet")
	return exitFailed
}
