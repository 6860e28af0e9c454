package rdbparse

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"strconv"
	"time"

	"github.com/slotmover/slotmover/slots"
)

// RDB opcodes.
const (
	opSlotInfo      = 0xF4 // Redis >= 7.4, cluster mode: slot id, keys, expires
	opFunction2     = 0xF5
	opFunctionPreGA = 0xF6 // Redis 7.0 release candidates only
	opModuleAux     = 0xF7
	opIdle          = 0xF8
	opFreq          = 0xF9
	opAux           = 0xFA
	opResizeDB      = 0xFB
	opExpireMs      = 0xFC
	opExpire        = 0xFD
	opSelectDB      = 0xFE
	opEOF           = 0xFF
)

// RDB value types (the type byte before a key, and the first byte of a DUMP payload).
const (
	TypeString              = 0
	TypeList                = 1
	TypeSet                 = 2
	TypeZset                = 3
	TypeHash                = 4
	TypeZset2               = 5
	TypeModule              = 6
	TypeModule2             = 7
	TypeHashZipmap          = 9
	TypeListZiplist         = 10
	TypeSetIntset           = 11
	TypeZsetZiplist         = 12
	TypeHashZiplist         = 13
	TypeListQuicklist       = 14
	TypeStreamListpacks     = 15
	TypeHashListpack        = 16
	TypeZsetListpack        = 17
	TypeListQuicklist2      = 18
	TypeStreamListpacks2    = 19
	TypeSetListpack         = 20
	TypeStreamListpacks3    = 21
	TypeHashMetadataPreGA   = 22 // hash with field TTLs, Redis 7.4 RC
	TypeHashListpackExPreGA = 23
	TypeHashMetadata        = 24 // hash with field TTLs, Redis >= 7.4
	TypeHashListpackEx      = 25
)

// Module value opcodes (RDB_MODULE_OPCODE_*).
const (
	modEOF    = 0
	modSInt   = 1
	modUInt   = 2
	modFloat  = 3
	modDouble = 4
	modString = 5
)

// MaxVersion is the newest RDB format the scanner reads (Redis 7.4).
const MaxVersion = 12

// minVersion is the oldest format read: the first with a trailing checksum.
const minVersion = 5

// Entry is one key of a chosen slot. Key and Payload alias the scanner's
// buffers: valid until the next Next call.
type Entry struct {
	DB       int
	Key      []byte
	Slot     uint16
	Type     byte  // RDB object type byte as written in the file
	ExpireAt int64 // absolute unix time in ms; 0 = no expiry
	// Elements is the value's size: the byte length of a string, else its
	// element count (list items, set members, hash fields, zset members,
	// stream entries), read from the blob headers for compact encodings. 0
	// for module values.
	Elements uint64
	// Payload is a valid RESTORE payload: type byte, raw value bytes, the
	// source RDB version (2 bytes LE) and CRC-64/Jones of all that (8 bytes LE).
	Payload []byte
}

// Stats counts what a scan met. Keys = Chosen + Skipped + Expired.
type Stats struct {
	Keys      int64 // key records read
	Chosen    int64 // returned by Next
	Skipped   int64 // of a slot not chosen
	Expired   int64 // of a chosen slot, but already expired
	Bytes     int64 // bytes consumed from the reader
	Functions int   // function libraries (FUNCTION2 records)
	ModuleAux int   // module aux records
}

// Option configures a Scanner.
type Option func(*Scanner)

// WithClock sets the clock that decides which keys have expired already
// (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *Scanner) { s.now = now }
}

// OnExpired sets a function called with every key of a chosen slot that
// the scanner leaves out because it has expired already, and its expiry
// time; the key is valid only during the call.
func OnExpired(fn func(key []byte, expireAt int64)) Option {
	return func(s *Scanner) { s.onExpired = fn }
}

// Scanner reads one RDB stream and returns the keys of the chosen slots.
type Scanner struct {
	rd   reader
	want *slots.Set
	now  func() time.Time
	// onExpired hears of chosen keys left out as expired (OnExpired).
	onExpired func(key []byte, expireAt int64)
	version   int
	err       error // sticky: io.EOF after the checksum, or the first failure
	started   bool

	db       int
	expireAt int64
	entry    Entry
	key      []byte
	scratch  []byte
	funcs    [][]byte
	stats    Stats
}

