package jetstream

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
)

type requestKey struct{}

// TestHeaderInjectorReachesHandlerContext carries a value of the Enqueue
// context to the handler's through a header, for a job enqueued now and
// a delayed one, and leaves a context without the value, and the
// server's headers, alone.
func TestHeaderInjectorReachesHandlerContext(t *testing.T) {
	checkLeaks(t)
	js, _, _, cons := jobQueue(t, natsjs.ConsumerConfig{})
	q := NewQueue[item](js, "jobs.email", WithHeaderInjector(func(ctx context.Context, h nats.Header) {
		if id, ok := ctx.Value(requestKey{}).(string); ok {
			h.Set("Request-Id", id)
			h.Set("Tenant", "from-injector")
			h.Set(natsjs.MsgIDHeader, "not-the-injectors") // the server's: left out
		}
	}))
	type seenCtx struct {
		request, tenant, msgID string
		cancelled              bool
	}
	seen := make(chan seenCtx, 10)
	pool := crew.New(1)
	t.Cleanup(pool.Stop)
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		request, _ := ctx.Value(requestKey{}).(string)
		seen <- seenCtx{request: request, tenant: m.Header.Get("Tenant"), msgID: m.Header.Get(natsjs.MsgIDHeader), cancelled: ctx.Err() != nil}
		return nil
	}, opts(WithContextExtractor(func(ctx context.Context, h nats.Header) context.Context {
		if id := h.Get("Request-Id"); id != "" {
			return context.WithValue(ctx, requestKey{}, id)
		}
		return nil // stands for ctx
	}))...)
	runConsumer(t, c)

	ctx := testCtx(t)
	traced := context.WithValue(ctx, requestKey{}, "r-1")
	if _, err := q.Enqueue(traced, item{ID: 1}, WithHeader("Tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.request != "r-1" || got.tenant != "from-injector" || got.msgID == "not-the-injectors" || got.cancelled {
		t.Errorf("job enqueued with a request id handled with %+v, want request r-1, the injector's tenant, not the injector's message id", got)
	}
	if _, err := q.Enqueue(ctx, item{ID: 2}, WithHeader("Tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.request != "" || got.tenant != "acme" {
		t.Errorf("job enqueued without a request id handled with %+v, want none, tenant acme", got)
	}
	if _, err := q.Enqueue(context.WithValue(ctx, requestKey{}, "r-2"), item{ID: 3}, WithDelay(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.request != "r-2" {
		t.Errorf("delayed job handled with %+v, want request r-2", got)
	}
}

// TestContextExtractorPanicSettlesLikeHandlerPanic: a panic in the
// extractor is recovered, counted, and the message given up on.
func TestContextExtractorPanicSettlesLikeHandlerPanic(t *testing.T) {
	checkLeaks(t)
	_, _, q, cons := jobQueue(t, natsjs.ConsumerConfig{})
	called := make(chan struct{}, 1)
	errs := make(chan error, 10)
	pool := crew.New(1)
	t.Cleanup(pool.Stop)
	c := NewConsumer(cons, pool, func(context.Context, Msg[item]) error {
		called <- struct{}{}
		return nil
	}, opts(WithErrorHandler(func(err error) { errs <- err }),
		WithContextExtractor(func(context.Context, nats.Header) context.Context { panic("extractor") }))...)
	runConsumer(t, c)
	if _, err := q.Enqueue(testCtx(t), item{ID: 1}); err != nil {
		t.Fatal(err)
	}
	var pe *crew.PanicError
	if err := <-errs; !errors.As(err, &pe) {
		t.Fatalf("error handler got %v, want a PanicError", err)
	}
	waitFor(t, 5*time.Second, "the panic counted and the message terminated", func() bool {
		st := c.Stats()
		return st.Panicked == 1 && st.Terminated == 1
	})
	select {
	case <-called:
		t.Error("the handler ran although the extractor panicked")
	default:
	}
}

// requestInjector sets the Request-Id header from the requestKey value of
// ctx, and a header of the server's, which must be left out: the stream
// would refuse a message expecting another stream.
func requestInjector(ctx context.Context, h nats.Header) {
	if id, ok := ctx.Value(requestKey{}).(string); ok {
		h.Set("Request-Id", id)
		h.Set(natsjs.ExpectedStreamHeader, "NOT-JOBS")
	}
}

// TestPublisherHeaderInjectorReachesHandler adds items in contexts with
// and without a request id to a Publisher with an injector, with an id
// function and without: the consumer's messages carry the headers set at
// Add, and the Publisher keeps none once they are stored.
func TestPublisherHeaderInjectorReachesHandler(t *testing.T) {
	checkLeaks(t)
	for name, id := range map[string]func(item) string{"id function": itemID, "content hash": nil} {
		t.Run(name, func(t *testing.T) {
			checkLeaks(t)
			ts := startServer(t)
			_, js := ts.connect(t)
			createStream(t, js, "JOBS", "jobs.>")
			cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{})
			ctx := testCtx(t)
			p := NewPublisher(js, "jobs.new", id, WithHeaderInjector(requestInjector))
			const n = 6
			for i := range n {
				addCtx := ctx
				if i%2 == 0 {
					addCtx = context.WithValue(ctx, requestKey{}, "r-"+strconv.Itoa(i))
				}
				if err := p.Add(addCtx, item{ID: i}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if st := p.Stats(); st.Stored != n {
				t.Fatalf("stats %+v, want %d stored", st, n)
			}
			if left := p.headers.size(); left != 0 {
				t.Errorf("the Publisher keeps the headers of %d messages after storing them all", left)
			}

			type got struct {
				id                 int
				request, expStream string
			}
			seen := make(chan got, n)
			pool := crew.New(2)
			t.Cleanup(pool.Stop)
			runConsumer(t, NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
				seen <- got{m.Value.ID, m.Header.Get("Request-Id"), m.Header.Get(natsjs.ExpectedStreamHeader)}
				return nil
			}, fast...))
			for range n {
				g := <-seen
				want := ""
				if g.id%2 == 0 {
					want = "r-" + strconv.Itoa(g.id)
				}
				if g.request != want || g.expStream != "" {
					t.Errorf("item %d handled with Request-Id %q and %s %q, want %q and none", g.id, g.request, natsjs.ExpectedStreamHeader, g.expStream, want)
				}
			}
		})
	}
}

// TestPublisherHeadersSurviveARetriedFlush: the flushes of a batch fail
// until the stream exists; the retry that stores the message publishes
// the headers set at Add.
func TestPublisherHeadersSurviveARetriedFlush(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	ctx := testCtx(t)
	p := NewPublisher(js, "jobs.new", itemID, WithHeaderInjector(requestInjector), WithPublishTimeout(time.Second),
		WithBatch(batch.WithRetry(crew.Retry{Attempts: 100, Delay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})))
	if err := p.Add(context.WithValue(ctx, requestKey{}, "r-1"), item{ID: 1}); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(ctx) }()
	// The batcher counts a failed attempt's latency before it waits to
	// retry it.
	waitFor(t, 10*time.Second, "a flush failed", func() bool { return p.Stats().Batch.Latency.Count > 0 })
	st := createStream(t, js, "JOBS", "jobs.>")
	if err := <-flushed; err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, h := storedItem(ctx, t, st, 1); h.Get("Request-Id") != "r-1" || p.Stats().Batch.Retries == 0 {
		t.Errorf("message stored by a retried flush (%+v) has Request-Id %q, want r-1", p.Stats().Batch, h.Get("Request-Id"))
	}
}

// TestHeaderStoreLetsGoOfOldHeaders: headers never forgotten (of items
// dropped or failed for good) are let go a generation later, while those
// a flush looks up, and all of those within two generations, stay.
func TestHeaderStoreLetsGoOfOldHeaders(t *testing.T) {
	checkLeaks(t)
	pending := 0
	s := newHeaderStore(func() int { return pending })
	h := func(v string) nats.Header { return nats.Header{"K": {v}} }
	first := s.put("kept", h("first"))
	s.release("kept", s.put("kept", h("refused")))
	s.put("kept", h("third"))
	if got := s.get("kept").Get("K"); got != "first" {
		t.Errorf("headers of a thrice-added id %q, want the first's", got)
	}
	s.release("kept", first)
	if got := s.get("kept").Get("K"); got != "third" {
		t.Errorf("headers of an id whose first Add was refused %q, want those of the Add kept after it", got)
	}
	for i := range 10 * minHeaderGeneration {
		s.put("id-"+strconv.Itoa(i), h("x"))
		if s.get("kept") == nil { // a batch retried for ever
			t.Fatalf("headers looked up at every put let go after %d puts", i)
		}
	}
	if n := s.size(); n > 2*minHeaderGeneration+1 {
		t.Errorf("store holds %d headers, want at most two generations of %d", n, minHeaderGeneration)
	}
	if s.get("id-0") != nil {
		t.Error("headers never looked up nor forgotten still held ten generations later")
	}
	last := "id-" + strconv.Itoa(10*minHeaderGeneration-1)
	if s.get(last) == nil {
		t.Error("the newest headers let go")
	}
	s.forget(last)
	if s.get(last) != nil {
		t.Error("forgotten headers still held")
	}

	// With many items pending, the store keeps twice as many headers.
	pending = 3 * minHeaderGeneration
	s = newHeaderStore(func() int { return pending })
	for i := range 2 * pending {
		s.put("id-"+strconv.Itoa(i), h("x"))
	}
	if s.get("id-0") == nil {
		t.Errorf("headers let go while fewer than twice the %d items pending were added after them", pending)
	}
}

// TestPublisherAddWithoutInjectorDoesNotAllocate: the injector costs
// nothing to a Publisher without one.
func TestPublisherAddWithoutInjectorDoesNotAllocate(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	unflushed := WithBatch(batch.WithMaxItems(1<<20), batch.WithMaxWait(time.Hour), batch.WithMaxPending(1<<20, batch.Block))
	p := NewPublisher(js, "jobs.new", itemID, unflushed)
	if n := testing.AllocsPerRun(1000, func() { _ = p.Add(ctx, item{ID: 1}) }); n != 0 {
		t.Errorf("Add allocates %v times per call, want 0", n)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestPublisherDuplicateIDKeepsHeadersOfAnAcceptedAdd: two Adds of items
// with one message id call the injector; the first, which set the headers
// the Publisher keeps for the id, is refused by the full batcher after
// the second was accepted. The message of the accepted item carries the
// headers set by its own Add.
func TestPublisherDuplicateIDKeepsHeadersOfAnAcceptedAdd(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	sizing, release := make(chan struct{}), make(chan struct{})
	p := NewPublisher(js, "jobs.new", itemID, WithHeaderInjector(requestInjector), WithBatch(
		batch.WithMaxItems(10),
		batch.WithMaxWait(time.Hour), // flushed by Close only
		batch.WithMaxPending(1, batch.Fail),
		// Holds the first Add after it called the injector, before the
		// batcher decides on its item.
		batch.WithMaxBytes(1<<20, func(it item) int {
			if it.Body == "refused" {
				close(sizing)
				<-release
			}
			return 1
		}),
	))
	refused := make(chan error, 1)
	go func() {
		refused <- p.Add(context.WithValue(ctx, requestKey{}, "r-refused"), item{ID: 1, Body: "refused"})
	}()
	<-sizing
	if err := p.Add(context.WithValue(ctx, requestKey{}, "r-accepted"), item{ID: 1, Body: "accepted"}); err != nil {
		t.Fatalf("Add of the second item: %v", err)
	}
	close(release)
	if err := <-refused; !errors.Is(err, batch.ErrFull) {
		t.Fatalf("Add of the first item returned %v, want ErrFull", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got, h := storedItem(ctx, t, st, 1)
	if req := h.Get("Request-Id"); got.Body != "accepted" || req != "r-accepted" {
		t.Errorf("stored item %+v with Request-Id %q, want the accepted item with r-accepted", got, req)
	}
	if left := p.headers.size(); left != 0 {
		t.Errorf("the Publisher keeps the headers of %d messages after storing them all", left)
	}
}

// TestPublisherDuplicateIDsInOneBatch: two items with one message id,
// added with different headers, are both flushed; the stream stores one
// message, with the headers of the first Add, and drops the other.
func TestPublisherDuplicateIDsInOneBatch(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	p := NewPublisher(js, "jobs.new", itemID, WithHeaderInjector(requestInjector),
		WithBatch(batch.WithMaxItems(10), batch.WithMaxWait(time.Hour)))
	for _, req := range []string{"r-first", "r-second"} {
		if err := p.Add(context.WithValue(ctx, requestKey{}, req), item{ID: 1, Body: req}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s := p.Stats(); s.Stored != 1 || s.Duplicates != 1 || s.Batch.Flushed != 2 {
		t.Errorf("stats %+v, want 1 stored, 1 duplicate, 2 flushed", s)
	}
	if n := streamMsgs(t, st); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
	if _, h := storedItem(ctx, t, st, 1); h.Get("Request-Id") != "r-first" {
		t.Errorf("stored message has Request-Id %q, want r-first", h.Get("Request-Id"))
	}
}
