package rdbparse

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/hdt3213/rdb/core"
	"github.com/hdt3213/rdb/model"
)

// Kind is the Redis data type of a decoded value.
type Kind int

// The kinds Decode produces.
const (
	KindString Kind = iota + 1
	KindList
	KindSet
	KindHash
	KindZSet
	KindStream
)

func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindList:
		return "list"
	case KindSet:
		return "set"
	case KindHash:
		return "hash"
	case KindZSet:
		return "zset"
	case KindStream:
		return "stream"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Object is a decoded value. Only the field of its Kind is set; byte slices
// may alias the Entry's payload.
type Object struct {
	Kind    Kind
	Type    byte        // the RDB type byte it was decoded from
	String  []byte      // KindString
	Items   [][]byte    // KindList items in order; KindSet members
	Fields  []HashField // KindHash
	Members []ZMember   // KindZSet
	Stream  *Stream     // KindStream
}

// HashField is one field of a hash.
type HashField struct {
	Field, Value []byte
	ExpireAt     int64 // field TTL (Redis >= 7.4) as unix ms; 0 = none
}

// ZMember is one member of a sorted set.
type ZMember struct {
	Member []byte
	Score  float64
}

// StreamID is a stream entry ID.
type StreamID struct{ Ms, Seq uint64 }

