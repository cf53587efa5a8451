package jetstream

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
)

// TestServerRestartLosesNoAcknowledgedMessage restarts the embedded server
// on the same store directory twice: once between two runs of a consumer,
// once while it runs. Every message whose publish was acknowledged is
// processed, and none whose processing was acknowledged (with DoubleAck)
// before the first restart comes back.
func TestServerRestartLosesNoAcknowledgedMessage(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	nc, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: 2 * time.Second})
	ctx := testCtx(t)

	publishAll := func(from, to int) {
		t.Helper()
		p := NewPublisher(js, "jobs.new", itemID, WithBatch(batch.WithMaxItems(25),
			batch.WithErrorHandler(func(_ context.Context, items []item, err error) {
				t.Errorf("%d items not published: %v", len(items), err)
			})))
		for _, it := range items(from, to) {
			if err := p.Add(ctx, it); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatalf("publishing %d..%d: %v", from, to, err)
		}
	}
	reconnected := func() {
		t.Helper()
		waitFor(t, 10*time.Second, "the client to reconnect", nc.IsConnected)
	}

	// Phase 1: 100 messages published, 30 or more processed and acknowledged.
	publishAll(0, 100)
	seen := newIDSet()
	slow := make(chan struct{}) // closed: handlers take a few ms each
	pool := crew.New(2, crew.WithQueueSize(0))
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		select {
		case <-slow:
			t := time.NewTimer(3 * time.Millisecond) // the task's work
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		default:
		}
		return nil
	}, opts(WithDoubleAck(), WithMaxInFlight(2), WithMaxFetch(2))...)
	stop := runConsumer(t, c)
	waitFor(t, 5*time.Second, "30 messages processed", func() bool { return seen.distinct() >= 30 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	before := seen.snapshot()
	if st := c.Stats(); int(st.Acked) != len(before) {
		t.Fatalf("%d acknowledged, %d processed", st.Acked, len(before))
	}

	// Restart between runs.
	ts.restart()
	reconnected()
	if n := streamMsgs(t, st); n != 100 {
		t.Fatalf("after a restart the stream holds %d messages, want 100", n)
	}

	// Phase 2: run again, publish 100 more, restart in the middle.
	close(slow)
	stop = runConsumer(t, c)
	publishAll(100, 200)
	waitFor(t, 5*time.Second, "some of the new messages processed", func() bool { return seen.distinct() >= len(before)+40 })
	ts.restart()
	reconnected()
	waitFor(t, 20*time.Second, "all 200 messages processed", func() bool { return seen.distinct() == 200 })
	// Messages whose acks the restart lost come again after AckWait.
	waitFor(t, 10*time.Second, "nothing pending", func() bool {
		info := consumerInfo(t, cons)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for id := range before {
		if n := seen.count(id); n != 1 {
			t.Errorf("message %d, acknowledged before the restart, processed %d times", id, n)
		}
	}
	if n := streamMsgs(t, st); n != 200 {
		t.Errorf("stream holds %d messages, want 200", n)
	}
	dups := 0
	for _, n := range seen.snapshot() {
		dups += n - 1
	}
	t.Logf("processed 200 messages; %d processed again after the restart during the run", dups)
}
