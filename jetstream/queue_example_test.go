package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// An Email is the job of the Queue examples.
type Email struct {
	To string `json:"to"`
}

// jobServer starts a nats-server with JetStream on a random loopback port,
// storing in a temporary directory, connects to it and creates the stream
// JOBS of jobs.>, which allows message schedules and TTLs: it holds the
// jobs and their schedules. stop closes the connection, shuts the server
// down and removes the directory.
func jobServer(ctx context.Context) (js jetstream.JetStream, stop func()) {
	dir, err := os.MkdirTemp("", "crewjs-example-")
	if err != nil {
		log.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		log.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	if js, err = jetstream.New(nc); err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JOBS", Subjects: []string{"jobs.>"}, AllowMsgSchedules: true, AllowMsgTTL: true,
	}); err != nil {
		log.Fatal(err)
	}
	return js, func() { nc.Close(); s.Shutdown(); s.WaitForShutdown(); os.RemoveAll(dir) }
}

// A job queue: a Queue that enqueues jobs to a stream that allows message
// schedules and TTLs, and a Consumer that runs them on a pool. The delayed
// job runs after the one enqueued after it; the second job with the same
// unique id is not stored.
func ExampleQueue_Enqueue() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()

	// The consumer takes the jobs (jobs.email), not their schedules
	// (jobs.email.schedule.*), which the stream holds too.
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable: "mailers", FilterSubject: "jobs.email", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	q := crewjs.NewQueue[Email](js, "jobs.email")
	if _, err := q.Enqueue(ctx, Email{To: "later@example.com"}, crewjs.WithDelay(500*time.Millisecond)); err != nil {
		log.Fatal(err)
	}
	seq, err := q.Enqueue(ctx, Email{To: "ann@example.com"}, crewjs.WithUniqueID("welcome-ann"), crewjs.WithHeader("Tenant", "acme"))
	if err != nil {
		log.Fatal(err)
	}
	again, err := q.Enqueue(ctx, Email{To: "ann@example.com"}, crewjs.WithUniqueID("welcome-ann"))
	fmt.Println(errors.Is(err, crewjs.ErrDuplicate), again == seq)

	pool := crew.New(4)
	defer pool.Stop()
	done := make(chan string)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Email]) error {
		done <- m.Value.To + " " + m.Header.Get("Tenant")
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
	// true true
	// ann@example.com acme
	// later@example.com
}

// A handler snoozes a job whose resource is busy: with WithSnooze, the job
// comes back later as a new delivery, and the snooze is not an attempt.
func ExampleSnooze() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable: "mailers", FilterSubject: "jobs.email", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := crewjs.NewQueue[Email](js, "jobs.email").Enqueue(ctx, Email{To: "bob@example.com"}); err != nil {
		log.Fatal(err)
	}

	pool := crew.New(1)
	defer pool.Stop()
	done := make(chan struct{})
	var calls atomic.Int32
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Email]) error {
		n := calls.Add(1)
		fmt.Println("call", n, "attempt", m.Attempt())
		if n < 3 {
			return crewjs.Snooze(300 * time.Millisecond) // the mail server is busy
		}
		close(done)
		return nil
	}, crewjs.WithSnooze(js))
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- c.Run(runCtx) }()
	<-done
	stopRun()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	fmt.Println("snoozed", c.Stats().Snoozed)
	// Output:
	// call 1 attempt 1
	// call 2 attempt 1
	// call 3 attempt 1
	// snoozed 2
}

// A periodic job: the server enqueues a report every day at 06:00 UTC
// until it is unscheduled. Every process may call Schedule at start: the
// schedule named "daily-report" is replaced, not added.
func ExampleQueue_Schedule() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()
	q := crewjs.NewQueue[Email](js, "jobs.report")
	for range 2 {
		if _, err := q.Schedule(ctx, "daily-report", "0 0 6 * * *", Email{To: "boss@example.com"}); err != nil {
			log.Fatal(err)
		}
	}
	_, err := q.Schedule(ctx, "bad", "@every 10ms", Email{})
	fmt.Println(errors.Is(err, crew.ErrInvalid))
	if err := q.Unschedule(ctx, "daily-report"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("unscheduled")
	// Output:
	// true
	// unscheduled
}
