package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// TestGracefulDrainFinishesOrHandsBack stops a worker holding four
// messages: the one that finishes within the drain timeout is acknowledged,
// the three that do not are handed back at once (not after AckWait, which
// is long here) and processed by a second worker.
func TestGracefulDrainFinishesOrHandsBack(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, jsA := ts.connect(t)
	_, jsB := ts.connect(t)
	createStream(t, jsA, "JOBS", "jobs.>")
	consA := createDurable(t, jsA, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: time.Minute})
	publish(t, jsA, "jobs.new", items(0, 4)...)

	stopping := make(chan struct{})
	var heldA atomicMax
	poolA := crew.New(4)
	defer poolA.Stop()
	a := NewConsumer(consA, poolA, func(ctx context.Context, m Msg[item]) error {
		heldA.add(1)
		if m.Value.ID == 0 {
			<-stopping // finishes during the drain
			return nil
		}
		<-ctx.Done() // does not finish before the drain timeout
		return ctx.Err()
	}, opts(WithDrainTimeout(300*time.Millisecond))...)
	stopA := runConsumer(t, a)
	waitFor(t, 5*time.Second, "worker A holding 4 messages", func() bool { return heldA.load() == 4 })

	errA := make(chan error, 1)
	go func() { errA <- stopA() }()
	close(stopping)
	start := time.Now()
	select {
	case err := <-errA:
		if !errors.Is(err, ErrDrainTimeout) {
			t.Fatalf("Run returned %v, want ErrDrainTimeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain timeout")
	}
	if st := a.Stats(); st.Acked != 1 || st.Nacked != 3 || st.InFlight != 0 {
		t.Fatalf("worker A stats %+v, want 1 acked, 3 handed back", st)
	}

	consB, err := jsB.Consumer(testCtx(t), "JOBS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	seenB := newIDSet()
	poolB := crew.New(4)
	defer poolB.Stop()
	b := NewConsumer(consB, poolB, func(ctx context.Context, m Msg[item]) error {
		seenB.add(m.Value.ID)
		return nil
	}, fast...)
	stopB := runConsumer(t, b)
	waitFor(t, 5*time.Second, "worker B taking the 3 handed back", func() bool { return seenB.distinct() == 3 })
	if err := stopB(); err != nil {
		t.Fatalf("worker B: %v", err)
	}
	if got := seenB.snapshot(); got[0] != 0 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Errorf("worker B processed %v, want 1, 2 and 3 once", got)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("handing back took %v", d)
	}
}

// TestKilledWorkerMessagesGoToTheOther kills a worker in the middle of its
// tasks: its connection closes and its context is cancelled, with nothing
// acknowledged. The server redelivers what it held to the other worker once
// AckWait passes; every message is processed at least once.
func TestKilledWorkerMessagesGoToTheOther(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	ncA, jsA := ts.connect(t)
	_, jsB := ts.connect(t)
	createStream(t, jsA, "JOBS", "jobs.>")
	const ackWait = time.Second
	const n = 60
	consA := createDurable(t, jsA, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: ackWait})
	consB, err := jsB.Consumer(testCtx(t), "JOBS", "workers")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, jsA, "jobs.new", items(0, n)...)

	// Worker A takes four messages and never finishes them.
	heldA := newIDSet()
	poolA := crew.New(4, crew.WithQueueSize(0))
	defer poolA.Stop()
	a := NewConsumer(consA, poolA, func(ctx context.Context, m Msg[item]) error {
		heldA.add(m.Value.ID)
		<-ctx.Done()
		return ctx.Err()
	}, opts(WithDrainTimeout(50*time.Millisecond))...)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	go func() { errA <- a.Run(ctxA) }()
	waitFor(t, 5*time.Second, "worker A holding 4 messages", func() bool { return heldA.distinct() == 4 })

	// Worker B processes everything else.
	done := newIDSet()
	poolB := crew.New(4, crew.WithQueueSize(0))
	defer poolB.Stop()
	b := NewConsumer(consB, poolB, func(ctx context.Context, m Msg[item]) error {
		done.add(m.Value.ID)
		return nil
	}, fast...)
	stopB := runConsumer(t, b)
	waitFor(t, 5*time.Second, "worker B processing the rest", func() bool { return done.distinct() == n-4 })

	// Kill A: its connection dies, so that no ack or nak leaves it. Run
	// notices at its next pull, cancels the handlers' context after the
	// drain timeout, and returns.
	killed := time.Now()
	ncA.Close()
	select {
	case err := <-errA:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("worker A's Run returned %v, want an error wrapping nats.ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		cancelA()
		t.Fatalf("worker A's Run did not return after its connection closed: %v", <-errA)
	}
	if st := a.Stats(); st.Acked != 0 {
		t.Errorf("the killed worker acknowledged %d messages", st.Acked)
	}
	waitFor(t, 10*time.Second, "A's messages redelivered to B", func() bool { return done.distinct() == n })
	if d := time.Since(killed); d < ackWait/2 {
		t.Errorf("redelivered %v after the kill, before AckWait %v: was something handed back?", d, ackWait)
	}
	if err := stopB(); err != nil {
		t.Fatalf("worker B: %v", err)
	}
	for id := range heldA.snapshot() {
		if done.count(id) != 1 {
			t.Errorf("message %d, held by the killed worker, processed %d times by the other", id, done.count(id))
		}
	}
	for id := range n {
		if done.count(id) == 0 {
			t.Errorf("message %d lost", id)
		}
	}
	wantSettled(t, consB)
}
