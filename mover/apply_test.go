package mover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

func TestApplierAcksInOrderAndStopsAtErrors(t *testing.T) {
	s := harness.ServerT(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Dial(ctx, Conn{Addr: s.Addr}, 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Acked() != 1000 {
		t.Fatalf("start offset %d", a.Acked())
	}
	const n = 20000
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprint("k", i))
		if err := a.Send(int64(1001+i), "SET", []byte("SET"), key, key); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			a.Mark(int64(1001 + i)) // a mark never moves the offset backwards
		}
	}
	a.Mark(int64(1000 + n + 50))
	if err := a.Wait(ctx, int64(1000+n+50)); err != nil {
		t.Fatal(err)
	}
	c := s.Client()
	defer c.Close()
	if got := c.DBSize(ctx).Val(); got != n {
		t.Fatalf("target holds %d keys, want %d", got, n)
	}
	// An error reply inside an EXEC fails the applier with the label.
	for _, cmd := range [][]string{{"MULTI"}, {"SET", "x", "1"}, {"INCR", "k5"}, {"EXEC"}} {
		args := make([][]byte, len(cmd))
		for i, c := range cmd {
			args[i] = []byte(c)
		}
		a.Send(0, "tx on k5", args...)
	}
	err = a.Wait(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "tx on k5") || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("error in EXEC reply: got %v", err)
	}
	if a.Send(0, "SET", []byte("PING")) == nil {
		t.Fatal("Send after a failure succeeded")
	}
}
