package tests

import (
	"strings"
	"syscall"
	"testing"

	"github.com/slotmover/slotmover/tests/harness"
)

// One sidecar per node. A second `slotmover serve` for a node whose
// sidecar runs is refused (exit 2), naming that sidecar: at once if it
// shares the state directory, after the claim's lapse on NATS if not. A
// sidecar killed with -9 does not block the next one: its claim, no
// longer renewed, is taken over.
func TestServeRefusesASecondSidecar(t *testing.T) {
	c := fourMasters(t)
	natsURL := harness.NATS(t)
	node := c.Nodes[3].Addr
	d := startDaemon(t, node, natsURL, "", "")
	for _, tc := range []struct {
		name, stateHome, want string
	}{
		{"same state directory", stateHome(t), "another sidecar holds this node's state"},
		{"another state directory", t.TempDir(), "another sidecar serves this node"},
	} {
		code, stdout, stderr := runCLIEnv(t, []string{"STATE_DIRECTORY=", "XDG_STATE_HOME=" + tc.stateHome},
			"serve", "--node", node, "--admin", freeAddr(t), "--metrics", "", "--nats", natsURL)
		out := stdout + stderr
		t.Logf("%s: %s", tc.name, out)
		if code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, "admin port "+d.admin) {
			t.Fatalf("%s: exit %d, want 2, %q and the first sidecar's admin port %s:\n%s", tc.name, code, tc.want, d.admin, out)
		}
	}
	if out, err := d.cli(t, "PING"); err != nil || strings.TrimSpace(out) != "PONG" {
		t.Fatalf("the first sidecar after the refusals: %v %q", err, out)
	}

	d.cmd.Process.Kill()
	d.cmd.Wait()
	d2 := startDaemonEnv(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, node, natsURL, "", "")
	d2.cmd.Process.Signal(syscall.SIGTERM)
	if err := d2.cmd.Wait(); err != nil {
		t.Fatalf("the second sidecar after SIGTERM: %v", err)
	}
	if log := d2.log.String(); !strings.Contains(log, "took over the claim") || !strings.Contains(log, "admin port "+d.admin) {
		t.Fatalf("the second sidecar does not say it took the dead one's claim over:\n%s", log)
	}
}
