package crewotel_test

import (
	"context"
	"fmt"

	"github.com/gocrew/crew/exporters/crewotel"
	crewjs "github.com/gocrew/crew/jetstream"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InjectTrace writes the span context of the Enqueue call into the job's
// headers; give it to a Queue with WithHeaderInjector. Here it is called
// directly on a header.
func ExampleInjectTrace() {
	ctx := trace.ContextWithSpanContext(context.Background(), sampled) // a span of the caller's trace
	h := nats.Header{}
	crewotel.InjectTrace(ctx, h)
	fmt.Println(h.Get("traceparent"))

	// On a Queue or a Publisher:
	_ = crewjs.WithHeaderInjector(crewotel.InjectTrace)
	// Output: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
}

// ExtractTrace gives the handler's context the remote span context of the
// job's headers; give it to a Consumer with WithContextExtractor, and
// start the handler's spans from the context the handler receives.
func ExampleExtractTrace() {
	h := nats.Header{"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	sc := trace.SpanContextFromContext(crewotel.ExtractTrace(context.Background(), h))
	fmt.Println(sc.TraceID(), sc.IsRemote())

	// On a Consumer:
	_ = crewjs.WithContextExtractor(crewotel.ExtractTrace)
	// Output: 4bf92f3577b34da6a3ce929d0e0e4736 true
}

// A HeaderCarrier lets any OpenTelemetry propagator, here W3C baggage,
// write and read NATS headers.
func ExampleHeaderCarrier() {
	h := nats.Header{"Baggage": {"tenant=acme"}} // written by a carrier that changed the case
	var p propagation.Baggage
	ctx := p.Extract(context.Background(), crewotel.HeaderCarrier(h))
	fmt.Println(baggage.FromContext(ctx).Member("tenant").Value())
	// Output: acme
}
