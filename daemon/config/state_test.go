package config

import "testing"

// The state directory defaults to systemd's, then XDG's, then the home's.
func TestStateDirDefault(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		env  map[string]string
		want string
	}{
		{"/srv/sm", map[string]string{"STATE_DIRECTORY": "/var/lib/x"}, "/srv/sm"},
		{"", map[string]string{"STATE_DIRECTORY": "/var/lib/slotmover:/var/lib/other", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/var/lib/slotmover"},
		{"", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/slotmover"},
		{"", map[string]string{"HOME": "/h"}, "/h/.local/state/slotmover"},
		{"", nil, ""},
	} {
		got, err := State{Dir: tc.dir}.DirOrDefault(envMap(tc.env))
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("dir %q, env %v: %q %v, want %q", tc.dir, tc.env, got, err, tc.want)
		}
	}
}
