package rdbparse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/hdt3213/rdb/core"
	"github.com/hdt3213/rdb/model"

	"github.com/slotmover/slotmover/lab/localcluster"
	"github.com/slotmover/slotmover/slots"
)

var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// benchRDB is the path of an RDB of N keys of 512-byte values (DEBUG
// POPULATE, rdbcompression no), built once per process. N comes from
// SLOTMOVER_BENCH_KEYS (default 200000).
var benchRDB = sync.OnceValues(func() (string, error) {
	n := 200000
	if v := os.Getenv("SLOTMOVER_BENCH_KEYS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return "", fmt.Errorf("SLOTMOVER_BENCH_KEYS: %w", err)
		}
	}
	var err error
	if benchDir, err = os.MkdirTemp("", "rdbparse-bench"); err != nil {
		return "", err
	}
	ctx := context.Background()
	s, err := localcluster.StartServer(ctx, benchDir, localcluster.Options{Config: []string{"rdbcompression no"}})
	if err != nil {
		return "", err
	}
	defer s.Stop()
	c := s.Client()
	defer c.Close()
	if err := c.Do(ctx, "DEBUG", "POPULATE", n, "key", 512).Err(); err != nil {
		return "", err
	}
	if err := c.Save(ctx).Err(); err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, "dump.rdb"), nil
})

const benchBuf = 1 << 20

func openBench(b *testing.B) (*os.File, int64) {
	b.Helper()
	path, err := benchRDB()
	if err != nil {
		b.Fatalf("build RDB: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return f, fi.Size()
}

func rewind(b *testing.B, f *os.File) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkIOCopy is the floor: reading the file's bytes and nothing else.
func BenchmarkIOCopy(b *testing.B) {
	f, size := openBench(b)
	defer f.Close()
	br := bufio.NewReaderSize(f, benchBuf)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rewind(b, f)
		br.Reset(f)
		if _, err := io.Copy(io.Discard, br); err != nil {
			b.Fatal(err)
		}
	}
}

func scanBench(b *testing.B, want *slots.Set) {
	f, size := openBench(b)
	defer f.Close()
	br := bufio.NewReaderSize(f, benchBuf)
	b.SetBytes(size)
	b.ReportAllocs()
	var keys, chosen int64
	var mallocs uint64
	var ms runtime.MemStats
	b.ResetTimer()
	for b.Loop() {
		rewind(b, f)
		br.Reset(f)
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		sc := NewScanner(br, want)
		for {
			_, err := sc.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&ms)
		mallocs += ms.Mallocs - before
		st := sc.Stats()
		keys += st.Keys
		chosen += st.Chosen
	}
	if keys > 0 {
		b.ReportMetric(float64(mallocs)/float64(keys), "allocs/key")
		b.ReportMetric(float64(chosen)/float64(keys), "chosen/key")
	}
}

// BenchmarkScanThird keeps the keys of slots 0-5460 (RESTORE payloads).
func BenchmarkScanThird(b *testing.B) {
	scanBench(b, slots.NewSet(slots.Range{Start: 0, End: 5460}))
}

// BenchmarkScanNone chooses no slot: pure skipping.
func BenchmarkScanNone(b *testing.B) {
	scanBench(b, &slots.Set{})
}

// BenchmarkHdt3213FullParse is the library decoding every key.
func BenchmarkHdt3213FullParse(b *testing.B) {
	f, size := openBench(b)
	defer f.Close()
	br := bufio.NewReaderSize(f, benchBuf)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rewind(b, f)
		br.Reset(f)
		n := 0
		if err := core.NewDecoder(br).Parse(func(model.RedisObject) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatal("no keys")
		}
	}
}
