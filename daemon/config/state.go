package config

import (
	"errors"
	"path/filepath"
	"strings"
)

// DirOrDefault returns the state directory: Dir if set, else the first of
// systemd's $STATE_DIRECTORY (a unit's StateDirectory=), else
// $XDG_STATE_HOME/slotmover, else ~/.local/state/slotmover. getenv reads
// the environment (os.Getenv).
func (s State) DirOrDefault(getenv func(string) string) (string, error) {
	if s.Dir != "" {
		return s.Dir, nil
	}
	if d, _, _ := strings.Cut(getenv("STATE_DIRECTORY"), ":"); d != "" {
		return d, nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "slotmover"), nil
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "state", "slotmover"), nil
	}
	return "", errors.New("state.dir: not set, and no $STATE_DIRECTORY, $XDG_STATE_HOME nor $HOME to default to")
}
