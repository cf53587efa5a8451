package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	crewjs "github.com/gocrew/crew/jetstream"
)

// The examples below that talk to a NATS server have no output: go test
// compiles them but does not run them. Run them against a server with
// JetStream enabled (nats-server -js) listening on nats.DefaultURL.

// An Order is the payload of the examples' messages.
type Order struct {
	ID   int    `json:"id"`
	Item string `json:"item"`
}

// ship stands for the work a handler does with an order.
func ship(ctx context.Context, o Order) error { return ctx.Err() }

// A Consumer of a durable pull consumer, with its stream, feeding a pool of
// 16 workers.
func ExampleNewConsumer() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     "ORDERS",
		Subjects: []string{"orders.>"},
	}); err != nil {
		log.Fatal(err)
	}
	// A durable pull consumer with the explicit ack policy, which every
	// worker process shares.
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable:       "workers",
		FilterSubject: "orders.new",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    5,
	})
	if err != nil {
		log.Fatal(err)
	}

	// A direct hand-off pool: the Consumer fetches only what its workers
	// can start.
	pool := crew.New(16, crew.WithQueueSize(0), crew.WithName("orders"))
	defer pool.Stop()

	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Order]) error {
		// m.Value is the decoded Order; nil acknowledges the message, an
		// error hands it back for redelivery after a backoff.
		return ship(ctx, m.Value)
	})

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Run processes messages until its context is cancelled, here by SIGINT or
// SIGTERM, and then drains: it waits for the messages in flight, up to the
// drain timeout, and hands back the unfinished ones.
func ExampleConsumer_Run() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(context.Background(), "ORDERS", "workers")
	if err != nil {
		log.Fatal(err)
	}
	pool := crew.New(16, crew.WithQueueSize(0))
	defer pool.Stop()
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Order]) error {
		return ship(ctx, m.Value)
	}, crewjs.WithDrainTimeout(20*time.Second))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch err := c.Run(ctx); {
	case err == nil:
		// Cancelled, and every message in flight was settled.
	case errors.Is(err, crewjs.ErrDrainTimeout):
		// The unfinished messages were handed back for redelivery.
		log.Print(err)
	default:
		// The consumer was deleted, the connection closed, or the pool
		// stopped.
		log.Fatal(err)
	}
	s := c.Stats()
	fmt.Printf("%d acknowledged, %d handed back, %d given up\n", s.Acked, s.Nacked, s.Terminated)
}

// Messages the Consumer gives up on are published to a dead-letter subject,
// then terminated, and reported to the error handler as a
// [crewjs.MessageError].
func ExampleWithDeadLetter() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The dead-letter subject must belong to a stream: a message whose dead
	// letter cannot be stored is handed back for redelivery instead (except
	// on its last delivery).
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     "ORDERS_DEAD",
		Subjects: []string{"dead.orders"},
	}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "ORDERS", "workers")
	if err != nil {
		log.Fatal(err)
	}
	pool := crew.New(16, crew.WithQueueSize(0))
	defer pool.Stop()

	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Order]) error {
		if m.Value.Item == "" {
			return crewjs.Permanent(fmt.Errorf("order %d has no item", m.Value.ID))
		}
		return ship(ctx, m.Value)
	},
		crewjs.WithDeadLetter(js, "dead.orders"),
		crewjs.WithErrorHandler(func(err error) {
			var me *crewjs.MessageError
			if errors.As(err, &me) {
				log.Printf("gave up on %s/%d (dead-lettered: %t): %v", me.Stream, me.Sequence, me.DeadLettered, me.Err)
				return
			}
			log.Print(err) // a failed pull or acknowledgement
		}),
	)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A handler returns a Permanent error for a message that no redelivery can
