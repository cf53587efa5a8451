package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// keyOf is the key of the tests' keyed messages: their Body.
func keyOf(m Msg[item]) string { return m.Value.Body }

// keyedItems returns n items with ids from 0, whose keys (Body) take turns
// among keys k0, k1, ...
func keyedItems(n, keys int) []item {
	out := items(0, n)
	for i := range out {
		out[i].Body = "k" + strconv.Itoa(i%keys)
	}
	return out
}

// Messages of one key run one at a time, in the order they were
// published, while messages of different keys run at once.
func TestKeyedConsumerKeepsPerKeyOrder(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	const keys, n = 3, 60
	publish(t, js, "jobs.new", keyedItems(n, keys)...)

	pool := crew.New(4)
	defer pool.Stop()
	keyed := crew.NewKeyed[string](pool)
	var mu sync.Mutex
	order := map[string][]int{}
	running := map[string]int{}
	var overlapped []string
	firsts := make(chan struct{}) // closed when each key's first message has started
	var firstsStarted int
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		key := m.Value.Body
		mu.Lock()
		running[key]++
		if running[key] > 1 {
			overlapped = append(overlapped, fmt.Sprintf("%s: %d at once at message %d", key, running[key], m.Value.ID))
		}
		order[key] = append(order[key], m.Value.ID)
		if m.Value.ID < keys {
			if firstsStarted++; firstsStarted == keys {
				close(firsts)
			}
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[key]--
			mu.Unlock()
		}()
		if m.Value.ID < keys {
			// The first message of each key waits for the others' to
			// start: the keys must run at once.
			select {
			case <-firsts:
			case <-time.After(5 * time.Second):
				return Permanent(errors.New("the first messages of the keys did not run at once"))
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, opts(WithKeyed(keyed, keyOf), WithMaxInFlight(8))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "every message settled", func() bool {
		st := c.Stats()
		return st.Acked+st.Terminated == n
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := c.Stats(); st.Acked != n || st.Fetched != n {
		t.Errorf("stats %+v, want %d fetched and acked", st, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlapped) > 0 {
		t.Errorf("messages of one key ran at once: %v", overlapped)
	}
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		var want []int
		for id := k; id < n; id += keys {
			want = append(want, id)
		}
		if !slices.Equal(order[key], want) {
			t.Errorf("key %s ran messages %v, want %v", key, order[key], want)
		}
	}
}

// The messages a Priority holds start highest priority first, and in
// publish order within a priority.
func TestPriorityConsumerStartsHighestFirst(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	const n = 20
	publish(t, js, "jobs.new", items(0, n)...)
	prio := func(m Msg[item]) int { return m.Value.ID % 4 }

	// One worker, paused until the consumer holds every message in the
	// Priority's queue: then the order is the Priority's alone.
	pool := crew.New(1)
	defer pool.Stop()
	pool.Pause()
	p := crew.NewPriority(pool, crew.WithAging(0))
	var mu sync.Mutex
	var ran []int
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		mu.Lock()
		ran = append(ran, m.Value.ID)
		mu.Unlock()
		return nil
	}, opts(WithPriority(p, prio), WithMaxInFlight(n))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "every message queued in the Priority", func() bool { return p.Stats().Unfinished == n })
	pool.Resume()
	waitFor(t, 10*time.Second, "every message acked", func() bool { return c.Stats().Acked == n })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := items(0, n)
	slices.SortStableFunc(want, func(a, b item) int { return prio(Msg[item]{Value: b}) - prio(Msg[item]{Value: a}) })
	mu.Lock()
	defer mu.Unlock()
	if !slices.EqualFunc(ran, want, func(id int, it item) bool { return id == it.ID }) {
		t.Errorf("messages ran in the order %v, want by priority, then publish order: %v", ran, want)
	}
}

// A RateLimited executor starts the messages at its rate, and a Subpool
// runs at most its limit at once and bounds, by default, what the
// consumer holds.
func TestLimitingExecutors(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")

	t.Run("RateLimited", func(t *testing.T) {
		cons := createDurable(t, js, "JOBS", "rated", natsjs.ConsumerConfig{})
		const n, every = 10, 40 * time.Millisecond
		publish(t, js, "jobs.new", items(0, n)...)
		pool := crew.New(4)
		defer pool.Stop()
		rl := crew.NewRateLimited(pool, crew.Rate{Limit: 1, Per: every})
		var mu sync.Mutex
		var starts []time.Time
		c := NewConsumer(cons, rl, func(ctx context.Context, m Msg[item]) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return nil
		}, fast...)
		begin := time.Now()
		stop := runConsumer(t, c)
		waitFor(t, 10*time.Second, "every message acked", func() bool { return c.Stats().Acked == n })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		// A token comes every 40ms, the first one after begin: of the k+1
		// first handlers to start, one started on token k or a later one,
		// at least k×40ms after begin, give or take the timers'
		// granularity. Measured between two handlers instead, the span
		// would be short by however late the first one to start was
		// scheduled.
		slices.SortFunc(starts, time.Time.Compare)
		for k, at := range starts {
			if since, least := at.Sub(begin), time.Duration(k)*every-every/2; since < least {
				t.Errorf("%d messages started within %v, want at least %v at one per %v", k+1, since, least, every)
			}
		}
	})

	t.Run("Subpool", func(t *testing.T) {
		cons := createDurable(t, js, "JOBS", "sub", natsjs.ConsumerConfig{DeliverPolicy: natsjs.DeliverNewPolicy})
		const n, limit = 12, 2
		publish(t, js, "jobs.new", items(100, 100+n)...)
		pool := crew.New(8)
		t.Cleanup(pool.Stop) // after the consumer's cleanup, as in TestConsumerHoldsAtMostItsLimit
		sub := crew.NewSubpool(pool, limit)
		release := make(chan struct{})
		var running atomicMax
		c := NewConsumer(cons, sub, func(ctx context.Context, m Msg[item]) error {
			running.add(1)
			defer running.add(-1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, fast...)
		stop := runConsumer(t, c)
		waitFor(t, 10*time.Second, "the Subpool full", func() bool { return running.load() == limit })
		// The consumer holds the Subpool's limit by default, so the
		// server sees the rest as not delivered.
		if info := consumerInfo(t, cons); info.NumAckPending != limit {
			t.Errorf("server shows %d messages pending ack, want the Subpool's limit %d", info.NumAckPending, limit)
		}
		close(release)
		waitFor(t, 10*time.Second, "every message acked", func() bool { return c.Stats().Acked == n })
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if m := running.peak(); m > limit {
			t.Errorf("%d handlers ran at once, Subpool limit %d", m, limit)
		}
	})
}

// A message that waits in a Keyed's queue behind a slow one of its key
// for longer than AckWait gets heartbeats, and is not redelivered.
func TestMessageWaitingInKeyedQueueIsNotRedelivered(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	const ackWait = 600 * time.Millisecond
	const work = 2*ackWait + ackWait/2
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{AckWait: ackWait})
	publish(t, js, "jobs.new", item{ID: 1, Body: "a"}, item{ID: 2, Body: "a"})

	pool := crew.New(4)
	defer pool.Stop()
	keyed := crew.NewKeyed[string](pool)
	calls := newIDSet()
	deliveries := map[int]int{}
	var mu sync.Mutex
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		calls.add(m.Value.ID)
		mu.Lock()
		deliveries[m.Value.ID] = m.Delivery()
		mu.Unlock()
		if m.Value.ID != 1 {
			return nil
		}
		t := time.NewTimer(work) // the task's work, not a wait for a condition
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, opts(WithKeyed(keyed, keyOf))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "both messages acked", func() bool { return c.Stats().Acked == 2 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := calls.snapshot(); got[1] != 1 || got[2] != 1 {
		t.Errorf("handler calls by message %v, want each once", got)
	}
	mu.Lock()
	if deliveries[2] != 1 {
		t.Errorf("the waiting message ran on delivery %d, want 1", deliveries[2])
	}
	mu.Unlock()
	if st := c.Stats(); st.Fetched != 2 || st.Heartbeats < 4 {
		t.Errorf("stats %+v, want 2 fetched and at least 4 heartbeats, for the running and the waiting message", st)
	}
	if info := wantSettled(t, cons); info.NumRedelivered != 0 {
		t.Errorf("server shows %d redelivered, want 0", info.NumRedelivered)
	}
}

// processAll runs a plain consumer of cons until every id in [from, to)
// has been processed, and returns how many times each was.
func processAll(t *testing.T, cons natsjs.Consumer, from, to int) map[int]int {
	t.Helper()
	pool := crew.New(4)
	defer pool.Stop()
	seen := newIDSet()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		seen.add(m.Value.ID)
		return nil
	}, fast...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "every message processed", func() bool {
		for id := from; id < to; id++ {
			if seen.count(id) == 0 {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return seen.snapshot()
}

// When Run drains, the messages still queued in a layer are handed back
// with the unfinished one once the drain timeout passes: none is acked
// unprocessed, and another consumer gets them all.
func TestDrainHandsBackMessagesQueuedInALayer(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	const n = 10
	publish(t, js, "jobs.new", keyedItems(n, 1)...) // one key

	pool := crew.New(2)
	defer pool.Stop()
	keyed := crew.NewKeyed[string](pool)
	var calls atomicMax
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		calls.add(1)
		<-ctx.Done() // the first message blocks its key until the hard stop
		return ctx.Err()
	}, opts(WithKeyed(keyed, keyOf), WithMaxInFlight(n), WithDrainTimeout(100*time.Millisecond))...)
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "every message held, one running", func() bool {
		return c.Stats().InFlight == n && calls.load() == 1 && keyed.Stats().Waiting == n-1
	})
	if err := stop(); !errors.Is(err, ErrDrainTimeout) {
		t.Fatalf("Run: %v, want ErrDrainTimeout", err)
	}
	keyed.Wait() // the queued tasks find their messages handed back
	if st := c.Stats(); calls.load() != 1 || st.Acked != 0 || st.Nacked != n || st.InFlight != 0 {
		t.Errorf("%d handler calls, stats %+v, want 1 call and every message handed back", calls.load(), st)
	}
	for id, k := range processAll(t, cons, 0, n) {
		if k != 1 {
			t.Errorf("message %d processed %d times by the second consumer", id, k)
		}
	}
}

// When the pool stops, the messages a RateLimited holds back are dropped:
// the consumer hands them back and Run stops with an error wrapping
// crew.ErrStopped, and another consumer gets them.
func TestPoolStopHandsBackMessagesALayerDropped(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	const n = 5
	publish(t, js, "jobs.new", items(0, n)...)

	pool := crew.New(2)
	rl := crew.NewRateLimited(pool, crew.Rate{Limit: 1, Per: time.Hour}) // one start, then none
	c := NewConsumer(cons, rl, func(ctx context.Context, m Msg[item]) error { return nil },
		opts(WithMaxInFlight(n))...)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, 10*time.Second, "one message acked, the others waiting for a token", func() bool {
		return c.Stats().Acked == 1 && rl.Stats().Waiting == n-1
	})
	pool.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, crew.ErrStopped) || !errors.Is(err, crew.ErrDropped) {
			t.Errorf("Run: %v, want an error wrapping crew.ErrStopped and crew.ErrDropped", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("Run did not stop when the pool stopped; after cancelling it returned %v", <-done)
	}
	// Messages handed back may come again to a pull still open: they
	// are handed back again.
	if st := c.Stats(); st.Acked != 1 || st.Nacked != st.Fetched-1 || st.Nacked < n-1 || st.InFlight != 0 {
		t.Errorf("stats %+v, want 1 acked and the others handed back", st)
	}
	got := processAll(t, cons, 1, n)
	if len(got) != n-1 {
		t.Errorf("the second consumer processed %v, want messages 1 to %d", got, n-1)
	}
}
