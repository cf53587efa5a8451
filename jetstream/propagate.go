package jetstream

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
)

// A HeaderInjector adds to h, the headers of a job being enqueued, what
// ctx, the context of the [Queue.Enqueue] call, carries across processes:
// a trace context, for example. See [WithHeaderInjector].
type HeaderInjector func(ctx context.Context, h nats.Header)

// A ContextExtractor returns the context a [Handler] runs with, made from
// ctx, the context the [Consumer] gives it, and h, the message's headers:
// ctx with the trace context that h carries, for example. See
// [WithContextExtractor].
type ContextExtractor func(ctx context.Context, h nats.Header) context.Context

type injectorOption struct{ f HeaderInjector }

func (o injectorOption) applyQueue(s *queueSettings) error {
	if o.f == nil {
		return invalid("WithHeaderInjector(nil)")
	}
	s.inject = o.f
	return nil
}

// WithHeaderInjector makes [Queue.Enqueue] call f with its ctx and a
// header of its own before it publishes the job, and add what f set there
// to the job's headers, replacing those of the same keys that
// [WithHeader] set; keys starting with Nats-, the server's, are left out.
// f runs in the goroutine of Enqueue, once per call, and must not keep h.
// [Queue.Schedule] does not call f: a periodic job outlives the call that
// made it. With a [WithContextExtractor] on the [Consumer], the handler's
// context carries what the Enqueue context did; the package
// github.com/gocrew/crew/exporters/crewotel has such a pair for
// OpenTelemetry trace contexts. f must not be nil.
func WithHeaderInjector(f HeaderInjector) QueueOption { return injectorOption{f} }

// WithContextExtractor makes the [Consumer] call f with the handler's
// context and the message's headers, just before the handler runs on the
// executor, and run the handler with the context f returns, which must be
// ctx or a context made from it (a nil one stands for ctx): the Consumer
// cancels ctx, not what f returns, when it stops. A panic in f is
// recovered and settles the message like a panic of the handler. f is not
// called for messages that are not handed to the handler (ones that could
// not be decoded, schedules). See [WithHeaderInjector]. f must not be nil.
func WithContextExtractor(f ContextExtractor) ConsumerOption {
	return consumerOption(checked(f != nil, func(s *consumerSettings) { s.extract = f }, "WithContextExtractor(nil)"))
}

// inject calls f with ctx and a header of its own, and copies what f set
// there to h, but for the server's headers (Nats-).
func inject(f HeaderInjector, ctx context.Context, h nats.Header) {
	set := nats.Header{}
	f(ctx, set)
	for k, v := range set {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			h[k] = append([]string(nil), v...)
		}
	}
}

// handlerContext returns the context the handler runs with, given ctx,
// the one the Consumer made, and the message's headers h.
func (s *consumerSettings) handlerContext(ctx context.Context, h nats.Header) context.Context {
	if s.extract == nil {
		return ctx
	}
	if hctx := s.extract(ctx, h); hctx != nil {
		return hctx
	}
	return ctx
}
