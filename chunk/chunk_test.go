package chunk

import (
	"slices"
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	ms := Limit{Time: time.Millisecond, Elements: 1000}
	size := func(b int) func(int) int { return func(int) int { return b } }
	for _, tc := range []struct {
		name    string
		lim     Limit
		command string
		n, size int
		want    []int // the length of each run
	}{
		{"small members: by time", ms, "ZADD", 2500, 16, runs(108, 2500)},
		{"4 KB members: fewer", ms, "ZADD", 200, 4096, runs(33, 200)},
		{"1 MB values: one a command", ms, "HSET", 3, 1 << 20, []int{1, 1, 1}},
		{"cheap pushes: the cap", Limit{Time: 4 * time.Millisecond, Elements: 1000}, "RPUSH", 1500, 8, runs(1000, 1500)},
		{"a smaller cap", Limit{Time: 10 * time.Millisecond, Elements: 250}, "SADD", 600, 16, runs(250, 600)},
		{"zero limit: the defaults", Limit{}, "SADD", 1001, 16, runs(116, 1001)},
		{"unknown command: the dearest cost", ms, "XCLAIM", 2000, 16, runs(108, 2000)},
		{"nothing", ms, "ZADD", 0, 16, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			next := 0
			for start, end := range tc.lim.Split(tc.command, tc.n, size(tc.size)) {
				if start != next || end <= start {
					t.Fatalf("run [%d, %d) after %d", start, end, next)
				}
				got, next = append(got, end-start), end
			}
			if next != tc.n {
				t.Fatalf("runs end at %d, want %d", next, tc.n)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("runs %v, want %v", got, tc.want)
			}
		})
	}
}

// runs is n elements in runs of per, the last one shorter.
func runs(per, n int) []int {
	var out []int
	for ; n > 0; n -= per {
		out = append(out, min(per, n))
	}
	return out
}

func TestSplitStops(t *testing.T) {
	n := 0
	for range (Limit{Elements: 10}).Split("SADD", 100, func(int) int { return 1 }) {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("%d runs", n)
	}
}

func TestPacer(t *testing.T) {
	ms := Limit{Time: time.Millisecond}
	type scan struct {
		elements, size int // elements returned, bytes each
		want           int // Count after it
	}
	for _, tc := range []struct {
		name    string
		lim     Limit
		command string
		first   int
		scans   []scan
	}{
		{"small members: grows by half a scan to what fits", ms, "ZSCAN", 256, []scan{
			{256, 14, 384}, {384, 14, 576}, {576, 14, 864}, {864, 14, 1077}, {1077, 14, 1077},
		}},
		{"4 KB values: the reply's bound", ms, "HSCAN", 256, []scan{{256, 4100, 255}, {255, 4100, 255}}},
		{"2 KB members", ms, "SSCAN", 256, []scan{{256, 2000, 384}, {384, 2000, 520}, {520, 2000, 520}}},
		{"bigger elements: shrinks at once", ms, "ZSCAN", 256, []scan{
			{256, 14, 384}, {384, 14, 576}, {576, 65536 - 14, 32}, {32, 65536, 21},
		}},
		{"an empty scan says nothing", ms, "ZSCAN", 256, []scan{{0, 0, 256}}},
		{"huge elements: one a scan", ms, "HSCAN", 256, []scan{{1, 10 << 20, 1}}},
		{"a tight limit: a smaller first scan", Limit{Time: 100 * time.Microsecond}, "ZSCAN", 108, nil},
		{"tiny elements: the ceiling", Limit{Time: 100 * time.Millisecond}, "SSCAN", 256, []scan{
			{256, 8, 384}, {384, 8, 576}, {576, 8, 864}, {864, 8, 1296}, {1296, 8, 1944}, {1944, 8, 2916},
			{2916, 8, 4374}, {4374, 8, 6561}, {6561, 8, 9841}, {9841, 8, 14761}, {14761, 8, maxScan},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPacer(tc.lim, tc.command)
			if p.Count() != tc.first {
				t.Fatalf("first count %d, want %d", p.Count(), tc.first)
			}
			for i, s := range tc.scans {
				p.Observe(s.elements, s.elements*s.size)
				if p.Count() != s.want {
					t.Fatalf("after scan %d (%d elements of %d bytes): count %d, want %d", i, s.elements, s.size, p.Count(), s.want)
				}
			}
		})
	}
}
