package throttle

import "time"

// serverClock turns a probe's times into how long the server took to
// answer it as a client sees it, by the server's clock rather than the
// round trip alone. The sidecar runs niced: on a host short of CPU it waits
// to run once the reply is back, and a round trip counts that wait as the
// server's. The server's TIME, taken when it runs the probe, ends the part
// that is the server's: from the send to that moment, plus the way back at
// its quickest. It does no I/O and keeps no clock.
//
// The server's clock is read against ours by the probe with the smallest
// round trip (the offset is off by at most half of it), as NTP does; that
// bound grows with the probe's age by maxDrift, so a later quick probe
// takes over while the clocks drift apart.
type serverClock struct {
	offset time.Duration // the server's clock minus ours
	rtt    time.Duration // the round trip of the probe it was read by; 0 until one
	at     time.Time     // when that probe was sent
}

// maxDrift is how fast two hosts' clocks may drift apart, beyond what NTP
// keeps them to. A drift that puts the server's clock behind shows at once
// (the probe would arrive before it was sent) and one ahead only brings
// the latency up to the round trip, so a low bound errs on the safe side.
const maxDrift = 100e-6

// latency is the probe's time as the server made it: sent and received by
// our clock, served by the server's. It is never more than the round trip.
func (c *serverClock) latency(sent, served, received time.Time) time.Duration {
	rtt := received.Sub(sent)
	ahead := served.Sub(sent) // the server's clock against our wall clock
	// Read the clock again on a quicker probe, or on one that would have
	// arrived before it was sent: a clock stepped back.
	if c.rtt == 0 || rtt <= c.bound(sent) || ahead < c.offset {
		c.offset, c.rtt, c.at = ahead-rtt/2, max(rtt, time.Microsecond), sent
	}
	return min(ahead-c.offset+c.rtt/2, rtt)
}

// bound is twice how far off the offset may be at now.
func (c *serverClock) bound(now time.Time) time.Duration {
	return c.rtt + time.Duration(2*maxDrift*float64(now.Sub(c.at)))
}
