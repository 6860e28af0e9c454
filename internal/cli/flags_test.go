package cli

import (
	"errors"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestParse(t *testing.T) {
	cases := []struct {
		args  []string
		n     int
		on    bool
		words []string
	}{
		{args: []string{"--count", "3", "--on"}, n: 3, on: true},
		{args: []string{"-n", "3"}, n: 3},                                             // a shorthand
		{args: []string{"-count=4", "-on"}, n: 4, on: true},                           // package flag's one dash
		{args: []string{"a", "--count", "-1", "b"}, n: -1, words: []string{"a", "b"}}, // a negative value, words anywhere
		{args: []string{"--", "-count=5"}, n: 0, words: []string{"-count=5"}},         // after --, a word
	}
	for _, tc := range cases {
		fs := NewFlagSet("t")
		n := fs.IntP("count", "n", 0, "")
		on := fs.Bool("on", false, "")
		if err := Parse(fs, tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if *n != tc.n || *on != tc.on || !slices.Equal(fs.Args(), tc.words) && len(fs.Args())+len(tc.words) > 0 {
			t.Fatalf("%q: count %d on %v words %q; want %d %v %q", tc.args, *n, *on, fs.Args(), tc.n, tc.on, tc.words)
		}
	}
	fs := NewFlagSet("t")
	cluster := fs.String("cluster", "", "")
	Rename(fs, map[string]string{"node": "cluster"})
	if err := Parse(fs, []string{"-node", "a:1"}); err != nil || *cluster != "a:1" {
		t.Fatalf("the old name: %v, --cluster %q", err, *cluster)
	}
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if err := Parse(fs, []string{"-nope"}); err == nil {
		t.Fatal("an unknown one-dash word parsed")
	}
}
