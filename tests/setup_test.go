package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/lab/localcluster"
)

// The README's two commands set up what is missing on a machine with Go
// and no Redis: scripts/setup.sh installs Debian's packages (here through
// a stub apt-get that records its arguments and links the real binaries),
// or stops with the exact command to run. .ci/run is the README's second
// command.
func TestSetupScript(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"bash scripts/setup.sh demo", "bash scripts/setup.sh test"} {
		if !strings.Contains(string(readme[:min(len(readme), 3000)]), "\n    "+cmd+"\n") {
			t.Errorf("the README does not start with %q", cmd)
		}
	}
	if !strings.Contains(string(ci), "bash scripts/setup.sh test\n") {
		t.Error(".ci/run does not run the README's test command")
	}

	server, err := exec.LookPath(localcluster.ServerBin)
	if err != nil {
		t.Skip("no redis-server to link")
	}
	cli := localcluster.CliBin()
	if cli, err = exec.LookPath(cli); err != nil {
		t.Skip("no redis-cli to link")
	}
	run := func(t *testing.T, withApt bool, env ...string) (code int, stderr, aptLog string) {
		t.Helper()
		bin := t.TempDir() // the PATH: a few tools, no Redis
		for _, tool := range []string{"dirname", "id", "env", "go"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Skip(tool, " missing")
			}
			if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		log := filepath.Join(t.TempDir(), "apt.log")
		if withApt {
			stub := "#!/bin/bash\necho \"$*\" >> " + log + "\n" +
				"if [ \"$1\" = install ]; then /bin/ln -s " + server + " " + bin + "/redis-server; /bin/ln -s " + cli + " " + bin + "/redis-cli; fi\n"
			if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("/bin/bash", "../scripts/setup.sh", "check")
		cmd.Env = append([]string{"PATH=" + bin, "HOME=" + t.TempDir()}, env...)
		var errBuf bytes.Buffer
		cmd.Stderr = &errBuf
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(log)
		return cmd.ProcessState.ExitCode(), errBuf.String(), string(b)
	}
	if os.Getuid() != 0 {
		t.Skip("the install path runs as root (or with sudo); here neither")
	}
	t.Run("installs", func(t *testing.T) {
		code, stderr, apt := run(t, true)
		if code != 0 || apt != "update -qq\ninstall -y -qq --no-install-recommends redis-server redis-tools\n" {
			t.Fatalf("exit %d, apt-get run with %q; stderr %q", code, apt, stderr)
		}
	})
	t.Run("stops with the command", func(t *testing.T) {
		code, stderr, apt := run(t, true, "SLOTMOVER_NO_INSTALL=1")
		if code != 2 || apt != "" || !strings.Contains(stderr, "sudo apt-get update && sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools") {
			t.Fatalf("exit %d, apt-get run with %q; stderr %q", code, apt, stderr)
		}
	})
	t.Run("no apt-get", func(t *testing.T) {
		code, stderr, _ := run(t, false)
		if code != 2 || !strings.Contains(stderr, "SLOTMOVER_REDIS_SERVER=/path/to/redis-server") {
			t.Fatalf("exit %d; stderr %q", code, stderr)
		}
	})
	t.Run("another build", func(t *testing.T) {
		code, stderr, apt := run(t, true, "SLOTMOVER_REDIS_SERVER="+server)
		if code != 0 || apt != "" {
			t.Fatalf("exit %d, apt-get run with %q; stderr %q", code, apt, stderr)
		}
	})
}