// fix: the message is given up on at once.
func ExamplePermanent() {
	var handler crewjs.Handler[Order] = func(ctx context.Context, m crewjs.Msg[Order]) error {
		if m.Value.Item == "" {
			return crewjs.Permanent(fmt.Errorf("order %d has no item", m.Value.ID))
		}
		return ship(ctx, m.Value)
	}

	err := handler(context.Background(), crewjs.Msg[Order]{Value: Order{ID: 7}})
	fmt.Println(err)
	fmt.Println(crewjs.IsPermanent(err))
	// Output:
	// permanent: order 7 has no item
	// true
}

// The delay before the n-th redelivery doubles from base up to max, and is
// drawn at random from the upper half of that.
func ExampleExponentialBackoff() {
	backoff := crewjs.ExponentialBackoff(time.Second, 10*time.Second)
	_ = crewjs.WithBackoff(backoff) // the ConsumerOption to pass to NewConsumer

	for delivery := 1; delivery <= 6; delivery++ {
		d := backoff(delivery)
		upper := min(time.Second<<(delivery-1), 10*time.Second)
		fmt.Printf("delivery %d: from %v to %v: %t\n", delivery, upper/2, upper, upper/2 <= d && d <= upper)
	}
	// Output:
	// delivery 1: from 500ms to 1s: true
	// delivery 2: from 1s to 2s: true
	// delivery 3: from 2s to 4s: true
	// delivery 4: from 4s to 8s: true
	// delivery 5: from 5s to 10s: true
	// delivery 6: from 5s to 10s: true
}

// A Consumer of raw payloads: with the Bytes codec, a handler receives each
// message body as it is.
func ExampleWithCodec() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(context.Background(), "EVENTS", "archiver")
	if err != nil {
		log.Fatal(err)
	}
	pool := crew.New(8)
	defer pool.Stop()

	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[[]byte]) error {
		fmt.Printf("%s: %d bytes\n", m.Subject, len(m.Value))
		return nil
	}, crewjs.WithCodec(crewjs.Bytes{}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// The Bytes codec passes []byte and string payloads through.
func ExampleBytes() {
	var codec crewjs.Codec = crewjs.Bytes{}
	data, _ := codec.Marshal("hello")
	var s string
	_ = codec.Unmarshal(data, &s)
	fmt.Println(s)
	_, err := codec.Marshal(42)
	fmt.Println(errors.Is(err, crew.ErrInvalid))
	// Output:
	// hello
	// true
}

// A Publisher of orders to a stream, with a message id per order, so that a
// retried flush does not store an order twice.
func ExampleNewPublisher() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// The stream drops a message whose id it stored within Duplicates.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       "ORDERS",
		Subjects:   []string{"orders.>"},
		Duplicates: 5 * time.Minute,
	}); err != nil {
		log.Fatal(err)
	}

	p := crewjs.NewPublisher(js, "orders.new",
		func(o Order) string { return "order-" + strconv.Itoa(o.ID) },
		crewjs.WithBatch(
			batch.WithMaxItems(100),
			batch.WithMaxWait(10*time.Millisecond),
			batch.WithErrorHandler(func(ctx context.Context, items []Order, err error) {
				log.Printf("%d orders not published: %v", len(items), err)
			}),
		),
		crewjs.WithPublishTimeout(10*time.Second),
	)
	for i := range 1000 {
		if err := p.Add(ctx, Order{ID: i, Item: "book"}); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	s := p.Stats()
	fmt.Printf("%d stored, %d duplicates dropped\n", s.Stored, s.Duplicates)
}

// Add returns once the item is queued; the batcher publishes it with the
// others of its batch. Flush waits for what was added so far, and Close
// publishes the rest and stops the Publisher.
func ExamplePublisher_Add() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// Without an id function, the message id is a hash of the subject and
	// the encoded item.
	p := crewjs.NewPublisher[Order](js, "orders.new", nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, o := range []Order{{ID: 1, Item: "book"}, {ID: 2, Item: "pen"}} {
		if err := p.Add(ctx, o); err != nil {
			log.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		log.Print(err) // a batch failed its last attempt, or ctx ended
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
}
