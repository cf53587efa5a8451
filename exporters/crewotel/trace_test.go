package crewotel_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewotel"
	crewjs "github.com/gocrew/crew/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
)

// sampled is a span context of a trace, as an upstream service would
// hand it on.
var sampled = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
})

const sampledParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestHeaderCarrier(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := nats.Header{}
	c := crewotel.HeaderCarrier(h)
	c.Set("traceparent", "a")
	if h.Get("traceparent") != "a" || len(h) != 1 {
		t.Errorf("Set stored %v, want traceparent: a as given", h)
	}
	if got := c.Get("traceparent"); got != "a" {
		t.Errorf("Get(traceparent) = %q", got)
	}
	other := crewotel.HeaderCarrier(nats.Header{"Traceparent": {"b"}, "TRACEPARENT": {"c"}})
	if got := other.Get("traceparent"); got != "c" { // "TRACEPARENT" < "Traceparent"
		t.Errorf("Get in another case = %q, want the first key in sorted order, c", got)
	}
	if got := crewotel.HeaderCarrier(nil).Get("traceparent"); got != "" {
		t.Errorf("Get on nil = %q", got)
	}
	crewotel.HeaderCarrier(nil).Set("k", "v") // no panic
	if keys := other.Keys(); len(keys) != 2 {
		t.Errorf("Keys = %v", keys)
	}
}

func TestInjectExtractTrace(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := trace.ContextWithSpanContext(context.Background(), sampled)
	h := nats.Header{"Tenant": {"acme"}}
	crewotel.InjectTrace(ctx, h)
	if got := h.Get("traceparent"); got != sampledParent {
		t.Errorf("traceparent = %q, want %q", got, sampledParent)
	}
	got := trace.SpanContextFromContext(crewotel.ExtractTrace(context.Background(), h))
	if !got.IsRemote() || got.TraceID() != sampled.TraceID() || got.SpanID() != sampled.SpanID() || !got.IsSampled() {
		t.Errorf("extracted %+v, want the remote %+v", got, sampled)
	}

	empty := nats.Header{}
	crewotel.InjectTrace(context.Background(), empty)
	crewotel.InjectTrace(ctx, nil) // no panic
	var nilCtx context.Context
	crewotel.InjectTrace(nilCtx, empty) // no span context: nothing to write
	if len(empty) != 0 {
		t.Errorf("a context without a span wrote %v", empty)
	}
	type key struct{}
	plain := context.WithValue(context.Background(), key{}, 1)
	if ExtractTraceOf(plain, nats.Header{"traceparent": {"garbage"}}) != plain || ExtractTraceOf(plain, nil) != plain {
		t.Error("ExtractTrace without a valid traceparent did not return ctx itself")
	}
}

// ExtractTrace has no context to build on from a nil ctx: it panics with
// an error wrapping crew.ErrInvalid, whatever the headers hold, so that
// the mistake shows on the first call and not only once a message with a
// valid traceparent arrives.
func TestExtractTraceNilContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, h := range []nats.Header{
		{"traceparent": {sampledParent}},
		{"traceparent": {"garbage"}},
		{},
		nil,
	} {
		var nilCtx context.Context
		err, panicked := panicOf(func() { crewotel.ExtractTrace(nilCtx, h) })
		if !panicked || !errors.Is(err, crew.ErrInvalid) || !strings.Contains(err.Error(), "crewotel.ExtractTrace") {
			t.Errorf("ExtractTrace(nil, %v) panicked %v with %v, want a panic with an error wrapping crew.ErrInvalid that names crewotel.ExtractTrace", h, panicked, err)
		}
	}
}

// ExtractTraceOf is crewotel.ExtractTrace, named for the comparison.
func ExtractTraceOf(ctx context.Context, h nats.Header) context.Context {
	return crewotel.ExtractTrace(ctx, h)
}

// traceServer starts a NATS server with JetStream, stopped when the test
// ends, and returns a JetStream with the stream JOBS of jobs.> and its
// consumer w of jobs.email, and a context bounding the test.
func traceServer(t *testing.T) (context.Context, natsjs.JetStream, natsjs.Consumer) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", natsjs.ConsumerConfig{
		Durable: "w", FilterSubject: "jobs.email", AckPolicy: natsjs.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, cons
}

// traceSeen runs a Consumer of cons with crewotel.ExtractTrace until the
// test ends, and returns the span contexts its handler's contexts carry.
func traceSeen(t *testing.T, ctx context.Context, cons natsjs.Consumer) <-chan trace.SpanContext {
	pool := crew.New(1)
	seen := make(chan trace.SpanContext)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[int]) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	}, crewjs.WithContextExtractor(crewotel.ExtractTrace))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Error(err)
		}
		pool.Stop()
	})
	return seen
}

// TestTraceThroughQueue enqueues a job in a trace and one in none, and
// checks what the handler's context carries.
func TestTraceThroughQueue(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the other cleanups
	ctx, js, cons := traceServer(t)
	q := crewjs.NewQueue[int](js, "jobs.email", crewjs.WithHeaderInjector(crewotel.InjectTrace))
	seen := traceSeen(t, ctx, cons)

	if _, err := q.Enqueue(trace.ContextWithSpanContext(ctx, sampled), 1); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.TraceID() != sampled.TraceID() || got.SpanID() != sampled.SpanID() || !got.IsRemote() {
		t.Errorf("handler of a traced job saw %+v, want the remote %+v", got, sampled)
	}
	if _, err := q.Enqueue(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.IsValid() {
		t.Errorf("handler of an untraced job saw span context %+v, want none", got)
	}
}

// TestTraceThroughPublisher adds an item in a trace and one in none to a
// Publisher, which flushes them in one batch, and checks what the
// handler's context carries for each.
func TestTraceThroughPublisher(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the other cleanups
	ctx, js, cons := traceServer(t)
	p := crewjs.NewPublisher(js, "jobs.email", strconv.Itoa, crewjs.WithHeaderInjector(crewotel.InjectTrace))
	if err := p.Add(trace.ContextWithSpanContext(ctx, sampled), 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	seen := traceSeen(t, ctx, cons)
	if got := <-seen; got.TraceID() != sampled.TraceID() || got.SpanID() != sampled.SpanID() || !got.IsRemote() {
		t.Errorf("handler of an item added in a trace saw %+v, want the remote %+v", got, sampled)
	}
	if got := <-seen; got.IsValid() {
		t.Errorf("handler of an item added in no trace saw span context %+v, want none", got)
	}
}
