package jetstream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// stuckHandler is a handler's part that never returns by itself: it
// ignores its context until the test releases it.
type stuckHandler struct {
	started  chan struct{} // closed when the handler is stuck
	release  chan struct{} // closed to let it return
	once     sync.Once
	mu       sync.Mutex
	ctxErr   error // its context's error when it was released
	returned bool
}

func newStuckHandler() *stuckHandler {
	return &stuckHandler{started: make(chan struct{}), release: make(chan struct{})}
}

// block is called by the handler: it stays until release.
func (s *stuckHandler) block(ctx context.Context) {
	close(s.started)
	<-s.release
	s.mu.Lock()
	s.ctxErr, s.returned = ctx.Err(), true
	s.mu.Unlock()
}

// free lets the stuck handler return; it may be called more than once.
func (s *stuckHandler) free() { s.once.Do(func() { close(s.release) }) }

// all returns the errors received so far.
func (s *errSink) all() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// stuckErrors returns the MessageErrors of sink that wrap ErrJobStuck.
func stuckErrors(sink *errSink) []*MessageError {
	var out []*MessageError
	for _, me := range sink.messageErrors() {
		if errors.Is(me, ErrJobStuck) {
			out = append(out, me)
		}
	}
	return out
}

// otherWorker runs, on a connection and a pool of its own, a Consumer of
// the durable consumer name of the stream JOBS that records the ids it
// handles, and returns them and the function that stops it.
func otherWorker(t *testing.T, ts *testServer, name string) (*idSet, func() error) {
	t.Helper()
	_, js := ts.connect(t)
	cons, err := js.Consumer(testCtx(t), "JOBS", name)
	if err != nil {
		t.Fatal(err)
	}
	done := newIDSet()
	pool := crew.New(2)
	t.Cleanup(pool.Stop)
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		done.add(m.Value.ID)
		return nil
	}, fast...)
	return done, runConsumer(t, c) // stopped before the pool, by cleanups in reverse
}

// TestStuckHandlerIsAbandonedAndItsMessageRedelivered: a handler that
// ignores its context past the job timeout and its grace is abandoned;
// its message is handed back at once, reported once, counted, and
// processed by another consumer, while the stuck handler keeps its slot of
// WithMaxInFlight. When it returns at last, its outcome is ignored and its
// slot freed.
func TestStuckHandlerIsAbandonedAndItsMessageRedelivered(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: time.Minute, MaxDeliver: 5})
	publish(t, js, "jobs.new", item{ID: 1})

	stuck := newStuckHandler()
	doneA := newIDSet()
	sink := &errSink{}
	poolA := crew.New(2)
	defer poolA.Stop()
	defer stuck.free() // before the pool stops
	const timeout = 50 * time.Millisecond
	a := NewConsumer(cons, poolA, func(ctx context.Context, m Msg[item]) error {
		if m.Value.ID == 1 && m.Delivery() == 1 {
			stuck.block(ctx)
			return nil // ignored: the message was handed back
		}
		doneA.add(m.Value.ID)
		return nil
	}, opts(WithJobTimeout(timeout), WithMaxInFlight(1), WithBackoff(func(int) time.Duration { return 0 }),
		WithErrorHandler(sink.handle))...)
	stopA := runConsumer(t, a)
	<-stuck.started
	start := time.Now()
	// An abandoned handler counts in Abandoned first; its message is then
	// handed back and counted, and the error handler called, last.
	waitFor(t, 10*time.Second, "the stuck handler abandoned and reported", func() bool {
		return a.Stats().Abandoned == 1 && len(stuckErrors(sink)) > 0
	})
	if d := time.Since(start); d < timeout {
		t.Errorf("abandoned %v after the handler started, before the job timeout %v and its grace", d, timeout)
	}
	mes := stuckErrors(sink)
	if len(mes) != 1 || !mes[0].HandedBack || mes[0].DeadLettered || mes[0].Sequence != 1 || mes[0].Delivery != 1 ||
		!strings.Contains(mes[0].Error(), "handed back") {
		t.Fatalf("error handler got %v, want one MessageError for message 1, delivery 1, handed back, wrapping ErrJobStuck", sink.all())
	}
	if st := a.Stats(); st.Nacked != 1 || st.Acked != 0 || st.Terminated != 0 || st.InFlight != 0 {
		t.Errorf("stats %+v, want the message handed back and no longer in flight", st)
	}

	// Another consumer takes the message handed back, and a new one: the
	// first holds no slot for them while its handler is stuck.
	doneB, stopB := otherWorker(t, ts, "workers")
	publish(t, js, "jobs.new", item{ID: 2})
	waitFor(t, 10*time.Second, "1 and 2 processed", func() bool {
		return doneA.count(1)+doneB.count(1) > 0 && doneA.count(2)+doneB.count(2) > 0
	})
	if err := stopB(); err != nil {
		t.Fatalf("consumer B: %v", err)
	}
	if n := a.Stats().Fetched; n != 1 {
		t.Errorf("consumer A fetched %d messages while its only slot was stuck, want 1", n)
	}

	// The stuck handler returns: its nil is not an ack, and its slot is
	// free again.
	stuck.free()
	publish(t, js, "jobs.new", item{ID: 3})
	waitFor(t, 10*time.Second, "consumer A processing 3", func() bool { return doneA.count(3) == 1 })
	if err := stopA(); err != nil {
		t.Fatalf("consumer A: %v", err)
	}
	if st := a.Stats(); st.Acked != 1 || st.Nacked != 1 || st.Abandoned != 1 || st.InFlight != 0 {
		t.Errorf("consumer A stats %+v, want message 3 acked, message 1 handed back once, one abandoned", st)
	}
	if n := len(stuckErrors(sink)); n != 1 {
		t.Errorf("ErrJobStuck reported %d times, want once", n)
	}
	stuck.mu.Lock()
	if !stuck.returned || !errors.Is(stuck.ctxErr, context.DeadlineExceeded) {
		t.Errorf("the stuck handler's context ended with %v, want DeadlineExceeded", stuck.ctxErr)
	}
	stuck.mu.Unlock()
	if doneA.count(1) != 0 || doneB.count(1) != 1 {
		t.Errorf("message 1 processed %d times by A, %d by B, want once by B", doneA.count(1), doneB.count(1))
	}
	wantSettled(t, cons)
}

