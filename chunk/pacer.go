package chunk

// Pacer sizes the successive scans of one big key on the source (the
// COUNT of each ZSCAN, HSCAN or SSCAN) so that each holds the source's
// main thread for about the limit's Time by the cost model, for elements
// the size of those the last scans returned, and its reply stays within
// maxReply. The first scan is small (the elements' size is not known
// yet); each next one grows by half at most and shrinks at once.
//
// The model, not the round trip, is the measure: most of a scan's round
// trip is the transfer and decoding of its reply, not the source's work
// (a sorted set's 256 members take 0.15 ms on the source and 0.4-1 ms to
// come back), and TIME inside a transaction or a script stands still on
// Redis 7.2+ and Valkey 8.
type Pacer struct {
	lim     Limit
	cost    Cost
	count   int
	avgSize float64 // bytes of an element, averaged over the scans so far; 0 before the first
}

// Bounds of a scan.
const (
	// firstScan is the largest first scan: 1 MB of 4 KB elements.
	firstScan = 256
	// maxScan keeps the reply of many tiny elements in bounds too.
	maxScan = 16_384
	// maxReply bounds the bytes of elements in one reply, which the
	// source keeps in its output buffer and the mover in memory.
	maxReply = 1 << 20
)

// NewPacer returns a pacer for scans by the named command (ZSCAN, HSCAN,
// SSCAN).
func NewPacer(l Limit, command string) *Pacer {
	l = l.withDefaults()
	p := &Pacer{lim: l, cost: CostOf(command)}
	p.count = clampScan(min(firstScan, p.fits(0)))
	return p
}

// Count is the COUNT of the next scan.
func (p *Pacer) Count() int { return p.count }

// Observe takes a scan that returned elements elements of bytes bytes in
// all. A scan that returned none says nothing of their size.
func (p *Pacer) Observe(elements, bytes int) {
	if elements <= 0 {
		return
	}
	size := float64(bytes) / float64(elements)
	if p.avgSize == 0 {
		p.avgSize = size
	} else {
		p.avgSize = (p.avgSize + size) / 2
	}
	p.count = clampScan(min(p.fits(p.avgSize), p.count+p.count/2))
}

// fits is how many elements of size bytes one scan may read.
func (p *Pacer) fits(size float64) int {
	n := float64(p.lim.Time.Nanoseconds()) / (p.cost.Element + p.cost.Byte*size)
	if size > 0 {
		n = min(n, maxReply/size)
	}
	return int(n)
}

func clampScan(n int) int { return max(1, min(n, maxScan)) }
