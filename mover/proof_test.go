package mover

import (
	"errors"
	"strings"
	"testing"
)

func TestVerifyQuiet(t *testing.T) {
	base := errorCounts{quiet: 10, replies: 100, harmless: 40}
	importing := func() (bool, error) { return true, nil }
	notImporting := func() (bool, error) { return false, nil }
	unasked := func() (bool, error) { t.Fatal("asked about the marks"); return false, nil }
	for _, c := range []struct {
		name   string
		after  errorCounts
		marks  func() (bool, error)
		errHas string // "" for a proof
	}{
		{"nothing failed, other errors elsewhere", errorCounts{10, 150, 40}, unasked, ""},
		{"only redirections meanwhile", errorCounts{13, 103, 43}, importing, ""},
		{"a refusal of another kind", errorCounts{13, 104, 43}, importing, "1 of its error replies were not redirections"},
		{"out of memory, nothing else", errorCounts{15, 105, 40}, unasked, "5 SET/RESTORE commands failed"},
		{"redirections, marks gone", errorCounts{13, 103, 43}, notImporting, "lost the slots' IMPORTING marks"},
		{"statistics reset", errorCounts{0, 3, 0}, unasked, "reset"},
		{"marks unreadable", errorCounts{13, 103, 43}, func() (bool, error) { return false, errors.New("boom") }, "boom"},
	} {
		others, err := verifyQuiet(base, c.after, c.marks)
		if err == nil && others != c.after.quiet-base.quiet {
			t.Errorf("%s: %d failures put down to other clients, want %d", c.name, others, c.after.quiet-base.quiet)
		}
		switch {
		case c.errHas == "" && err != nil:
			t.Errorf("%s: %v, want a proof", c.name, err)
		case c.errHas != "" && (err == nil || !strings.Contains(err.Error(), c.errHas)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.errHas)
		}
	}
}
