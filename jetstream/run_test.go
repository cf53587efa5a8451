package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

func TestRunStopsWhenItCannotGoOn(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	nop := func(context.Context, Msg[item]) error { return nil }

	t.Run("running twice", func(t *testing.T) {
		cons := createDurable(t, js, "JOBS", "twice", natsjs.ConsumerConfig{})
		pool := crew.New(1)
		defer pool.Stop()
		c := NewConsumer(cons, pool, nop, fast...)
		stop := runConsumer(t, c)
		waitFor(t, 5*time.Second, "the first Run to start", func() bool { return c.running.Load() })
		if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run: %v, want ErrRunning", err)
		}
		if err := stop(); err != nil {
			t.Errorf("first Run: %v", err)
		}
	})

	t.Run("ack policy none", func(t *testing.T) {
		cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", natsjs.ConsumerConfig{Durable: "noack", AckPolicy: natsjs.AckNonePolicy})
		if err != nil {
			t.Fatal(err)
		}
		pool := crew.New(1)
		defer pool.Stop()
		if err := NewConsumer(cons, pool, nop).Run(ctx); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Run: %v, want an error wrapping crew.ErrInvalid", err)
		}
	})

	t.Run("pool stopped", func(t *testing.T) {
		cons := createDurable(t, js, "JOBS", "stopped", natsjs.ConsumerConfig{})
		pool := crew.New(1)
		pool.Stop()
		done := make(chan error, 1)
		go func() { done <- NewConsumer(cons, pool, nop, fast...).Run(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, crew.ErrStopped) {
				t.Errorf("Run: %v, want an error wrapping crew.ErrStopped", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return for a stopped pool")
		}
	})

	t.Run("consumer deleted", func(t *testing.T) {
		cons := createDurable(t, js, "JOBS", "deleted", natsjs.ConsumerConfig{})
		pool := crew.New(1)
		defer pool.Stop()
		done := make(chan error, 1)
		go func() { done <- NewConsumer(cons, pool, nop, fast...).Run(ctx) }()
		if err := js.DeleteConsumer(ctx, "JOBS", "deleted"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, natsjs.ErrConsumerDeleted) && !errors.Is(err, natsjs.ErrConsumerNotFound) {
				t.Errorf("Run: %v, want an error wrapping ErrConsumerDeleted", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its consumer was deleted")
		}
	})
}

func TestInvalidArgumentsPanic(t *testing.T) {
	checkLeaks(t)
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			err, _ := recover().(error)
			if !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s: panic %v, want an error wrapping crew.ErrInvalid", name, err)
			}
		}()
		f()
	}
	pool := crew.New(1)
	defer pool.Stop()
	nop := func(context.Context, Msg[item]) error { return nil }
	mustPanic("nil consumer", func() { NewConsumer(nil, pool, nop) })
	mustPanic("nil publisher JetStream", func() { NewPublisher[item](nil, "x", nil) })
	for name, o := range map[string]ConsumerOption{
		"WithMaxInFlight(0)":    WithMaxInFlight(0),
		"WithMaxFetch(0)":       WithMaxFetch(0),
		"WithPulls(0)":          WithPulls(0),
		"WithFetchWait(1ms)":    WithFetchWait(time.Millisecond),
		"WithDrainTimeout(-1)":  WithDrainTimeout(-1),
		"WithBackoff(nil)":      WithBackoff(nil),
		"WithHeartbeat(-1)":     WithHeartbeat(-1),
		"WithDeadLetter(nil)":   WithDeadLetter(nil, "x"),
		"WithErrorHandler(nil)": WithErrorHandler(nil),
		"WithCodec(nil)":        WithCodec(nil),
	} {
		mustPanic(name, func() { NewConsumer(fakeConsumer{}, pool, nop, o) })
	}
	mustPanic("ExponentialBackoff(2, 1)", func() { ExponentialBackoff(2, 1) })
}

// fakeConsumer only gets NewConsumer past its nil check; Run is never
// called with it.
type fakeConsumer struct{ natsjs.Consumer }

func TestExponentialBackoff(t *testing.T) {
	f := ExponentialBackoff(100*time.Millisecond, time.Second)
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 50: time.Second} {
		for range 20 {
			if d := f(n); d < want/2 || d > want {
				t.Fatalf("delay after delivery %d: %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

func TestBytesCodec(t *testing.T) {
	var c Bytes
	if b, err := c.Marshal("hi"); err != nil || string(b) != "hi" {
		t.Fatalf("Marshal(string) = %q, %v", b, err)
	}
	var s string
	var b []byte
	if c.Unmarshal([]byte("x"), &s) != nil || s != "x" || c.Unmarshal([]byte("y"), &b) != nil || string(b) != "y" {
		t.Fatalf("Unmarshal: %q %q", s, b)
	}
	if _, err := c.Marshal(1); err == nil {
		t.Fatal("Marshal(int) succeeded")
	}
}

// A zero crew.Pool takes no task, so a consumer on it could only hand back
// every message it fetched: NewConsumer refuses it like a nil pool.
func TestZeroPoolIsRefused(t *testing.T) {
	checkLeaks(t)
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("NewConsumer with a zero pool: panic %v, want an error wrapping crew.ErrInvalid", err)
		}
	}()
	NewConsumer(fakeConsumer{}, &crew.Pool{}, func(context.Context, Msg[item]) error { return nil })
}

// When the pool refuses a message for a reason other than stopping, Run
// stops with that error and hands the message back, so that another
// consumer processes it: it is neither dropped nor handed back over and
// over until MaxDeliver gives it up.
func TestSubmitFailureStopsRunAndHandsBack(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 4})
	publish(t, js, "jobs.new", items(0, 3)...)

	pool := crew.New(2)
	defer pool.Stop()
	var calls atomicMax
	broken := NewConsumer(cons, pool, func(context.Context, Msg[item]) error {
		calls.add(1)
		return nil
	}, fast...)
	zero := &crew.Pool{} // refuses every task with an error wrapping crew.ErrInvalid
	broken.ex = executor{ex: zero, pool: zero, submit: zero}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- broken.Run(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Run: %v, want the submit error, wrapping crew.ErrInvalid", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("Run did not stop when the pool refused its tasks; after cancelling it returned %v", <-done)
	}
	if st := broken.Stats(); calls.load() != 0 || st.Acked != 0 || st.Terminated != 0 || st.InFlight != 0 || st.Nacked != st.Fetched {
		t.Errorf("stats %+v, want every message fetched handed back", st)
	}

	seen := newIDSet()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		return nil
	}, fast...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "the 3 messages processed", func() bool { return seen.distinct() == 3 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