func (id StreamID) String() string {
	return strconv.FormatUint(id.Ms, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Stream is a decoded stream with its consumer groups.
type Stream struct {
	Entries      []StreamEntry // live entries, by ID
	Length       uint64
	LastID       StreamID
	FirstID      StreamID
	MaxDeletedID StreamID
	EntriesAdded uint64
	// Counters says the RDB recorded EntriesAdded and MaxDeletedID (7.0+):
	// a stream from an older one is rebuilt without them, as its server
	// knows no XSETID options.
	Counters bool
	Groups   []StreamGroup
}

// StreamEntry is one stream entry; Fields alternate name and value, in order.
type StreamEntry struct {
	ID     StreamID
	Fields [][]byte
}

// StreamGroup is a consumer group.
type StreamGroup struct {
	Name        []byte
	LastID      StreamID // last delivered ID
	EntriesRead int64    // -1 when unknown
	Pending     []PendingEntry
	Consumers   []StreamConsumer
}

// PendingEntry is one entry of a group's pending entries list.
type PendingEntry struct {
	ID            StreamID
	Consumer      []byte
	DeliveryTime  int64 // unix ms of the last delivery
	DeliveryCount uint64
}

// StreamConsumer is a consumer of a group.
type StreamConsumer struct {
	Name       []byte
	SeenTime   int64 // unix ms
	ActiveTime int64 // unix ms (RDB type 21+; else SeenTime)
	Pending    []StreamID
}

// Len returns the element count, comparable to Entry.Elements.
func (o *Object) Len() int {
	switch o.Kind {
	case KindString:
		return len(o.String)
	case KindList, KindSet:
		return len(o.Items)
	case KindHash:
		return len(o.Fields)
	case KindZSet:
		return len(o.Members)
	case KindStream:
		return len(o.Stream.Entries)
	}
	return 0
}

// Decode decodes the value of e, an entry from an RDB of version rdbVersion,
// with github.com/hdt3213/rdb. It checks the element count against
// e.Elements: the library silently stops at 65,535 entries of a listpack
// or ziplist, and those values are decoded here instead (as are lists with
// plain nodes, on which the library panics). Stream entries are
// read here too, because the library keeps an entry's fields in a map,
// losing their order (and repeated field names), which XADD must replay.
func Decode(e *Entry, rdbVersion int) (*Object, error) {
	p := e.Payload
	if len(p) < 11 {
		return nil, fmt.Errorf("rdbparse: decode %q: payload of %d bytes is too short", e.Key, len(p))
	}
	typ := p[0]
	value := p[1 : len(p)-10]
	if typ == TypeModule || typ == TypeModule2 {
		return nil, fmt.Errorf("rdbparse: decode %q: module values (type %d) can only be RESTOREd", e.Key, typ)
	}
	o, lib, err := decodeLibrary(typ, e.Key, value, rdbVersion)
	if err != nil && isCompact(typ) {
		// The library's memory profiler, which it runs on every object,
		// panics on quicklists with plain nodes; decode here instead.
		o, err = decodeCompact(typ, value)
		if err == nil && uint64(o.Len()) != e.Elements {
			err = fmt.Errorf("decoded %d elements, the value holds %d", o.Len(), e.Elements)
		}
		if err != nil {
			return nil, fmt.Errorf("rdbparse: decode %q (type %d): %w", e.Key, typ, err)
		}
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rdbparse: decode %q (type %d): %w", e.Key, typ, err)
	}
	if o.Kind == KindStream {
		if err := streamEntries(o.Stream, value); err != nil {
			return nil, fmt.Errorf("rdbparse: decode %q: stream entries: %w", e.Key, err)
		}
		if err := sameStreamIDs(o.Stream, lib.(*model.StreamObject)); err != nil {
			return nil, fmt.Errorf("rdbparse: decode %q: %w", e.Key, err)
		}
	}
	if uint64(o.Len()) == e.Elements {
		return o, nil
	}
	libLen := o.Len()
	if isCompact(typ) {
		if o, err = decodeCompact(typ, value); err != nil {
			return nil, fmt.Errorf("rdbparse: decode %q (type %d): %w", e.Key, typ, err)
		}
		if uint64(o.Len()) == e.Elements {
			return o, nil
		}
	}
	return nil, fmt.Errorf("rdbparse: decode %q (type %d): decoded %d elements, the value holds %d", e.Key, typ, libLen, e.Elements)
}

// StringValue returns the value of a string entry (Type TypeString): the
// payload's own bytes when stored plainly, else decoded into buf (an
// integer or LZF encoding). It returns an error for other types.
func (e *Entry) StringValue(buf []byte) ([]byte, error) {
	if e.Type != TypeString || len(e.Payload) < 11 {
		return nil, fmt.Errorf("rdbparse: %q is not a string entry", e.Key)
	}
	m := memReader{b: e.Payload[1 : len(e.Payload)-10]}
	v, err := m.strInto(buf)
	if err == nil && m.i != len(m.b) {
		err = fmt.Errorf("%d bytes after the string", len(m.b)-m.i)
	}
	if err != nil {
		return nil, fmt.Errorf("rdbparse: string value of %q: %w", e.Key, err)
	}
	return v, nil
}

func isCompact(t byte) bool {
	switch t {
	case TypeHashZipmap, TypeListZiplist, TypeSetIntset, TypeZsetZiplist, TypeHashZiplist, TypeListQuicklist,
		TypeHashListpack, TypeZsetListpack, TypeListQuicklist2, TypeSetListpack,
		TypeHashListpackExPreGA, TypeHashListpackEx:
		return true
	}
	return false
}

// decodeLibrary runs the library's decoder over a one-key RDB built around value.
func decodeLibrary(typ byte, key, value []byte, rdbVersion int) (*Object, model.RedisObject, error) {
	head := fmt.Appendf(nil, "REDIS%04d", rdbVersion)
	head = append(head, typ)
	head = appendLen(head, uint64(len(key)))
	head = append(head, key...)
	tail := []byte{opEOF, 0, 0, 0, 0, 0, 0, 0, 0} // the library does not check the CRC
	// The library reads through a *bufio.Reader it is given as is, so what it
	// leaves unread can be checked afterwards.
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(head), bytes.NewReader(value), bytes.NewReader(tail)), 64<<10)
	var obj model.RedisObject
	err := core.NewDecoder(br).Parse(func(o model.RedisObject) bool {
		obj = o
		return true
	})
	if err != nil {
		return nil, nil, fmt.Errorf("hdt3213/rdb: %w", err)
	}
	if obj == nil {
		return nil, nil, errors.New("hdt3213/rdb returned no object")
	}
	if n, _ := io.Copy(io.Discard, br); n != 0 {
		return nil, nil, fmt.Errorf("hdt3213/rdb left %d bytes of the value unread", n)
	}
	o := &Object{Type: typ}
	switch v := obj.(type) {
	case *model.StringObject:
		o.Kind, o.String = KindString, v.Value
	case *model.ListObject:
		o.Kind, o.Items = KindList, v.Values
	case *model.SetObject:
		o.Kind, o.Items = KindSet, v.Members
	case *model.HashObject:
		o.Kind = KindHash
		o.Fields = make([]HashField, 0, len(v.Hash))
		for f, val := range v.Hash {
			o.Fields = append(o.Fields, HashField{Field: []byte(f), Value: val, ExpireAt: v.FieldExpirations[f]})
		}
	case *model.ZSetObject:
		o.Kind = KindZSet
		o.Members = make([]ZMember, len(v.Entries))
		for i, z := range v.Entries {
			o.Members[i] = ZMember{Member: []byte(z.Member), Score: z.Score}
		}
	case *model.StreamObject:
		o.Kind, o.Stream = KindStream, streamFromLibrary(typ, v)
	default:
		return nil, nil, fmt.Errorf("hdt3213/rdb decoded a %s, which cannot be replayed as commands", obj.GetType())
	}
	return o, obj, nil
}

