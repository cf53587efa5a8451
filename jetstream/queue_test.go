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

// handled is what a test handler saw of one delivery.
type handled struct {
	at      time.Time
	id      int
	attempt int
	header  string
	subject string
}

// recorder is a handler that sends what it saw on a channel and returns
// the error outcome gives for the n-th call (from 1), nil if outcome is
// nil.
func recorder(seen chan<- handled, outcome func(n int) error) Handler[item] {
	var mu sync.Mutex
	n := 0
	return func(ctx context.Context, m Msg[item]) error {
		mu.Lock()
		n++
		call := n
		mu.Unlock()
		seen <- handled{at: time.Now(), id: m.Value.ID, attempt: m.Attempt(), header: m.Header.Get("Tenant"), subject: m.Subject}
		if outcome == nil {
			return nil
		}
		return outcome(call)
	}
}

// runRecorder runs a Consumer of cons, on a pool of one worker, whose
// handler is recorder(seen, outcome), with the options of opts and o.
func runRecorder(t *testing.T, cons natsjs.Consumer, outcome func(n int) error, o ...ConsumerOption) (<-chan handled, *Consumer[item]) {
	t.Helper()
	pool := crew.New(1, crew.WithQueueSize(0))
	t.Cleanup(pool.Stop)
	seen := make(chan handled, 100)
	c := NewConsumer(cons, pool, recorder(seen, outcome), opts(o...)...)
	runConsumer(t, c) // stopped before the pool, by cleanups in reverse
	return seen, c
}

// next returns the next delivery seen, failing t if none comes within d.
func next(t *testing.T, seen <-chan handled, d time.Duration) handled {
	t.Helper()
	select {
	case h := <-seen:
		return h
	case <-time.After(d):
		t.Fatalf("no job handled within %v", d)
		return handled{}
	}
}

// jobQueue starts a server with a job stream JOBS of jobs.>, and returns a
// JetStream, the stream, a Queue of jobs.email and a durable consumer whose
// filter is jobs.email.
func jobQueue(t *testing.T, cfg natsjs.ConsumerConfig) (natsjs.JetStream, natsjs.Stream, *Queue[item], natsjs.Consumer) {
	t.Helper()
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStreamWith(t, js, natsjs.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, AllowMsgSchedules: true, AllowMsgTTL: true,
	})
	if cfg.FilterSubject == "" {
		cfg.FilterSubject = "jobs.email"
	}
	cons := createDurable(t, js, "JOBS", "workers", cfg)
	return js, st, NewQueue[item](js, "jobs.email"), cons
}

