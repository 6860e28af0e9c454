package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/slotmover/slotmover/internal/cli"
)

// version is set by a release build (-ldflags "-X main.version=v1.2.3").
// Otherwise buildVersion reads what the Go toolchain stamped in.
var version string

// buildVersion is the version shown everywhere: the release's, else the
// module's (go install …@v1.2.3), else the VCS revision a source build
// came from, "-dirty" with uncommitted changes, else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev+" + rev + dirty
}

func versionCmd(args []string) int {
	words, code, ok := parseFlags(cli.NewFlagSet("version"), args)
	if !ok {
		return code
	}
	if refuseExtra("version", words, 0, "no argument") {
		return exitRefused
	}
	fmt.Fprintf(os.Stdout, "slotmover %s %s %s/%s\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