func libID(id *model.StreamId) StreamID {
	if id == nil {
		return StreamID{}
	}
	return StreamID{id.Ms, id.Sequence}
}

// streamFromLibrary takes the stream's metadata and groups; the entries
// come from streamEntries.
func streamFromLibrary(typ byte, v *model.StreamObject) *Stream {
	s := &Stream{
		Length:       v.Length,
		LastID:       libID(v.LastId),
		FirstID:      libID(v.FirstId),
		MaxDeletedID: libID(v.MaxDeletedId),
		EntriesAdded: v.AddedEntriesCount,
		Counters:     typ != TypeStreamListpacks,
	}
	if typ == TypeStreamListpacks {
		// Version 1 does not record it; Redis assumes the length on load.
		s.EntriesAdded = v.Length
	}
	for _, g := range v.Groups {
		sg := StreamGroup{Name: []byte(g.Name), LastID: libID(g.LastId), EntriesRead: int64(g.EntriesRead)}
		if typ == TypeStreamListpacks {
			sg.EntriesRead = -1
		}
		owner := make(map[StreamID][]byte)
		for _, c := range g.Consumers {
			sc := StreamConsumer{Name: []byte(c.Name), SeenTime: int64(c.SeenTime), ActiveTime: int64(c.ActiveTime)}
			for _, id := range c.Pending {
				sc.Pending = append(sc.Pending, libID(id))
				owner[libID(id)] = sc.Name
			}
			sg.Consumers = append(sg.Consumers, sc)
		}
		for _, n := range g.Pending {
			id := libID(n.Id)
			sg.Pending = append(sg.Pending, PendingEntry{
				ID: id, Consumer: owner[id], DeliveryTime: int64(n.DeliveryTime), DeliveryCount: n.DeliveryCount,
			})
		}
		s.Groups = append(s.Groups, sg)
	}
	return s
}

// sameStreamIDs cross-checks the entries read here against the library's.
func sameStreamIDs(s *Stream, v *model.StreamObject) error {
	k := 0
	for _, node := range v.Entries {
		for _, msg := range node.Msgs {
			if msg.Deleted {
				continue
			}
			if k >= len(s.Entries) || s.Entries[k].ID != libID(msg.Id) {
				return fmt.Errorf("stream entry %d: hdt3213/rdb and rdbparse disagree on its ID", k)
			}
			if 2*len(msg.Fields) > len(s.Entries[k].Fields) {
				return fmt.Errorf("stream entry %s: hdt3213/rdb found more fields", libID(msg.Id))
			}
			k++
		}
	}
	if k != len(s.Entries) {
		return fmt.Errorf("hdt3213/rdb found %d live stream entries, rdbparse %d", k, len(s.Entries))
	}
	return nil
}

// Stream listpack entry flags.
const (
	streamItemDeleted    = 1
	streamItemSameFields = 2
)

