package crewotel

import (
	"context"
	"fmt"
	"strings"

	"github.com/gocrew/crew"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// A HeaderCarrier lets an OpenTelemetry [propagation.TextMapPropagator]
// read and write the headers of a NATS message. NATS headers are case
// sensitive: Set stores key as given, and Get finds key as given or,
// failing that, in another case (Traceparent for traceparent), so that
// headers written by a carrier that changed the case are still read.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key, or "" if c has none: the value of
// key as given if present, or else of the first key that differs from it
// only in case, in sorted order.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	found := ""
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) && (found == "" || k < found) {
			found = k
		}
	}
	if found == "" {
		return ""
	}
	return c[found][0]
}

// Set sets key to the single value value, replacing its values. On a nil
// HeaderCarrier it does nothing.
func (c HeaderCarrier) Set(key, value string) {
	if c != nil {
		c[key] = []string{value}
	}
}

// Keys returns the keys of c, in no particular order.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// traceContext is the W3C Trace Context propagator.
var traceContext propagation.TraceContext

// InjectTrace writes the span context of ctx into h as W3C Trace Context
// headers, traceparent and tracestate, replacing any there; it writes
// nothing if ctx is nil or carries no valid span context, or if h is nil.
// It is a [jetstream.HeaderInjector]: give it to
// [jetstream.WithHeaderInjector] for every job enqueued to carry the trace
// of its Enqueue call, and every item published by a Publisher the trace
// of its Add call.
func InjectTrace(ctx context.Context, h nats.Header) {
	traceContext.Inject(ctx, HeaderCarrier(h))
}

// ExtractTrace returns ctx with the remote span context that the W3C
// Trace Context headers of h (traceparent, tracestate) carry, which
// [trace.SpanContextFromContext] returns and the spans started from it
// take as their parent; it returns ctx itself if h has no valid
// traceparent. It is a [jetstream.ContextExtractor]: give it to
// [jetstream.WithContextExtractor] for every handler to run in the trace
// of the job's Enqueue call ([InjectTrace]); a [jetstream.Consumer] never
// passes a nil ctx.
//
// Like [context.WithValue] given a nil parent, ExtractTrace panics if ctx
// is nil, whatever h holds, with an error wrapping [crew.ErrInvalid]: it
// has no context to return.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if ctx == nil {
		panic(fmt.Errorf("%w: crewotel.ExtractTrace: nil context", crew.ErrInvalid))
	}
	return traceContext.Extract(ctx, HeaderCarrier(h))
}
