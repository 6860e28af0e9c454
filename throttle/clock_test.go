package throttle

import (
	"testing"
	"time"
)

func TestServerClockLatency(t *testing.T) {
	const us = time.Microsecond
	// probe is one round trip: the server's clock ahead of ours by offset,
	// the request's way there and the reply's way back (with any wait of
	// ours to read it).
	type probe struct{ offset, there, back time.Duration }
	quick := probe{0, 50 * us, 50 * us}
	lateReader := probe{0, 50 * us, 30 * time.Millisecond}
	quickBack := probe{-time.Second, 50 * us, 50 * us}
	for _, tc := range []struct {
		name   string
		probes []probe
		want   []time.Duration // the latency of each probe
	}{
		{"quick round trips", []probe{quick, quick}, []time.Duration{100 * us, 100 * us}},
		{"the reply read late is not the server's", []probe{quick, lateReader, quick},
			[]time.Duration{100 * us, 100 * us, 100 * us}},
		{"a server slow to answer", []probe{quick, {0, 30 * time.Millisecond, 50 * us}},
			[]time.Duration{100 * us, 30*time.Millisecond + 50*us}},
		{"a server slow to answer and a reply read late", []probe{quick, {0, 25 * time.Millisecond, 10 * time.Millisecond}},
			[]time.Duration{100 * us, 25*time.Millisecond + 50*us}},
		{"another host's clock, 5 s ahead", []probe{{5 * time.Second, 50 * us, 50 * us}, {5 * time.Second, 50 * us, 30 * time.Millisecond}},
			[]time.Duration{100 * us, 100 * us}},
		{"a quicker probe reads the clock again", []probe{{0, 2 * time.Millisecond, 2 * time.Millisecond}, {time.Millisecond, 50 * us, 50 * us}, {time.Millisecond, 50 * us, 30 * time.Millisecond}},
			[]time.Duration{4 * time.Millisecond, 100 * us, 100 * us}},
		// Back, a probe would arrive before it was sent: the clock is read
		// again, even by a slow one.
		{"the server's clock stepped back", []probe{quick, {-time.Second, 5 * time.Millisecond, 50 * us}, quickBack, {-time.Second, 50 * us, 30 * time.Millisecond}},
			[]time.Duration{100 * us, 5*time.Millisecond + 50*us, 100 * us, 100 * us}},
		// Ahead, the clock only makes the server look slower, up to the
		// round trip, until a quick probe reads it again.
		{"the server's clock stepped ahead", []probe{quick, {time.Second, 50 * us, 30 * time.Millisecond}, {time.Second, 50 * us, 50 * us}, {time.Second, 50 * us, 30 * time.Millisecond}},
			[]time.Duration{100 * us, 30*time.Millisecond + 50*us, 100 * us, 100 * us}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c serverClock
			sent := time.Unix(1_800_000_000, 0)
			for i, p := range tc.probes {
				got := c.latency(sent, sent.Add(p.offset+p.there), sent.Add(p.there+p.back))
				if got != tc.want[i] {
					t.Fatalf("probe %d (%+v): latency %s, want %s", i, p, got, tc.want[i])
				}
				sent = sent.Add(10 * time.Millisecond)
			}
		})
	}
}
