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
