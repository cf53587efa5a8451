package jetstream

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// errSink collects what reaches a consumer's error handler.
type errSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errSink) handle(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

// messageErrors returns the *MessageErrors received.
func (s *errSink) messageErrors() []*MessageError {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*MessageError
	for _, err := range s.errs {
		var me *MessageError
		if errors.As(err, &me) {
			out = append(out, me)
		}
	}
	return out
}

// streamMsgs returns the number of messages stored in a stream.
func streamMsgs(t testing.TB, st natsjs.Stream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

func TestNakWithBackoffUntilMaxDeliverThenDeadLetter(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	dlq := createStream(t, js, "DLQ", "dead.jobs")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 3})
	publish(t, js, "jobs.new", item{ID: 7, Body: "x"})

	var mu sync.Mutex
	var deliveries []int
	var arrived []time.Time
	var backoffs []int
	const delay = 50 * time.Millisecond
	sink := &errSink{}
	pool := crew.New(2)
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		mu.Lock()
		deliveries = append(deliveries, m.Delivery())
		arrived = append(arrived, time.Now())
		mu.Unlock()
		return errors.New("boom")
	}, opts(
		WithBackoff(func(n int) time.Duration {
			mu.Lock()
			backoffs = append(backoffs, n)
			mu.Unlock()
			return delay
		}),
		WithDeadLetter(js, "dead.jobs"),
		WithErrorHandler(sink.handle),
	)...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "a dead letter", func() bool { return streamMsgs(t, dlq) == 1 })
	waitFor(t, 5*time.Second, "the message settled", func() bool { return c.Stats().Terminated == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 3}; !slices.Equal(deliveries, want) {
		t.Errorf("deliveries %v, want %v", deliveries, want)
	}
	if want := []int{1, 2}; !slices.Equal(backoffs, want) {
		t.Errorf("backoff asked for deliveries %v, want %v", backoffs, want)
	}
	for i := 1; i < len(arrived); i++ {
		if gap := arrived[i].Sub(arrived[i-1]); gap < delay {
			t.Errorf("delivery %d came %v after the previous one, before the %v backoff", i+1, gap, delay)
		}
	}
	st := c.Stats()
	if st.Nacked != 2 || st.Terminated != 1 || st.DeadLettered != 1 || st.Acked != 0 {
		t.Errorf("stats %+v, want 2 nacked, 1 terminated and dead-lettered", st)
	}
	ctx := testCtx(t)
	raw, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got item
	if err := (JSON{}).Unmarshal(raw.Data, &got); err != nil || got.ID != 7 {
		t.Errorf("dead letter body %q (%v), want item 7", raw.Data, err)
	}
	h := raw.Header
	if h.Get(HeaderStream) != "JOBS" || h.Get(HeaderSequence) != "1" || h.Get(HeaderDelivery) != "3" ||
		h.Get(HeaderSubject) != "jobs.new" || !strings.Contains(h.Get(HeaderError), "boom") {
		t.Errorf("dead letter headers %v", h)
	}
	if mes := sink.messageErrors(); len(mes) != 1 || !mes[0].DeadLettered || mes[0].Sequence != 1 {
		t.Errorf("error handler got %v, want one MessageError for the dead letter", mes)
	}
	wantSettled(t, cons)
}

// A dead-letter publish that fails on the last delivery MaxDeliver allows
// terminates the message and reports the failure: handing it back, as on
// an earlier delivery, would lose it without a word, as the server does
// not redeliver it.
func TestDeadLetterFailingOnTheLastDeliveryTerminates(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 1})
	publish(t, js, "jobs.new", item{ID: 7, Body: "x"})
	sink := &errSink{}
	pool := crew.New(2)
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(context.Context, Msg[item]) error { return errors.New("boom") },
		opts(WithDeadLetter(js, "nowhere.dead"), WithErrorHandler(sink.handle))...) // no stream takes it
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "the message settled", func() bool { return c.Stats().Terminated == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := c.Stats(); st.Nacked != 0 || st.DeadLettered != 0 {
		t.Errorf("stats %+v, want the message terminated, not handed back nor dead-lettered", st)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.errs) != 2 || !strings.Contains(sink.errs[0].Error(), "last delivery") {
		t.Errorf("error handler got %v, want the failed dead letter, then the MessageError", sink.errs)
	}
}

func TestPanicIsDeadLetteredOnce(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	dlq := createStream(t, js, "DLQ", "dead.jobs")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 5})
	publish(t, js, "jobs.new", items(0, 20)...)

	seen := newIDSet()
	sink := &errSink{}
	pool := crew.New(4)
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		if m.Value.ID == 13 {
			panic("unlucky")
		}
		return nil
	}, opts(WithDeadLetter(js, "dead.jobs"), WithErrorHandler(sink.handle), WithBackoff(func(int) time.Duration { return 0 }))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "20 messages and a dead letter", func() bool {
		return seen.distinct() == 20 && c.Stats().DeadLettered == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := seen.count(13); n != 1 {
		t.Errorf("the panicking message was delivered %d times, want 1", n)
	}
	if n := streamMsgs(t, dlq); n != 1 {
		t.Errorf("dead-letter stream holds %d messages, want 1", n)
	}
	st := c.Stats()
	if st.Panicked != 1 || st.Terminated != 1 || st.Acked != 19 {
		t.Errorf("stats %+v, want 1 panicked and terminated, 19 acked", st)
	}
	mes := sink.messageErrors()
	var pe *crew.PanicError
	if len(mes) != 1 || !errors.As(mes[0], &pe) || pe.Value != "unlucky" || len(pe.Stack) == 0 {
		t.Fatalf("error handler got %v, want one MessageError wrapping the *crew.PanicError", mes)
	}
	if info := wantSettled(t, cons); info.NumRedelivered != 0 {
		t.Errorf("consumer has %d redelivered, want none", info.NumRedelivered)
	}
}