// NewScanner returns a scanner of the RDB stream in r. It consumes exactly
// the RDB's bytes from r, so r may go on with other data. want nil chooses no slot.
func NewScanner(r *bufio.Reader, want *slots.Set, opts ...Option) *Scanner {
	if want == nil {
		want = &slots.Set{}
	}
	s := &Scanner{rd: reader{r: r}, want: want, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Version returns the RDB version from the header (valid after the first Next).
func (s *Scanner) Version() int { return s.version }

// Stats returns the counts so far.
func (s *Scanner) Stats() Stats {
	st := s.stats
	st.Bytes = s.rd.off()
	return st
}

// Functions returns the function libraries met so far, each the source
// that FUNCTION LOAD takes.
func (s *Scanner) Functions() [][]byte { return s.funcs }

// Next returns the next key of a chosen slot. It returns io.EOF only after
// the EOF opcode and a verified checksum; any other error is final too.
func (s *Scanner) Next() (*Entry, error) {
	if s.err != nil {
		return nil, s.err
	}
	e, err := s.next()
	if err != nil {
		s.err = err
		return nil, err
	}
	return e, nil
}

func (s *Scanner) next() (*Entry, error) {
	rd := &s.rd
	if !s.started {
		if err := s.header(); err != nil {
			return nil, err
		}
		s.started = true
	}
	for {
		at := rd.off()
		op, err := rd.byte()
		if err != nil {
			return nil, err
		}
		switch op {
		case opEOF:
			return nil, s.checksum()
		case opSelectDB:
			n, err := rd.plainLen()
			if err != nil {
				return nil, err
			}
			s.db = int(n)
		case opResizeDB:
			if _, err := rd.plainLen(); err != nil {
				return nil, err
			}
			if _, err := rd.plainLen(); err != nil {
				return nil, err
			}
		case opExpire:
			p, err := rd.bytes(4)
			if err != nil {
				return nil, err
			}
			s.expireAt = int64(binary.LittleEndian.Uint32(p)) * 1000
		case opExpireMs:
			p, err := rd.bytes(8)
			if err != nil {
				return nil, err
			}
			s.expireAt = int64(binary.LittleEndian.Uint64(p))
		case opIdle:
			if _, err := rd.plainLen(); err != nil {
				return nil, err
			}
		case opFreq:
			if err := rd.skip(1); err != nil {
				return nil, err
			}
		case opAux:
			if err := rd.skipString(); err != nil {
				return nil, err
			}
			if err := rd.skipString(); err != nil {
				return nil, err
			}
		case opFunction2:
			var code []byte
			if code, s.scratch, err = rd.readString(nil, s.scratch); err != nil {
				return nil, err
			}
			s.funcs = append(s.funcs, code)
			s.stats.Functions++
		case opFunctionPreGA:
			// Redis itself refuses this format (written by 7.0 release candidates only).
			return nil, errf(at, "function library in the pre-GA format of Redis 7.0 release candidates is not supported")
		case opModuleAux:
			if err := s.moduleAux(at); err != nil {
				return nil, err
			}
			s.stats.ModuleAux++
		case opSlotInfo:
			for i := 0; i < 3; i++ {
				if _, err := rd.plainLen(); err != nil {
					return nil, err
				}
			}
		default:
			if !isValueType(op) {
				return nil, errf(at, "unknown opcode 0x%02x", op)
			}
			if e, err := s.keyValue(op); e != nil || err != nil {
				return e, err
			}
		}
	}
}

func (s *Scanner) header() error {
	p, err := s.rd.bytes(9)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(p, []byte("REDIS")) {
		return errf(0, "not an RDB stream: header %q", p)
	}
	v, err := strconv.Atoi(string(p[5:]))
	if err != nil || v < 0 {
		return errf(5, "bad RDB version %q", p[5:])
	}
	if v < minVersion || v > MaxVersion {
		return errf(5, "RDB version %d is not supported (only %d to %d)", v, minVersion, MaxVersion)
	}
	s.version = v
	return nil
}

// checksum reads and checks the trailing CRC, leaving r just past it.
func (s *Scanner) checksum() error {
	rd := &s.rd
	rd.commit() // the CRC covers everything up to and including the EOF opcode
	at := rd.off()
	if err := rd.need(8); err != nil {
		return err
	}
	want := binary.LittleEndian.Uint64(rd.win[rd.pos:])
	rd.pos += 8
	got := rd.crc
	// Discarding buffered bytes cannot fail; the hash of these 8 is unused.
	_, _ = rd.r.Discard(rd.pos)
	rd.base += int64(rd.pos)
	rd.win, rd.pos = nil, 0
	if want != 0 && want != got { // 0: the writer had rdbchecksum off
		return errf(at, "checksum mismatch: file says %016x, content hashes to %016x", want, got)
	}
	return io.EOF
}

// keyValue reads one key and its value; it returns nil, nil for a key not returned.
func (s *Scanner) keyValue(typ byte) (*Entry, error) {
	rd := &s.rd
	expireAt := s.expireAt
	s.expireAt = 0
	var err error
	if s.key, s.scratch, err = rd.readString(s.key, s.scratch); err != nil {
		return nil, err
	}
	s.stats.Keys++
	slot := slots.ForKey(s.key)
	chosen := s.want.Contains(slot)
	if chosen && expireAt != 0 && expireAt < s.now().UnixMilli() {
		chosen = false
		s.stats.Expired++
		if s.onExpired != nil {
			s.onExpired(s.key, expireAt)
		}
	} else if !chosen {
		s.stats.Skipped++
	}
	if !chosen {
		return nil, s.walkValue(typ)
	}
	rd.keep = append(rd.keep[:0], typ)
	rd.startKeep()
	err = s.walkValue(typ)
	payload := rd.endKeep()
	if err != nil {
		return nil, err
	}
	elements, err := elementsOf(payload, &s.scratch)
	if err != nil {
		return nil, errf(rd.off(), "value of key %q: %w", s.key, err)
	}
	payload = binary.LittleEndian.AppendUint16(payload, uint16(s.version))
	payload = binary.LittleEndian.AppendUint64(payload, crcUpdate(0, payload))
	rd.keep = payload
	s.stats.Chosen++
	s.entry = Entry{
		DB:       s.db,
		Key:      s.key,
		Slot:     slot,
		Type:     typ,
		ExpireAt: expireAt,
		Elements: elements,
		Payload:  payload,
	}
	return &s.entry, nil
}

func isValueType(t byte) bool {
	return t <= TypeHashListpackEx && t != 8
}

// walkValue consumes one value of type typ by its length prefixes.
func (s *Scanner) walkValue(typ byte) error {
	rd := &s.rd
	at := rd.off()
	switch typ {
	case TypeString, TypeHashZipmap, TypeListZiplist, TypeSetIntset, TypeZsetZiplist,
		TypeHashZiplist, TypeHashListpack, TypeZsetListpack, TypeSetListpack, TypeHashListpackExPreGA:
		return rd.skipString()
	case TypeHashListpackEx:
		if err := rd.skip(8); err != nil { // minimum field expiry
			return err
		}
		return rd.skipString()
	case TypeList, TypeSet, TypeListQuicklist:
		return s.strings(1)
	case TypeHash:
		return s.strings(2)
	case TypeZset:
		n, err := rd.plainLen()
		for ; err == nil && n > 0; n-- {
			if err = rd.skipString(); err == nil {
				err = s.literalDouble()
			}
		}
		return err
	case TypeZset2:
		n, err := rd.plainLen()
		for ; err == nil && n > 0; n-- {
			if err = rd.skipString(); err == nil {
				err = rd.skip(8)
			}
		}
		return err
	case TypeListQuicklist2:
		n, err := rd.plainLen()
		for ; err == nil && n > 0; n-- {
			start := rd.off()
			var container uint64
			if container, err = rd.plainLen(); err == nil {
				if container != 1 && container != 2 { // plain, packed
					return errf(start, "unknown quicklist node container %d", container)
				}
				err = rd.skipString()
			}
		}
		return err
	case TypeHashMetadata, TypeHashMetadataPreGA:
		if typ == TypeHashMetadata {
			if err := rd.skip(8); err != nil { // minimum field expiry
				return err
			}
		}
		n, err := rd.plainLen()
		for ; err == nil && n > 0; n-- {
			if _, err = rd.plainLen(); err == nil { // field TTL
				if err = rd.skipString(); err == nil {
					err = rd.skipString()
				}
			}
		}
		return err
	case TypeStreamListpacks, TypeStreamListpacks2, TypeStreamListpacks3:
		return s.stream(typ)
	case TypeModule2:
		if _, err := rd.plainLen(); err != nil { // module id
			return err
		}
		return s.moduleValue()
	case TypeModule:
		return errf(at, "module value in the pre-GA format (type 6) has no self-describing framing; cannot skip it")
	}
	return errf(at, "unknown value type %d", typ)
}

// strings consumes a length n and n*per strings.
func (s *Scanner) strings(per int) error {
	n, err := s.rd.plainLen()
	for ; err == nil && n > 0; n-- {
		for i := 0; i < per && err == nil; i++ {
			err = s.rd.skipString()
		}
	}
	return err
}

// literalDouble consumes a zset score of RDB_TYPE_ZSET: a length byte
// (253 nan, 254 +inf, 255 -inf) and that many ASCII bytes.
func (s *Scanner) literalDouble() error {
	b, err := s.rd.byte()
	if err != nil || b >= 253 {
		return err
	}
	return s.rd.skip(uint64(b))
}

func (s *Scanner) stream(typ byte) error {
	rd := &s.rd
	// Listpack nodes: master ID, listpack.
	n, err := rd.plainLen()
	for ; err == nil && n > 0; n-- {
		if err = rd.skipString(); err == nil {
			err = rd.skipString()
		}
	}
	if err != nil {
		return err
	}
	// length, last id (ms, seq); v2+: first id, max deleted id, entries added.
	lens := 3
	if typ >= TypeStreamListpacks2 {
		lens += 5
	}
	if err := s.lens(lens); err != nil {
		return err
	}
	groups, err := rd.plainLen()
	for ; err == nil && groups > 0; groups-- {
		if err = rd.skipString(); err != nil { // name
			return err
		}
		lens := 2 // last delivered id
		if typ >= TypeStreamListpacks2 {
			lens++ // entries read
		}
		if err = s.lens(lens); err != nil {
			return err
		}
		// Group PEL: raw id (16), delivery time (8), delivery count.
		var pel uint64
		pel, err = rd.plainLen()
		for ; err == nil && pel > 0; pel-- {
			if err = rd.skip(24); err == nil {
				_, err = rd.plainLen()
			}
		}
		if err != nil {
			return err
		}
		var consumers uint64
		consumers, err = rd.plainLen()
		for ; err == nil && consumers > 0; consumers-- {
			if err = rd.skipString(); err != nil {
				return err
			}
			times := uint64(8) // seen time
			if typ >= TypeStreamListpacks3 {
				times += 8 // active time
			}
			if err = rd.skip(times); err != nil {
				return err
			}
			var pel uint64
			if pel, err = rd.plainLen(); err == nil {
				err = rd.skip(16 * pel)
			}
		}
	}
	return err
}

func (s *Scanner) lens(k int) error {
	for i := 0; i < k; i++ {
		if _, err := s.rd.plainLen(); err != nil {
			return err
		}
	}
	return nil
}

// moduleValue consumes the opcode-tagged fields of a module value up to its EOF opcode.
func (s *Scanner) moduleValue() error {
	rd := &s.rd
	for {
		at := rd.off()
		op, err := rd.plainLen()
		if err != nil {
			return err
		}
		switch op {
		case modEOF:
			return nil
		case modSInt, modUInt:
			_, err = rd.plainLen()
		case modFloat:
			err = rd.skip(4)
		case modDouble:
			err = rd.skip(8)
		case modString:
			err = rd.skipString()
		default:
			return errf(at, "unknown module value opcode %d", op)
		}
		if err != nil {
			return err
		}
	}
}

func (s *Scanner) moduleAux(at int64) error {
	rd := &s.rd
	if _, err := rd.plainLen(); err != nil { // module id
		return err
	}
	whenAt := rd.off()
	whenOp, err := rd.plainLen()
	if err != nil {
		return err
	}
	if whenOp != modUInt {
		return errf(whenAt, "module aux record at %d: bad when-opcode %d", at, whenOp)
	}
	if _, err := rd.plainLen(); err != nil { // when
		return err
	}
	return s.moduleValue()
}
