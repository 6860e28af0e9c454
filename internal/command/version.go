package command

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/slotmover/slotmover/internal/cli"
)

// Version is the version shown everywhere: stamped, set by a release
// build (-ldflags "-X main.version=v1.2.3"), else the module's (go install
// …@v1.2.3), else the VCS revision a source build came from, "-dirty" with
// uncommitted changes, else "dev".
func Version(stamped string) string {
	if stamped != "" {
		return stamped
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

// VersionCommand is the verb "version" of p, whose release build stamps
// stamped.
func (p *Program) VersionCommand(stamped string) Command {
	return Command{Names: []string{"version"}, Synopsis: "version",
		About: "Print the build's version, Go version and platform.",
		Run: One(func(args []string) int {
			words, code, ok := p.ParseFlags(cli.NewFlagSet("version"), args)
			if !ok {
				return code
			}
			if p.RefuseExtra("version", words, 0, "no argument") {
				return ExitRefused
			}
			fmt.Fprintf(os.Stdout, "%s %s %s %s/%s\n", p.Name, Version(stamped), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return ExitDone
		})}
}