func TestEnqueueDelayedJobIsNotHandledBeforeItsTime(t *testing.T) {
	checkLeaks(t)
	_, _, q, cons := jobQueue(t, natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	seen, _ := runRecorder(t, cons, nil)

	const delay = 300 * time.Millisecond
	before := time.Now()
	seq, err := q.Enqueue(ctx, item{ID: 1}, WithDelay(delay), WithHeader("Tenant", "acme"))
	if err != nil || seq == 0 {
		t.Fatalf("Enqueue delayed = %d, %v", seq, err)
	}
	at := time.Now().Add(2 * delay)
	if _, err := q.Enqueue(ctx, item{ID: 2}, WithRunAt(at)); err != nil {
		t.Fatalf("Enqueue at: %v", err)
	}
	if _, err := q.Enqueue(ctx, item{ID: 3}, WithHeader("Tenant", "now")); err != nil {
		t.Fatalf("Enqueue now: %v", err)
	}
	first := next(t, seen, 5*time.Second)
	if first.id != 3 || first.header != "now" {
		t.Errorf("first job handled: %+v, want job 3, enqueued last without a delay, with its header", first)
	}
	h := next(t, seen, 5*time.Second)
	if h.id != 1 {
		t.Fatalf("second job handled: %+v, want job 1", h)
	}
	if early := before.Add(delay).Sub(h.at); early > 0 {
		t.Errorf("delayed job handled %v before its time", early)
	}
	if h.header != "acme" || h.subject != "jobs.email" || h.attempt != 1 {
		t.Errorf("delayed job handled as %+v, want header Tenant acme, subject jobs.email, attempt 1", h)
	}
	h = next(t, seen, 5*time.Second)
	if h.id != 2 || h.at.Before(at) {
		t.Errorf("third job handled: %+v, want job 2 not before %v", h, at)
	}
}

func TestEnqueueUniqueIDIsStoredOnce(t *testing.T) {
	checkLeaks(t)
	_, st, q, _ := jobQueue(t, natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	seq, err := q.Enqueue(ctx, item{ID: 1}, WithUniqueID("welcome-42"))
	if err != nil {
		t.Fatalf("first Enqueue: %v", err)
	}
	again, err := q.Enqueue(ctx, item{ID: 2}, WithUniqueID("welcome-42"))
	if !errors.Is(err, ErrDuplicate) || again != seq {
		t.Errorf("second Enqueue = %d, %v; want %d and ErrDuplicate", again, err, seq)
	}
	// A delayed job's id is its schedule's.
	if _, err := q.Enqueue(ctx, item{ID: 3}, WithUniqueID("later"), WithDelay(time.Hour)); err != nil {
		t.Fatalf("delayed Enqueue: %v", err)
	}
	if _, err := q.Enqueue(ctx, item{ID: 3}, WithUniqueID("later"), WithDelay(time.Hour)); !errors.Is(err, ErrDuplicate) {
		t.Errorf("delayed Enqueue again: %v, want ErrDuplicate", err)
	}
	if n := streamMsgs(t, st); n != 2 {
		t.Errorf("stream holds %d messages, want 2: a job and a schedule", n)
	}
	w, err := q.DuplicateWindow(ctx)
	if err != nil || w != time.Minute {
		t.Errorf("DuplicateWindow = %v, %v; want the stream's 1m", w, err)
	}
}

func TestEnqueueTTLExpiresUnhandled(t *testing.T) {
	checkLeaks(t)
	_, st, q, _ := jobQueue(t, natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithTTL(time.Second)); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if _, err := q.Enqueue(ctx, item{ID: 2}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if n := streamMsgs(t, st); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
	waitFor(t, 10*time.Second, "the job with a TTL to expire", func() bool { return streamMsgs(t, st) == 1 })
	m, err := st.GetLastMsgForSubject(ctx, "jobs.email")
	if err != nil || m.Sequence != 2 {
		t.Errorf("the job left is %v, %v; want the one without a TTL", m, err)
	}
}

func TestEnqueueRefusedByAStreamWithoutSchedulesOrTTL(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")
	q := NewQueue[item](js, "jobs.email")
	ctx := testCtx(t)
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithDelay(time.Minute)); err == nil {
		t.Error("delayed Enqueue to a stream without message schedules succeeded")
	}
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithTTL(time.Minute)); err == nil {
		t.Error("Enqueue with a TTL to a stream without message TTLs succeeded")
	}
	// Not due later: published at once, no schedule needed.
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithDelay(0)); err != nil {
		t.Errorf("Enqueue with no delay: %v", err)
	}
	if n := streamMsgs(t, st); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}

