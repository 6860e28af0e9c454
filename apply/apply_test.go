package apply

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotmover/slotmover/cluster"
	"github.com/slotmover/slotmover/lab/localcluster"
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

// Commands the applier sent with replies off may still wait in the target's
// buffers when the move gives up and closes the connection, reset by this
// side (the target still reads what it had received): Kill must find the
// connection and end them there, so that nothing lands after the
// rollback's purge. The target is stalled meanwhile, as a busy one would
// be; once the reset is in, it no longer knows the connection's address.
func TestKillEndsCommandsBufferedOnTheTarget(t *testing.T) {
	s := harness.ServerT(t, localcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.Client()
	defer c.Close()
	for round := 0; round < 3; round++ {
		key := "late" + strconv.Itoa(round)
		a, err := Dial(ctx, cluster.Conn{Addr: s.Addr}, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		stall := s.Client()
		stalled := make(chan error, 1)
		go func() { defer stall.Close(); stalled <- stall.Do(ctx, "DEBUG", "SLEEP", "0.5").Err() }()
		time.Sleep(100 * time.Millisecond)
		if err := a.SendQuiet([]byte("CLIENT"), []byte("REPLY"), []byte("OFF")); err != nil {
			t.Fatal(err)
		}
		// About 1 MB: more than the target reads in one go.
		const sent = 30_000
		for i := 0; i < sent; i++ {
			if err := a.SendQuiet([]byte("RPUSH"), []byte(key), []byte(strings.Repeat("x", 20))); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		a.conn.(*net.TCPConn).SetLinger(0) // Close resets the connection
		a.Close()
		// The kill and the count in one round trip: the target runs both
		// before it reads anything else.
		var killed, ran *redis.IntCmd
		_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			killed = a.kill(ctx, p)
			ran = p.LLen(ctx, key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-stalled; err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if later := c.LLen(ctx, key).Val(); later != ran.Val() {
			t.Fatalf("round %d: %d commands ran after the kill (%d before, of %d sent; %d connections killed)", round, later-ran.Val(), ran.Val(), sent, killed.Val())
		}
		t.Logf("round %d: %d of %d commands ran, none after the kill (%d connections killed)", round, ran.Val(), sent, killed.Val())
	}
}
