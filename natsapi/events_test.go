package natsapi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/slotmover/slotmover/sidecar"
)

// A task's events land in the events' stream: a durable consumer made
// after they were sent (a dashboard that was away) reads them all, in
// order, and one it does not acknowledge comes again: at least once.
func TestEventsStreamAtLeastOnce(t *testing.T) {
	ctx := context.Background()
	nc := startNATS(t)
	s := New(ctx, nc, Config{NodeID: "node1"})
	t.Cleanup(s.Close)
	for _, state := range []string{sidecar.StateRunning, sidecar.StateRunning, sidecar.StateCompleted} {
		s.Publish(sidecar.Task{ID: "t1", State: state})
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, EventStream("slotmover"), jetstream.ConsumerConfig{
		Durable: "dashboard", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 300 * time.Millisecond, FilterSubject: "slotmover.events.node1.>",
	})
	if err != nil {
		t.Fatal(err)
	}
	next := func() (Event, jetstream.Msg) {
		t.Helper()
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			var ev Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				t.Fatal(err)
			}
			return ev, msg
		}
		t.Fatalf("no event: %v", batch.Error())
		return Event{}, nil
	}
	for want := uint64(1); want <= 3; want++ {
		ev, msg := next()
		if ev.Seq != want || ev.Task.ID != "t1" || ev.Final != (want == 3) {
			t.Fatalf("event %d: %+v", want, ev)
		}
		if want != 2 {
			msg.Ack()
		}
	}
	ev, msg := next() // the one not acknowledged, after its ack wait
	meta, _ := msg.Metadata()
	if ev.Seq != 2 || meta == nil || meta.NumDelivered != 2 {
		t.Fatalf("redelivered %+v (metadata %+v), want event 2 a second time", ev, meta)
	}
	msg.Ack()
	if s.Lost() != 0 {
		t.Fatalf("%d events or records lost", s.Lost())
	}
}
