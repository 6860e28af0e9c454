// Package slots is the hash-slot arithmetic shared by every part of slotmover:
// which slot a key lives in, and sets of slots written as operator specs
// such as "0-5460,6000".
package slots

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// ForKey returns the slot of key, honouring a {hash tag} the way Redis does:
// the first '{' followed, later, by a '}' with at least one byte between them.
func ForKey(key []byte) uint16 {
	if open := indexByte(key, '{'); open >= 0 {
		if n := indexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return crc16(key) & (Count - 1)
}

// ForString is ForKey for a string key.
func ForString(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var c uint16
	for i := 0; i < len(key); i++ {
		c = c<<8 ^ crc16Table[byte(c>>8)^key[i]]
	}
	return c & (Count - 1)
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// Range is an inclusive run of slots.
type Range struct{ Start, End uint16 }

func (r Range) String() string {
	if r.Start == r.End {
		return strconv.Itoa(int(r.Start))
	}
	return fmt.Sprintf("%d-%d", r.Start, r.End)
}

// Set is a set of slots. The zero value is empty and ready to use.
type Set struct{ bits [Count / 64]uint64 }

// NewSet returns the set holding every slot of the given ranges.
func NewSet(ranges ...Range) *Set {
	s := &Set{}
	for _, r := range ranges {
		s.AddRange(r)
	}
	return s
}

// AddRange puts every slot of r into the set.
func (s *Set) AddRange(r Range) {
	for x := int(r.Start); x <= int(r.End); x++ {
		s.Add(uint16(x))
	}
}

// Add puts slot into the set.
func (s *Set) Add(slot uint16) { s.bits[slot/64] |= 1 << (slot % 64) }

// Contains reports whether slot is in the set. Out-of-range slots are not.
func (s *Set) Contains(slot uint16) bool {
	return slot < Count && s.bits[slot/64]&(1<<(slot%64)) != 0
}

// Len returns the number of slots in the set.
func (s *Set) Len() int {
	n := 0
	for _, w := range s.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// Ranges returns the set as sorted, maximal ranges.
func (s *Set) Ranges() []Range {
	var out []Range
	for x := 0; x < Count; x++ {
		if !s.Contains(uint16(x)) {
			continue
		}
		start := x
		for x+1 < Count && s.Contains(uint16(x+1)) {
			x++
		}
		out = append(out, Range{uint16(start), uint16(x)})
	}
	return out
}

// Slots returns every slot in the set in ascending order.
func (s *Set) Slots() []uint16 {
	var out []uint16
	for x := 0; x < Count; x++ {
		if s.Contains(uint16(x)) {
			out = append(out, uint16(x))
		}
	}
	return out
}

// String formats the set as a spec that Parse reads back.
func (s *Set) String() string {
	rs := s.Ranges()
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// Parse reads a spec of comma-separated slots and inclusive ranges, such as
// "0-5460" or "100-200,3000,5000-5100". It refuses empty parts, reversed or
// out-of-range bounds, and parts that overlap: a spec that says a slot twice
// is more likely a typo than an intent.
func Parse(spec string) (*Set, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("slot spec is empty")
	}
	var ranges []Range
	for _, part := range strings.Split(spec, ",") {
		r, err := ParseRange(part)
		if err != nil {
			return nil, err
		}
		ranges = append(ranges, r)
	}
	sorted := append([]Range(nil), ranges...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Start <= sorted[i-1].End {
			return nil, fmt.Errorf("slot ranges %s and %s overlap", sorted[i-1], sorted[i])
		}
	}
	return NewSet(ranges...), nil
}

// ParseRange reads one slot ("3000") or range ("0-5460").
func ParseRange(part string) (Range, error) {
	lo, hi, isRange := strings.Cut(part, "-")
	start, err := parseSlot(lo, part)
	if err != nil {
		return Range{}, err
	}
	end := start
	if isRange {
		if end, err = parseSlot(hi, part); err != nil {
			return Range{}, err
		}
		if end < start {
			return Range{}, fmt.Errorf("slot range %q: end before start", part)
		}
	}
	return Range{start, end}, nil
}

func parseSlot(s, part string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("slot spec part %q: missing number", part)
	}
	// Digits only: Atoi would take a sign, and a stray space or sign is
	// more likely a mistyped spec than a slot.
	if strings.Trim(s, "0123456789") != "" || len(s) > 5 {
		return 0, fmt.Errorf("slot spec part %q: %q is not a slot number (digits only, no spaces or signs)", part, s)
	}
	n, _ := strconv.Atoi(s)
	if n < 0 || n >= Count {
		return 0, fmt.Errorf("slot spec part %q: slot %d is out of range 0-%d", part, n, Count-1)
	}
	return uint16(n), nil
}
