package main

import (
	"fmt"
	"os"
)

func benchCmd(args []string) int {
	fmt.Fprintln(os.Stderr, "slotmover bench: not built yet")
	return exitFailed
}
