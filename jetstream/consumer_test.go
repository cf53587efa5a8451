package jetstream

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

func TestConsumerAcksEveryMessage(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	publish(t, js, "jobs.new", items(0, 200)...)

	pool := crew.New(4, crew.WithQueueSize(0))
	defer pool.Stop()
	seen := newIDSet()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		return nil
	})
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "200 messages", func() bool { return seen.distinct() == 200 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for id, n := range seen.snapshot() {
		if n != 1 {
			t.Errorf("message %d processed %d times", id, n)
		}
	}
	st := c.Stats()
	if st.Acked != 200 || st.Fetched != 200 || st.InFlight != 0 {
		t.Errorf("stats %+v, want 200 fetched and acked, none in flight", st)
	}
	waitFor(t, 5*time.Second, "no ack pending", func() bool {
		info := consumerInfo(t, cons)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
}

// fast are the options that keep the tests quick: short pulls, so that
// stopping does not wait long for the pulls in progress to expire.
var fast = []ConsumerOption{WithFetchWait(200 * time.Millisecond), WithErrorHandler(func(error) {})}

func opts(extra ...ConsumerOption) []ConsumerOption {
	return append(append([]ConsumerOption(nil), fast...), extra...)
}

func TestConsumerHoldsAtMostItsLimit(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	publish(t, js, "jobs.new", items(0, 10)...)

	const limit = 3
	pool := crew.New(limit, crew.WithQueueSize(0))
	// A cleanup, not a defer: after a failure the consumer's cleanup runs
	// first and its hard stop lets the handlers return, instead of Stop
	// waiting for handlers blocked until release.
	t.Cleanup(pool.Stop)
	release := make(chan struct{})
	var running atomicMax
	seen := newIDSet()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		running.add(1)
		defer running.add(-1)
		seen.add(m.Value.ID)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}, fast...)
	stop := runConsumer(t, c)
	waitFor(t, 5*time.Second, "3 running handlers", func() bool { return running.load() == limit })
	// With every slot taken no pull may be open, so the server must show
	// exactly the three messages as delivered and unacknowledged, and the
	// other seven as not delivered.
	waitFor(t, 5*time.Second, "no pull open", func() bool { return c.Stats().Fetched == limit })
	info := consumerInfo(t, cons)
	if info.NumAckPending != limit || info.NumPending != 10-limit {
		t.Fatalf("server shows %d messages pending ack and %d not delivered, want %d and %d",
			info.NumAckPending, info.NumPending, limit, 10-limit)
	}
	if st := c.Stats(); st.InFlight != limit {
		t.Fatalf("consumer holds %d messages, want %d", st.InFlight, limit)
	}
	close(release)
	waitFor(t, 5*time.Second, "10 messages", func() bool { return seen.distinct() == 10 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := running.peak(); m > limit {
		t.Fatalf("%d handlers ran at once, limit %d", m, limit)
	}
}

// A pool limit of math.MaxInt, as the default in-flight bound, and
// WithMaxInFlight(math.MaxInt) cost nothing: messages are processed at
// once and Run stops promptly.
func TestHugeInFlightBoundRunsAndStops(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	for _, tc := range []struct {
		name    string
		workers int
		opts    []ConsumerOption
	}{
		{"pool limit", math.MaxInt, fast},
		{"WithMaxInFlight", 2, opts(WithMaxInFlight(math.MaxInt))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons := createDurable(t, js, "JOBS", strings.ReplaceAll(tc.name, " ", "-"), natsjs.ConsumerConfig{})
			publish(t, js, "jobs.new", items(0, 3)...)
			pool := crew.New(tc.workers)
			defer pool.Stop()
			seen := newIDSet()
			c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
				seen.add(m.Value.ID)
				return nil
			}, tc.opts...)
			stop := runConsumer(t, c)
			waitFor(t, 5*time.Second, "3 messages", func() bool { return seen.distinct() == 3 })
			errc := make(chan error, 1)
			go func() { errc <- stop() }()
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Run did not return within 5s of its context ending: %v", <-errc)
			}
		})
	}
}

// By default a consumer holds at most DefaultMaxInFlight messages, however
// large its pool's worker limit.
func TestDefaultInFlightIsCapped(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	const extra = 10
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxAckPending: 2 * DefaultMaxInFlight})
	publish(t, js, "jobs.new", items(0, DefaultMaxInFlight+extra)...)

	pool := crew.New(4 * DefaultMaxInFlight)
	t.Cleanup(pool.Stop) // after the consumer's cleanup, as in TestConsumerHoldsAtMostItsLimit
	release := make(chan struct{})
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, fast...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "the consumer holding DefaultMaxInFlight messages", func() bool {
		return c.Stats().InFlight == DefaultMaxInFlight
	})
	// Every slot is taken, so no pull may be open: the server shows the
	// messages held as pending ack and the others as not delivered.
	if info := consumerInfo(t, cons); info.NumAckPending != DefaultMaxInFlight || info.NumPending != extra {
		t.Errorf("server shows %d messages pending ack and %d not delivered, want %d and %d",
			info.NumAckPending, info.NumPending, DefaultMaxInFlight, extra)
	}
	close(release)
	waitFor(t, 10*time.Second, "every message acked", func() bool {
		return c.Stats().Acked == DefaultMaxInFlight+extra
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
