package mover

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/slotmover/slotmover/slotread"
	"github.com/slotmover/slotmover/stream"
)

// TestReads plays the ledger of reads through steps, as the lister, the
// resyncs and the feeder drive it, and checks what each read brings to
// the target where the stream reaches it, and what stays held back:
//
//	list a b       a listing found keys a and b (their reads not made yet)
//	read r a big:c read r (a name) is made, marked; it copies a, c is big
//	refused r      read r's call was refused: it wrote no marker
//	resync r@N a   a resync r of a, read at offset N
//	marker r       read r's marker block comes through the stream
//	stream N       the stream is applied through offset N (resyncs due)
//	release a      a's commands apply again (a big key's first chunk)
//
// brings lists, per read finished, the copies it restores ("r: a b").
func TestReads(t *testing.T) {
	cases := []struct {
		name     string
		steps    []string
		brings   []string
		deferred []string // held back at the end
		inFlight int      // marked reads whose marker has not come
	}{
		{"a listed key is held until its read's marker",
			[]string{"list a b", "read r1 a b"}, nil, []string{"a", "b"}, 1},
		{"a read's marker brings its copies and lets them go",
			[]string{"list a b", "read r1 a b", "marker r1"}, []string{"r1: a b"}, nil, 0},
		{"a big key is not held by the read that reports it: its chunks hold it",
			[]string{"list a c", "read r1 a big:c", "marker r1"}, []string{"r1: a"}, []string{"c"}, 0},
		{"a later read of a key holds it past an earlier one's marker",
			[]string{"read r1 a b", "read r2 b", "marker r1", "marker r2"}, []string{"r1: a", "r2: b"}, nil, 0},
		{"a refused call leaves its keys awaiting a read",
			[]string{"list a", "read r1 a", "refused r1"}, nil, []string{"a"}, 0},
		{"a marker of a refused call is not a read's",
			[]string{"list a", "read r1 a", "refused r1", "marker r1"}, nil, []string{"a"}, 0},
		{"a resync brings its keys where the stream reaches its offset, not before",
			[]string{"resync s1@200 a", "stream 199"}, nil, []string{"a"}, 0},
		{"resyncs finish in the stream's order",
			[]string{"resync s1@200 a", "resync s2@300 b", "stream 300"}, []string{"s1: a", "s2: b"}, nil, 0},
		{"a resync after a read holds the key past the read's marker",
			[]string{"read r1 a", "resync s1@200 a", "marker r1", "stream 200"}, []string{"r1: ", "s1: a"}, nil, 0},
		{"a released key applies again",
			[]string{"list c", "release c"}, nil, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := newReads("t")
			byName := map[string]*pendingRead{}
			nameOf := map[*pendingRead]string{}
			refused := map[string]*pendingRead{}
			var brings []string
			finish := func(name string, r *pendingRead) {
				var keys []string
				for _, k := range rs.finish(r) {
					keys = append(keys, k.Name)
				}
				brings = append(brings, name+": "+strings.Join(keys, " "))
			}
			for _, step := range c.steps {
				w := strings.Fields(step)
				switch w[0] {
				case "list":
					rs.await(w[1:]...)
				case "read":
					r := rs.marked(7)
					for _, k := range w[2:] {
						name, big := strings.CutPrefix(k, "big:")
						r.keys = append(r.keys, slotread.Key{Name: name, Big: big})
					}
					rs.deferTo(r)
					byName[w[1]] = r
					nameOf[r] = w[1]
				case "refused":
					rs.drop(byName[w[1]])
					refused[w[1]] = byName[w[1]]
				case "resync":
					name, at, _ := strings.Cut(w[1], "@")
					off, _ := strconv.ParseInt(at, 10, 64)
					var keys []slotread.Key
					for _, k := range w[2:] {
						keys = append(keys, slotread.Key{Name: k})
					}
					nameOf[rs.readAt(off, keys)] = name
				case "marker":
					if got := rs.of(markerBlock(byName[w[1]])); got != nil {
						finish(nameOf[got], got)
					}
				case "stream":
					end, _ := strconv.ParseInt(w[1], 10, 64)
					for r := rs.due(end); r != nil; r = rs.due(end) {
						finish(nameOf[r], r)
					}
				case "release":
					rs.release(w[1])
				default:
					t.Fatalf("unknown step %q", step)
				}
			}
			if !slices.Equal(brings, c.brings) {
				t.Errorf("brought %q, want %q", brings, c.brings)
			}
			var held []string
			for k := range rs.deferred {
				held = append(held, k)
			}
			slices.Sort(held)
			if !slices.Equal(held, c.deferred) || rs.count.Load() != int64(len(c.deferred)) {
				t.Errorf("held back %q (count %d), want %q", held, rs.count.Load(), c.deferred)
			}
			if n := rs.inFlight(); n != c.inFlight {
				t.Errorf("%d reads in flight, want %d", n, c.inFlight)
			}
		})
	}
}

// markerBlock is the block a marked read writes in the stream: the
// marker's SET with the read's nonce, and its DEL.
func markerBlock(r *pendingRead) *stream.Command {
	set := [][]byte{[]byte("SET"), r.marker, []byte(r.nonce())}
	return &stream.Command{Tx: []stream.Command{
		{Args: set, Class: stream.ClassKeyed, Keys: []int{1}},
		{Args: [][]byte{[]byte("DEL"), r.marker}, Class: stream.ClassKeyed, Keys: []int{1}},
	}}
}

func TestReadsMarkerNeedsItsNonce(t *testing.T) {
	rs := newReads("t")
	r := rs.marked(7)
	other := &pendingRead{id: r.id + 1, marker: r.marker}
	if got := rs.of(markerBlock(other)); got != nil {
		t.Fatalf("the marker with another read's nonce was taken for read %d", got.id)
	}
	if got := rs.of(markerBlock(r)); got != r {
		t.Fatalf("read %d's marker block not recognized", r.id)
	}
}
