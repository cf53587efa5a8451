package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// The examples in this file run an embedded NATS server with JetStream.

// A Payment is the payload of these examples' messages.
type Payment struct {
	ID       int    `json:"id"`
	Account  string `json:"account"`
	Priority int    `json:"priority"`
}

// embedded starts a NATS server with JetStream on a random loopback port,
// creates the PAYMENTS stream and its durable pull consumer "workers",
// publishes payments and returns the consumer and a function that stops
// the server.
func embedded(payments ...Payment) (jetstream.Consumer, func()) {
	dir, err := os.MkdirTemp("", "crewjs-example")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	stop := func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "PAYMENTS", jetstream.ConsumerConfig{
		Durable:   "workers",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range payments {
		data, _ := crewjs.JSON{}.Marshal(p)
		if _, err := js.Publish(ctx, "payments.new", data); err != nil {
			log.Fatal(err)
		}
	}
	return cons, stop
}

// runUntil runs c until done is closed, then stops it.
func runUntil[T any](c *crewjs.Consumer[T], done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// The payments of one account are handled one at a time, in the order
// they were published, while different accounts' run at once on the
// pool's workers.
func ExampleWithKeyed() {
	var payments []Payment
	for i := range 9 {
		payments = append(payments, Payment{ID: i, Account: []string{"alice", "bob", "carol"}[i%3]})
	}
	cons, stop := embedded(payments...)
	defer stop()

	pool := crew.New(4)
	defer pool.Stop()
	byAccount := crew.NewKeyed[string](pool)

	var mu sync.Mutex
	handled := map[string][]int{}
	done := make(chan struct{})
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Payment]) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.Value.Account] = append(handled[m.Value.Account], m.Value.ID)
		if len(handled["alice"])+len(handled["bob"])+len(handled["carol"]) == len(payments) {
			close(done)
		}
		return nil
	},
		crewjs.WithKeyed(byAccount, func(m crewjs.Msg[Payment]) string { return m.Value.Account }),
		crewjs.WithMaxInFlight(8), // read ahead past a busy account
	)
	runUntil(c, done)

	for _, account := range []string{"alice", "bob", "carol"} {
		fmt.Println(account, handled[account])
	}
	// Output:
	// alice [0 3 6]
	// bob [1 4 7]
	// carol [2 5 8]
}

// The payments the consumer holds start highest priority first. Here one
// worker, paused until the Priority holds every payment, makes the order
// the Priority's alone; in general the consumer reads WithMaxInFlight
// messages ahead for the Priority to choose from.
func ExampleWithPriority() {
	payments := []Payment{{ID: 1, Priority: 0}, {ID: 2, Priority: 5}, {ID: 3, Priority: 1}, {ID: 4, Priority: 5}, {ID: 5, Priority: 9}}
	cons, stop := embedded(payments...)
	defer stop()

	pool := crew.New(1)
	defer pool.Stop()
	pool.Pause()
	urgentFirst := crew.NewPriority(pool, crew.WithAging(0))

	var mu sync.Mutex
	var order []int
	done := make(chan struct{})
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Payment]) error {
		mu.Lock()
		defer mu.Unlock()
		if order = append(order, m.Value.ID); len(order) == len(payments) {
			close(done)
		}
		return nil
	},
		crewjs.WithPriority(urgentFirst, func(m crewjs.Msg[Payment]) int { return m.Value.Priority }),
		crewjs.WithMaxInFlight(len(payments)),
	)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for urgentFirst.Stats().Unfinished < len(payments) {
			<-tick.C
		}
		pool.Resume()
	}()
	runUntil(c, done)

	fmt.Println("handled:", order)
	// Output:
	// handled: [5 2 4 3 1]
}

// A RateLimited executor starts the consumed messages at its rate, here
// one every 10ms, on its pool's workers. The consumer holds at most
// WithMaxInFlight of them: set it for a RateLimited, whose rate, not a
// worker count, bounds what it starts.
func ExampleNewConsumer_rateLimited() {
	payments := make([]Payment, 6)
	for i := range payments {
		payments[i].ID = i
	}
	cons, stop := embedded(payments...)
	defer stop()

	pool := crew.New(4)
	defer pool.Stop()
	limited := crew.NewRateLimited(pool, crew.Rate{Limit: 1, Per: 10 * time.Millisecond})

	var mu sync.Mutex
	var starts []time.Time
	var ids []int
	done := make(chan struct{})
	c := crewjs.NewConsumer(cons, limited, func(ctx context.Context, m crewjs.Msg[Payment]) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if ids = append(ids, m.Value.ID); len(ids) == len(payments) {
			close(done)
		}
		return nil
	}, crewjs.WithMaxInFlight(4))
	begin := time.Now()
	runUntil(c, done)

	slices.Sort(ids)
	fmt.Println("handled:", ids)
	// The first token is taken after begin, the sixth 50ms after it.
	fmt.Println("at most one start per 10ms:", slices.MaxFunc(starts, time.Time.Compare).Sub(begin) >= 45*time.Millisecond)
	// Output:
	// handled: [0 1 2 3 4 5]
	// at most one start per 10ms: true
}

// A handler that hangs, ignoring its context, is abandoned a job timeout
// after its context was cancelled: its payment is handed back and paid on
// the next delivery, and the error handler learns of the stuck job. The
// hung handler keeps its worker until it returns; this one is let go when
// the example ends.
func ExampleWithJobTimeout() {
	cons, stop := embedded(Payment{ID: 1, Account: "alice"})
	defer stop()
	hung := make(chan struct{})
	pool := crew.New(2)
	defer pool.Stop()
	defer close(hung) // lets the hung handler return before the pool stops

	stuck := make(chan string, 1)
	paid := make(chan string, 1)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Payment]) error {
		if m.Delivery() == 1 {
			<-hung // a call that ignores ctx
			return nil
		}
		paid <- fmt.Sprintf("payment %d paid on delivery %d", m.Value.ID, m.Delivery())
		return nil
	},
		crewjs.WithJobTimeout(50*time.Millisecond),
		crewjs.WithBackoff(crewjs.ExponentialBackoff(10*time.Millisecond, time.Second)),
		crewjs.WithErrorHandler(func(err error) {
			var me *crewjs.MessageError
			if errors.As(err, &me) && errors.Is(err, crewjs.ErrJobStuck) {
				stuck <- fmt.Sprintf("delivery %d stuck, handed back: %t", me.Delivery, me.HandedBack)
			}
		}))
	done := make(chan struct{})
	go func() {
		fmt.Println(<-stuck)
		fmt.Println(<-paid)
		close(done)
	}()
	runUntil(c, done)
	fmt.Println("abandoned:", c.Stats().Abandoned)
	// Output:
	// delivery 1 stuck, handed back: true
	// payment 1 paid on delivery 2
	// abandoned: 1
}
