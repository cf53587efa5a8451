package jetstream_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

type requestIDKey struct{}

// A request id travels from the context of Enqueue to the context of the
// handler in a header: the Queue's HeaderInjector writes it, the
// Consumer's ContextExtractor reads it back. The package
// github.com/gocrew/crew/exporters/crewotel carries OpenTelemetry trace
// contexts the same way.
func ExampleWithHeaderInjector() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable: "mailers", FilterSubject: "jobs.email", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	var inject crewjs.HeaderInjector = func(ctx context.Context, h nats.Header) {
		if id, ok := ctx.Value(requestIDKey{}).(string); ok {
			h.Set("Request-Id", id)
		}
	}
	var extract crewjs.ContextExtractor = func(ctx context.Context, h nats.Header) context.Context {
		if id := h.Get("Request-Id"); id != "" {
			return context.WithValue(ctx, requestIDKey{}, id)
		}
		return ctx
	}

	q := crewjs.NewQueue[Email](js, "jobs.email", crewjs.WithHeaderInjector(inject))
	if _, err := q.Enqueue(context.WithValue(ctx, requestIDKey{}, "req-7"), Email{To: "ann@example.com"}); err != nil {
		log.Fatal(err)
	}

	pool := crew.New(4)
	defer pool.Stop()
	done := make(chan string)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Email]) error {
		done <- m.Value.To + " " + ctx.Value(requestIDKey{}).(string)
		return nil
	}, crewjs.WithContextExtractor(extract))
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- c.Run(runCtx) }()
	fmt.Println(<-done)
	stopRun()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// ann@example.com req-7
}

// The same injector on a Publisher: each item's message carries the
// headers set from the context of the Add that queued it, through the
// batches it is flushed in.
func ExampleWithHeaderInjector_publisher() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable: "mailers", FilterSubject: "jobs.email", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	inject := func(ctx context.Context, h nats.Header) {
		if id, ok := ctx.Value(requestIDKey{}).(string); ok {
			h.Set("Request-Id", id)
		}
	}
	p := crewjs.NewPublisher(js, "jobs.email", func(e Email) string { return e.To }, crewjs.WithHeaderInjector(inject))
	for i, to := range []string{"ann@example.com", "bob@example.com"} {
		if err := p.Add(context.WithValue(ctx, requestIDKey{}, fmt.Sprint("req-", i)), Email{To: to}); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil { // flushes both in one batch
		log.Fatal(err)
	}

	pool := crew.New(1)
	defer pool.Stop()
	done := make(chan string)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Email]) error {
		done <- m.Value.To + " " + m.Header.Get("Request-Id")
		return nil
	})
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- c.Run(runCtx) }()
	fmt.Println(<-done)
	fmt.Println(<-done)
	stopRun()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// ann@example.com req-0
	// bob@example.com req-1
}
