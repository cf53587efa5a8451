package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// TestHandedBackMessageIsNotGivenUpOrSnoozed: once the drain timeout has
// handed a message back (Nak), its handler's outcome must be ignored, as
// an ack is: a Permanent error or a panic must not publish a dead letter,
// and a Snooze must not publish a schedule of a copy, or the job would be
// both redelivered and dead-lettered, or run twice.
func TestHandedBackMessageIsNotGivenUpOrSnoozed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome func(ctx context.Context) error
	}{
		{"Permanent", func(ctx context.Context) error { return Permanent(ctx.Err()) }},
		{"panic", func(ctx context.Context) error { panic(ctx.Err()) }},
		{"Snooze", func(context.Context) error { return Snooze(time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLeaks(t)
			js, st, q, cons := jobQueue(t, natsjs.ConsumerConfig{AckWait: time.Minute})
			dlq := createStream(t, js, "DLQ", "dead.jobs")
			if _, err := q.Enqueue(testCtx(t), item{ID: 1}); err != nil {
				t.Fatal(err)
			}
			sink := &errSink{}
			started := make(chan struct{})
			pool := crew.New(1)
			defer pool.Stop()
			c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
				close(started)
				<-ctx.Done() // cancelled by the hard stop, after the hand back
				return tc.outcome(ctx)
			}, opts(WithDrainTimeout(20*time.Millisecond), WithDeadLetter(js, "dead.jobs"),
				WithSnooze(js), WithErrorHandler(sink.handle))...)
			stop := runConsumer(t, c)
			<-started
			if err := stop(); !errors.Is(err, ErrDrainTimeout) {
				t.Fatalf("Run returned %v, want ErrDrainTimeout", err)
			}
			if s := c.Stats(); s.Nacked != 1 || s.Terminated != 0 || s.DeadLettered != 0 || s.Snoozed != 0 || s.InFlight != 0 {
				t.Errorf("stats %+v, want the message handed back only", s)
			}
			if n := streamMsgs(t, dlq); n != 0 {
				t.Errorf("dead-letter stream holds %d messages, want none: the message was handed back", n)
			}
			if n := streamMsgs(t, st); n != 1 {
				t.Errorf("job stream holds %d messages, want the job alone, no schedule of a copy", n)
			}
			for _, me := range sink.messageErrors() {
				t.Errorf("error handler got a MessageError for %s/%d (dead-lettered %v) for a message handed back", me.Stream, me.Sequence, me.DeadLettered)
			}
		})
	}
}