// TestStuckHandlerOnTheLastDeliveryIsDeadLettered: abandoned on the last
// delivery MaxDeliver allows, the message is given up: dead-lettered and
// terminated, never acked, reported once.
func TestStuckHandlerOnTheLastDeliveryIsDeadLettered(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	dlq := createStream(t, js, "DLQ", "dead.jobs")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 2})
	publish(t, js, "jobs.new", item{ID: 7})

	stuck := newStuckHandler()
	sink := &errSink{}
	pool := crew.New(2)
	defer pool.Stop()
	defer stuck.free()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		if m.Delivery() == 1 {
			return errors.New("first delivery fails")
		}
		stuck.block(ctx)
		return nil
	}, opts(WithJobTimeout(20*time.Millisecond), WithBackoff(func(int) time.Duration { return 0 }),
		WithDeadLetter(js, "dead.jobs"), WithErrorHandler(sink.handle))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "the stuck message dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := c.Stats(); st.Abandoned != 1 || st.Terminated != 1 || st.Nacked != 1 || st.Acked != 0 || st.InFlight != 0 {
		t.Errorf("stats %+v, want the first delivery handed back, the second abandoned and terminated", st)
	}
	mes := sink.messageErrors()
	if len(mes) != 1 || !errors.Is(mes[0], ErrJobStuck) || !mes[0].DeadLettered || mes[0].HandedBack || mes[0].Delivery != 2 {
		t.Fatalf("error handler got %v, want one dead-lettered MessageError of delivery 2 wrapping ErrJobStuck", sink.all())
	}
	raw, err := dlq.GetMsg(testCtx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if h := raw.Header; h.Get(HeaderDelivery) != "2" || !strings.Contains(h.Get(HeaderError), ErrJobStuck.Error()) {
		t.Errorf("dead letter headers %v, want delivery 2 and the ErrJobStuck text", h)
	}
	stuck.free()
	wantSettled(t, cons)
}