// lpItem is one listpack entry: a string, or an integer.
type lpItem struct {
	s     []byte
	v     int64
	isInt bool
}

func (it lpItem) bytes() []byte {
	if it.isInt {
		return strconv.AppendInt(nil, it.v, 10)
	}
	return it.s
}

func (it lpItem) int() (int64, error) {
	if it.isInt {
		return it.v, nil
	}
	return 0, fmt.Errorf("stream listpack: string %q where an integer belongs", it.s)
}

// streamEntries reads the live entries of a stream value (the payload
// without type byte), in order, with their fields in order.
func streamEntries(s *Stream, value []byte) error {
	m := &memReader{b: value}
	nodes, err := m.plainLen()
	if err != nil {
		return err
	}
	var items []lpItem
	for ; nodes > 0; nodes-- {
		nodeKey, err := m.str()
		if err != nil {
			return err
		}
		if len(nodeKey) != 16 {
			return fmt.Errorf("stream node key of %d bytes, want 16", len(nodeKey))
		}
		master := StreamID{binary.BigEndian.Uint64(nodeKey), binary.BigEndian.Uint64(nodeKey[8:])}
		lp, err := m.str()
		if err != nil {
			return err
		}
		items = items[:0]
		if err := listpackWalk(lp, func(b []byte, v int64, isInt bool) error {
			items = append(items, lpItem{b, v, isInt})
			return nil
		}); err != nil {
			return err
		}
		if err := streamNode(s, master, items); err != nil {
			return err
		}
	}
	return nil
}

// streamNode decodes one node's listpack: the master entry (count, deleted,
// master fields, 0), then per entry: flags, ID deltas, [field count,]
// fields/values, and a trailing item count.
func streamNode(s *Stream, master StreamID, items []lpItem) error {
	i := 0
	next := func() (lpItem, error) {
		if i >= len(items) {
			return lpItem{}, errors.New("stream listpack ends early")
		}
		i++
		return items[i-1], nil
	}
	nextInt := func() (int64, error) {
		it, err := next()
		if err != nil {
			return 0, err
		}
		return it.int()
	}
	count, err := nextInt()
	if err != nil {
		return err
	}
	deleted, err := nextInt()
	if err != nil {
		return err
	}
	nMaster, err := nextInt()
	if err != nil {
		return err
	}
	if nMaster < 0 || int(nMaster) > len(items) {
		return fmt.Errorf("stream listpack: %d master fields", nMaster)
	}
	masterFields := make([][]byte, nMaster)
	for k := range masterFields {
		it, err := next()
		if err != nil {
			return err
		}
		masterFields[k] = it.bytes()
	}
	if _, err := next(); err != nil { // master entry terminator
		return err
	}
	for n := count + deleted; n > 0; n-- {
		flags, err := nextInt()
		if err != nil {
			return err
		}
		dms, err := nextInt()
		if err != nil {
			return err
		}
		dseq, err := nextInt()
		if err != nil {
			return err
		}
		id := StreamID{master.Ms + uint64(dms), master.Seq + uint64(dseq)}
		var fields [][]byte
		if flags&streamItemSameFields != 0 {
			fields = make([][]byte, 0, 2*len(masterFields))
			for _, f := range masterFields {
				it, err := next()
				if err != nil {
					return err
				}
				fields = append(fields, f, it.bytes())
			}
		} else {
			nf, err := nextInt()
			if err != nil {
				return err
			}
			if nf < 0 || int(nf) > len(items) {
				return fmt.Errorf("stream listpack: entry with %d fields", nf)
			}
			fields = make([][]byte, 0, 2*nf)
			for k := int64(0); k < 2*nf; k++ {
				it, err := next()
				if err != nil {
					return err
				}
				fields = append(fields, it.bytes())
			}
		}
		if _, err := next(); err != nil { // the entry's item count
			return err
		}
		if flags&streamItemDeleted == 0 {
			s.Entries = append(s.Entries, StreamEntry{ID: id, Fields: fields})
		}
	}
	if i != len(items) {
		return fmt.Errorf("stream listpack: %d items after the last entry", len(items)-i)
	}
	return nil
}