func TestSnoozeDoesNotCountAnAttempt(t *testing.T) {
	checkLeaks(t)
	js, _, q, cons := jobQueue(t, natsjs.ConsumerConfig{MaxDeliver: 2})
	ctx := testCtx(t)
	const snooze = 300 * time.Millisecond
	// Fail, then snooze three times (more than MaxDeliver allows
	// deliveries), then succeed.
	outcome := func(n int) error {
		switch n {
		case 1:
			return errors.New("fails once")
		case 2, 3, 4:
			return Snooze(snooze)
		}
		return nil
	}
	seen, c := runRecorder(t, cons, outcome,
		WithSnooze(js), WithBackoff(func(int) time.Duration { return 10 * time.Millisecond }))
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithHeader("Tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	var calls []handled
	for range 5 {
		calls = append(calls, next(t, seen, 5*time.Second))
	}
	want := []int{1, 2, 2, 2, 2}
	for i, h := range calls {
		if h.attempt != want[i] || h.header != "acme" || h.subject != "jobs.email" {
			t.Errorf("call %d: %+v, want attempt %d, header Tenant acme, subject jobs.email", i+1, h, want[i])
		}
		if i >= 2 {
			if gap := h.at.Sub(calls[i-1].at); gap < snooze {
				t.Errorf("call %d came %v after the snooze of %v", i+1, gap, snooze)
			}
		}
	}
	waitFor(t, 5*time.Second, "the job acknowledged", func() bool { return c.Stats().Acked == 1 })
	if s := c.Stats(); s.Snoozed != 3 || s.Terminated != 0 || s.Nacked != 1 {
		t.Errorf("stats %+v, want 3 snoozed, 1 nacked, none terminated", s)
	}
	select {
	case h := <-seen:
		t.Errorf("job handled again after it succeeded: %+v", h)
	default:
	}
}

// TestSnoozeWithoutWithSnoozeCountsADelivery: without WithSnooze, a
// snooze is a NakWithDelay, which the server counts.
func TestSnoozeWithoutWithSnoozeCountsADelivery(t *testing.T) {
	checkLeaks(t)
	_, _, q, cons := jobQueue(t, natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	const snooze = 300 * time.Millisecond
	seen, c := runRecorder(t, cons, func(n int) error {
		if n == 1 {
			return Snooze(snooze)
		}
		return nil
	})
	if _, err := q.Enqueue(ctx, item{ID: 1}); err != nil {
		t.Fatal(err)
	}
	first, second := next(t, seen, 5*time.Second), next(t, seen, 5*time.Second)
	if first.attempt != 1 || second.attempt != 2 {
		t.Errorf("attempts %d then %d, want 1 then 2", first.attempt, second.attempt)
	}
	if gap := second.at.Sub(first.at); gap < snooze {
		t.Errorf("redelivered %v after a snooze of %v", gap, snooze)
	}
	waitFor(t, 5*time.Second, "the job acknowledged", func() bool { return c.Stats().Acked == 1 })
	if s := c.Stats(); s.Snoozed != 1 {
		t.Errorf("stats %+v, want 1 snoozed", s)
	}
}

func TestScheduleRunsPeriodicJobUntilUnscheduled(t *testing.T) {
	checkLeaks(t)
	_, st, q, cons := jobQueue(t, natsjs.ConsumerConfig{})
	ctx := testCtx(t)
	seen, _ := runRecorder(t, cons, nil)
	// Scheduling again under the same name replaces the schedule.
	if _, err := q.Schedule(ctx, "tick", "@every 1h", item{ID: 1}); err != nil {
		t.Fatalf("Schedule: %v", err)
	}
	if _, err := q.Schedule(ctx, "tick", "@every 1s", item{ID: 2}, WithHeader("Tenant", "cron")); err != nil {
		t.Fatalf("Schedule again: %v", err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter("jobs.email.schedule.>"))
	if err != nil || info.State.Subjects["jobs.email.schedule.tick"] != 1 || len(info.State.Subjects) != 1 {
		t.Fatalf("schedules stored: %v, %v; want one, jobs.email.schedule.tick", info.State.Subjects, err)
	}
	a, b := next(t, seen, 5*time.Second), next(t, seen, 5*time.Second)
	for _, h := range []handled{a, b} {
		if h.id != 2 || h.header != "cron" {
			t.Errorf("periodic job handled as %+v, want job 2 with header Tenant cron", h)
		}
	}
	if gap := b.at.Sub(a.at); gap < 500*time.Millisecond {
		t.Errorf("periodic job ran twice %v apart, want about 1s", gap)
	}
	if err := q.Unschedule(ctx, "tick"); err != nil {
		t.Fatalf("Unschedule: %v", err)
	}
	if err := q.Unschedule(ctx, "tick"); err != nil {
		t.Errorf("Unschedule again: %v", err)
	}
	// One run may have been published as Unschedule was called; none after.
	quiet := time.After(2500 * time.Millisecond)
	late := 0
	for waiting := true; waiting; {
		select {
		case <-seen:
			late++
		case <-quiet:
			waiting = false
		}
	}
	if late > 1 {
		t.Errorf("periodic job ran %d times within 2.5s of Unschedule", late)
	}
}

// TestConsumerDoesNotRunASchedule: a consumer whose filter matches the
// schedules does not run them early; it reports them, and runs the job
// when the server publishes it.
func TestConsumerDoesNotRunASchedule(t *testing.T) {
	checkLeaks(t)
	_, _, q, cons := jobQueue(t, natsjs.ConsumerConfig{FilterSubject: "jobs.>"})
	ctx := testCtx(t)
	reported := make(chan error, 10)
	seen, _ := runRecorder(t, cons, nil, WithErrorHandler(func(err error) {
		select {
		case reported <- err:
		default:
		}
	}))
	const delay = 300 * time.Millisecond
	before := time.Now()
	if _, err := q.Enqueue(ctx, item{ID: 1}, WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reported:
		if !strings.Contains(err.Error(), "message schedule") {
			t.Errorf("reported %v, want the schedule", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("schedule not reported")
	}
	h := next(t, seen, 5*time.Second)
	if h.id != 1 || h.subject != "jobs.email" || h.at.Before(before.Add(delay)) {
		t.Errorf("handled %+v, want job 1 on jobs.email, not before its time", h)
	}
	select {
	case h := <-seen:
		t.Errorf("handled again: %+v", h)
	default:
	}
}