// TestJobTimeoutCancelsAndSettlesAsUsual: a handler whose context the job
// timeout cancels and that returns then is settled by what it returns:
// its error hands the message back with the backoff, its nil acks it.
// Nothing is abandoned.
func TestJobTimeoutCancelsAndSettlesAsUsual(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 5})
	publish(t, js, "jobs.new", item{ID: 1})

	const timeout = 30 * time.Millisecond
	var mu sync.Mutex
	var waited []time.Duration
	var ctxErrs []error
	var backoffs []int
	sink := &errSink{}
	pool := crew.New(2)
	defer pool.Stop()
	// The wait is measured from the message's decoding, which comes before
	// the job timeout starts: measured from the handler's start, it would
	// be short by the time the handler's goroutine took to get there.
	codec := &decodeClock{}
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		start := codec.last()
		<-ctx.Done()
		mu.Lock()
		waited = append(waited, time.Since(start))
		ctxErrs = append(ctxErrs, ctx.Err())
		mu.Unlock()
		if m.Delivery() == 1 {
			return ctx.Err()
		}
		return nil
	}, opts(WithJobTimeout(timeout), WithCodec(codec), WithErrorHandler(sink.handle), WithBackoff(func(n int) time.Duration {
		mu.Lock()
		backoffs = append(backoffs, n)
		mu.Unlock()
		return 0
	}))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "the second delivery acked", func() bool { return c.Stats().Acked == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := c.Stats(); st.Nacked != 1 || st.Abandoned != 0 || st.Terminated != 0 {
		t.Errorf("stats %+v, want one nak, one ack, nothing abandoned", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(backoffs) != 1 || backoffs[0] != 1 {
		t.Errorf("backoff asked for deliveries %v, want [1]", backoffs)
	}
	for i, err := range ctxErrs {
		if !errors.Is(err, context.DeadlineExceeded) || waited[i] < timeout {
			t.Errorf("delivery %d: context ended with %v after %v, want DeadlineExceeded after %v", i+1, err, waited[i], timeout)
		}
	}
	for _, err := range sink.all() {
		if errors.Is(err, ErrJobStuck) {
			t.Errorf("error handler got %v", err)
		}
	}
}

// decodeClock is JSON that records when it last decoded a message. A
// consumer decodes a message before it starts the message's job timeout.
type decodeClock struct {
	JSON
	mu sync.Mutex
	at time.Time
}

func (c *decodeClock) Unmarshal(data []byte, v any) error {
	c.mu.Lock()
	c.at = time.Now()
	c.mu.Unlock()
	return c.JSON.Unmarshal(data, v)
}

// last returns when c last decoded a message.
func (c *decodeClock) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// TestDrainDoesNotWaitForAStuckHandler: after the drain timeout cancels
// a handler that ignores its context, Run hands its message back and
// returns once the job timeout has passed again, instead of waiting for
// the handler for ever; the message is processed by another consumer.
func TestDrainDoesNotWaitForAStuckHandler(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: time.Minute})
	publish(t, js, "jobs.new", item{ID: 1})

	const timeout = time.Second
	stuck := newStuckHandler()
	sink := &errSink{}
	poolA := crew.New(1)
	defer poolA.Stop()
	defer stuck.free()
	a := NewConsumer(cons, poolA, func(ctx context.Context, m Msg[item]) error {
		stuck.block(ctx)
		return nil
	}, opts(WithJobTimeout(timeout), WithDrainTimeout(20*time.Millisecond), WithErrorHandler(sink.handle))...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	<-stuck.started
	stopping := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrDrainTimeout) {
			t.Errorf("Run returned %v, want ErrDrainTimeout", err)
		}
		// The hard stop cancelled the handler's context, and the grace
		// ran from there, not from the end of the job timeout, which
		// would abandon the handler 2s after it started.
		if d := time.Since(stopping); d < timeout || d > 2*timeout-timeout/4 {
			t.Errorf("Run returned %v after its context was cancelled, want about the job timeout %v after the drain timeout", d, timeout)
		}
	case <-time.After(10 * time.Second):
		stuck.free()
		t.Fatalf("Run did not return with its handler stuck: %v", <-errc)
	}
	if st := a.Stats(); st.Abandoned != 1 || st.Nacked != 1 || st.Acked != 0 || st.InFlight != 0 {
		t.Errorf("stats %+v, want the message handed back, the handler abandoned", st)
	}
	if mes := stuckErrors(sink); len(mes) != 1 || !mes[0].HandedBack {
		t.Errorf("error handler got %v, want one MessageError wrapping ErrJobStuck, handed back", sink.all())
	}

	done, stopB := otherWorker(t, ts, "workers")
	waitFor(t, 10*time.Second, "the message handed back processed by B", func() bool { return done.count(1) == 1 })
	if err := stopB(); err != nil {
		t.Fatalf("consumer B: %v", err)
	}
}