// decodeCompact decodes a compact-encoded value (listpacks, ziplists,
// intsets, zipmaps) without the library, walking every entry whatever the
// header count says.
func decodeCompact(typ byte, value []byte) (*Object, error) {
	m := &memReader{b: value}
	o := &Object{Type: typ}
	var items [][]byte
	collect := func(b []byte, v int64, isInt bool) error {
		items = append(items, lpItem{b, v, isInt}.bytes())
		return nil
	}
	switch typ {
	case TypeListQuicklist, TypeListQuicklist2:
		nodes, err := m.plainLen()
		for ; err == nil && nodes > 0; nodes-- {
			container := uint64(2)
			if typ == TypeListQuicklist2 {
				if container, err = m.plainLen(); err != nil {
					break
				}
			}
			var b []byte
			if b, err = m.str(); err != nil {
				break
			}
			switch {
			case container == 1:
				items = append(items, b)
			case typ == TypeListQuicklist:
				err = ziplistWalk(b, collect)
			default:
				err = listpackWalk(b, collect)
			}
		}
		if err != nil {
			return nil, err
		}
		o.Kind, o.Items = KindList, items
		return o, nil
	case TypeHashListpackEx:
		if _, err := m.take(8); err != nil {
			return nil, err
		}
	}
	b, err := m.str()
	if err != nil {
		return nil, err
	}
	switch typ {
	case TypeListZiplist, TypeZsetZiplist, TypeHashZiplist:
		err = ziplistWalk(b, collect)
	case TypeHashZipmap:
		err = zipmapWalk(b, func(f, v []byte) error {
			items = append(items, f, v)
			return nil
		})
	case TypeSetIntset:
		items, err = intsetMembers(b)
	default:
		err = listpackWalk(b, collect)
	}
	if err != nil {
		return nil, err
	}
	switch typ {
	case TypeListZiplist:
		o.Kind, o.Items = KindList, items
	case TypeSetIntset, TypeSetListpack:
		o.Kind, o.Items = KindSet, items
	case TypeZsetZiplist, TypeZsetListpack:
		if len(items)%2 != 0 {
			return nil, errors.New("zset with an odd number of entries")
		}
		o.Kind = KindZSet
		for k := 0; k < len(items); k += 2 {
			score, err := strconv.ParseFloat(string(items[k+1]), 64)
			if err != nil {
				return nil, fmt.Errorf("zset score %q: %w", items[k+1], err)
			}
			o.Members = append(o.Members, ZMember{Member: items[k], Score: score})
		}
	case TypeHashListpackEx, TypeHashListpackExPreGA:
		if len(items)%3 != 0 {
			return nil, errors.New("hash with field TTLs: entries not in triples")
		}
		o.Kind = KindHash
		for k := 0; k < len(items); k += 3 {
			ttl, err := strconv.ParseInt(string(items[k+2]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("hash field TTL %q: %w", items[k+2], err)
			}
			o.Fields = append(o.Fields, HashField{Field: items[k], Value: items[k+1], ExpireAt: ttl})
		}
	default: // hashes
		if len(items)%2 != 0 {
			return nil, errors.New("hash with an odd number of entries")
		}
		o.Kind = KindHash
		for k := 0; k < len(items); k += 2 {
			o.Fields = append(o.Fields, HashField{Field: items[k], Value: items[k+1]})
		}
	}
	return o, nil
}

func intsetMembers(b []byte) ([][]byte, error) {
	if len(b) < 8 {
		return nil, errors.New("intset header ends early")
	}
	w := int(binary.LittleEndian.Uint32(b))
	n := int(binary.LittleEndian.Uint32(b[4:]))
	if (w != 2 && w != 4 && w != 8) || n < 0 || 8+n*w > len(b) {
		return nil, fmt.Errorf("intset of %d members of %d bytes in %d bytes", n, w, len(b))
	}
	out := make([][]byte, n)
	for k := range out {
		out[k] = strconv.AppendInt(nil, intLE(b[8+k*w:8+(k+1)*w]), 10)
	}
	return out, nil
}
