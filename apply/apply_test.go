package apply

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/internal/localcluster"
	"github.com/slotmover/slotmover/tests/harness"
)

func TestApplierAcksInOrderAndStopsAtErrors(t *testing.T) {
	s := harness.ServerT(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Dial(ctx, cluster.Conn{Addr: s.Addr}, 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Acked() != 1000 {
		t.Fatalf("start offset %d", a.Acked())
	}
	// Every command appends its sequence number to one list, so the list
	// is the order the target applied them in; of each step's two, the
	// second carries the step's offset. Now and then the test waits for a
	// step's offset: the acknowledgement must not run ahead of the
	// replies, so the target then holds exactly the commands sent so far.
	const n = 20000
	c := s.Client()
	defer c.Close()
	rpush := func(seq int) [][]byte {
		return [][]byte{[]byte("RPUSH"), []byte("order"), []byte(strconv.Itoa(seq))}
	}
	for i := 0; i < n; i++ {
		if err := a.Send(0, "RPUSH", rpush(2*i)...); err != nil {
			t.Fatal(err)
		}
		if err := a.Send(int64(1001+i), "RPUSH", rpush(2*i+1)...); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			a.Mark(int64(1001 + i)) // a mark never moves the offset backwards
		}
		if i%4999 == 4998 {
			if err := a.Wait(ctx, int64(1001+i)); err != nil {
				t.Fatal(err)
			}
			if got := c.LLen(ctx, "order").Val(); got != int64(2*i+2) {
				t.Fatalf("offset %d acknowledged with %d commands applied, want %d", 1001+i, got, 2*i+2)
			}
		}
	}
	a.Mark(int64(1000 + n + 50))
	if err := a.Wait(ctx, int64(1000+n+50)); err != nil {
		t.Fatal(err)
	}
	if got := a.Acked(); got != 1000+n+50 {
		t.Fatalf("acknowledged %d after the last mark, want %d", got, 1000+n+50)
	}
	order, err := c.LRange(ctx, "order", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2*n {
		t.Fatalf("the target applied %d commands, want %d", len(order), 2*n)
	}
	for i, got := range order {
		if got != strconv.Itoa(i) {
			t.Fatalf("command %s applied in place %d (%v): out of order", got, i, order[max(0, i-2):min(len(order), i+3)])
		}
	}
	// An error reply inside an EXEC fails the applier with the label.
	for _, cmd := range [][]string{{"MULTI"}, {"SET", "x", "1"}, {"INCR", "order"}, {"EXEC"}} {
		args := make([][]byte, len(cmd))
		for i, c := range cmd {
			args[i] = []byte(c)
		}
		a.Send(0, "tx on order", args...)
	}
	err = a.Wait(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "tx on order") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("error in EXEC reply: got %v", err)
	}
	if a.Send(0, "SET", []byte("PING")) == nil {
		t.Fatal("Send after a failure succeeded")
	}
}
