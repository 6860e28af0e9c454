// Package rdbparse reads a Redis RDB snapshot and keeps only the keys of
// chosen hash slots, at close to the speed of reading the bytes.
//
// A Scanner frames the stream itself: it reads each key first and, for a
// key of a slot not chosen, skips the value by its length prefixes without
// allocating; for a chosen key it keeps the value's raw bytes, which with
// the RDB version and a CRC-64 form a RESTORE payload. It verifies the
// file's own checksum at the end and never reads past it, so the reader may
// carry other data after the RDB (a replication stream).
//
// Decode turns a kept value into its elements, with
// github.com/hdt3213/rdb, for keys that are replayed as chunked commands
// (Object.Commands) instead of one RESTORE: big keys, or a target whose RDB
// version is older than the source's.
package rdbparse