func TestPermanentErrorsAndUndecodableMessagesAreTerminated(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	publish(t, js, "jobs.new", item{ID: 1})
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, "jobs.new", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "jobs.new", item{ID: 2})

	seen := newIDSet()
	sink := &errSink{}
	pool := crew.New(2)
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		if m.Value.ID == 1 {
			return Permanent(errors.New("invalid job"))
		}
		return nil
	}, opts(WithErrorHandler(sink.handle))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "3 messages settled", func() bool {
		st := c.Stats()
		return st.Terminated == 2 && st.Acked == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := seen.snapshot(); len(got) != 2 || got[1] != 1 || got[2] != 1 {
		t.Errorf("handler saw %v, want items 1 and 2 once each (not the undecodable one)", got)
	}
	mes := sink.messageErrors()
	if len(mes) != 2 || mes[0].DeadLettered || mes[1].DeadLettered {
		t.Fatalf("error handler got %v, want two terminated messages", mes)
	}
	var permanent, decode bool
	for _, me := range mes {
		permanent = permanent || (IsPermanent(me) && me.Sequence == 1)
		decode = decode || (strings.Contains(me.Error(), "decode") && me.Sequence == 2)
	}
	if !permanent || !decode {
		t.Errorf("error handler got %v, want message 1 permanent and message 2 undecodable", mes)
	}
	if info := wantSettled(t, cons); info.NumRedelivered != 0 {
		t.Errorf("consumer has %d redelivered, want none", info.NumRedelivered)
	}
}

// panickyCodec is JSON, except that Unmarshal panics on the payload "boom".
type panickyCodec struct{ JSON }

func (c panickyCodec) Unmarshal(data []byte, v any) error {
	if string(data) == "boom" {
		panic("codec exploded")
	}
	return c.JSON.Unmarshal(data, v)
}

// A panic in the codec's Unmarshal is a decoding failure: the message is
// terminated and reported with a *crew.PanicError, and the consumer goes on
// with the next one, also on a pool built WithCrashOnPanic.
func TestCodecPanicTerminatesTheMessage(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	if _, err := js.Publish(ctx, "jobs.new", []byte("boom")); err != nil {
		t.Fatal(err)
	}
	publish(t, js, "jobs.new", item{ID: 2})

	seen := newIDSet()
	sink := &errSink{}
	pool := crew.New(2, crew.WithCrashOnPanic())
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		return nil
	}, opts(WithCodec(panickyCodec{}), WithErrorHandler(sink.handle))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "2 messages settled", func() bool {
		st := c.Stats()
		return st.Terminated == 1 && st.Acked == 1
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := seen.snapshot(); len(got) != 1 || got[2] != 1 {
		t.Errorf("handler saw %v, want item 2 once", got)
	}
	mes := sink.messageErrors()
	var pe *crew.PanicError
	if len(mes) != 1 || mes[0].Sequence != 1 || !errors.As(mes[0], &pe) || pe.Value != "codec exploded" {
		t.Fatalf("error handler got %v, want message 1 with the codec's panic", mes)
	}
}

func TestHeartbeatsKeepLongTasksFromRedelivery(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	// Two consumers of the same stream: one sends heartbeats (a third of
	// AckWait by default), the other does not. Each task outlasts AckWait
	// twice over.
	const ackWait = 600 * time.Millisecond
	const work = 2*ackWait + ackWait/2
	beating := createDurable(t, js, "JOBS", "beating", natsjs.ConsumerConfig{AckWait: ackWait})
	silent := createDurable(t, js, "JOBS", "silent", natsjs.ConsumerConfig{AckWait: ackWait})
	publish(t, js, "jobs.new", item{ID: 1})

	longTask := func(calls *atomicMax) Handler[item] {
		return func(ctx context.Context, m Msg[item]) error {
			calls.add(1)
			t := time.NewTimer(work) // the task's work, not a wait for a condition
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	var beatCalls, silentCalls atomicMax
	pool := crew.New(4)
	defer pool.Stop()
	cb := NewConsumer(beating, pool, longTask(&beatCalls), fast...)
	cs := NewConsumer(silent, pool, longTask(&silentCalls), opts(WithHeartbeat(0), WithDrainTimeout(10*time.Millisecond))...)
	stopB, stopS := runConsumer(t, cb), runConsumer(t, cs)
	waitFor(t, 10*time.Second, "the long task acked", func() bool { return cb.Stats().Acked == 1 })
	waitFor(t, 10*time.Second, "the silent consumer's redelivery", func() bool { return silentCalls.load() >= 2 })
	if err := stopB(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	stopS()
	if n := beatCalls.load(); n != 1 {
		t.Errorf("with heartbeats the task ran %d times, want 1", n)
	}
	if st := cb.Stats(); st.Heartbeats < 3 {
		t.Errorf("%d heartbeats sent for a task of %v with AckWait %v, want at least 3", st.Heartbeats, work, ackWait)
	}
	if info := wantSettled(t, beating); info.NumRedelivered != 0 {
		t.Errorf("heartbeating consumer: %d redelivered, want 0", info.NumRedelivered)
	}
}
