package main

import "testing"

// An admin port off loopback without a password refuses the start, as
// other configuration errors do, before anything is reached.
func TestServeRefusesAnOpenAdminPortWithoutPassword(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if code := serveCmd([]string{"--node", "127.0.0.1:1", "--admin", listen, "--metrics", ""}); code != exitRefused {
			t.Errorf("--admin %s without a password: exit %d, want %d", listen, code, exitRefused)
		}
	}
}
