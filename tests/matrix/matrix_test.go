// Package matrix runs the server compatibility matrix as part of the suite.
package matrix

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The server compatibility matrix, as part of the suite: .ci/matrix runs
// the tests that matter for compatibility (a move of every type and big
// keys under a writer, multi-key writes, the broken pause, FLUSHALL, fix
// after kill -9, the snapshot scanner, a short soak, the cutover package)
// once per server build kept beside the repository (../shared/redis-builds
// on the CI machine), each as a `go test` subprocess with
// SLOTMOVER_REDIS_SERVER pointing at the build. It skips when none is there,
// as on a user's machine: set SLOTMOVER_REDIS_SERVER to run the whole suite
// against another build instead. SLOTMOVER_BUILDS_DIR names another folder
// of builds.
func TestCompatibilityMatrix(t *testing.T) {
	// A package of its own, so that `go test ./...` runs it beside ./tests,
	// each with its own -timeout: one after the other, the two took 1398 s
	// of the 1500 s a package then got (six builds took 1984-2006 s on 5
	// December 2026; scripts/setup.sh names this package first, so that it
	// starts first and CI lasts about as long as it does, and gives it
	// -timeout 38m, 2280 s, which keeps CI under 40 minutes). One build at a time, so that two
	// tests run at once on CI's two cores, as before. Two builds beside
	// ./tests made three, and a soak in ./tests then paused its source's
	// writers for 550 and 577 ms, over the 500 ms it allows a cutover.
	if os.Getenv("SLOTMOVER_MATRIX_CHILD") != "" {
		t.Skip("skipped: already inside the matrix")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("skipped: the matrix script needs bash")
	}
	script, err := filepath.Abs("../../.ci/matrix")
	if err != nil {
		t.Fatal(err)
	}
	// The matrix and everything it starts run in a process group of their
	// own, ended as a whole before this test's deadline would end the test
	// binary and leave them behind.
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, bash, script)
	cmd.Dir = filepath.Dir(filepath.Dir(script))
	if os.Getenv("SLOTMOVER_MATRIX_JOBS") == "" {
		cmd.Env = append(os.Environ(), "SLOTMOVER_MATRIX_JOBS=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	last := ""
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if strings.HasPrefix(line, "skipped: ") {
			skipped = append(skipped, strings.TrimPrefix(line, "skipped: "))
		}
		if strings.TrimSpace(line) != "" {
			last = line
		}
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	if m := regexp.MustCompile(`^matrix: 0 of (\d+) builds ran`).FindStringSubmatch(last); m != nil && err == nil {
		t.Skipf("skipped: no server build found for the compatibility matrix (%s); set SLOTMOVER_REDIS_SERVER=/path/to/redis-server to run the tests against another build",
			strings.Join(skipped, "; "))
	}
	if ctx.Err() != nil {
		t.Fatalf(".ci/matrix stopped (process group killed) near the test deadline: %v; run it with a longer -timeout", ctx.Err())
	}
	if err != nil {
		t.Fatalf(".ci/matrix: %v (%s)", err, last)
	}
	if len(skipped) > 0 {
		t.Logf("builds absent: %s", strings.Join(skipped, "; "))
	}
}
