package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// deadLetterServer starts a server as jobServer does, with a stream DLQ of
// dead.> for the dead letters, and a consumer whose handler fails with a
// permanent error until fixed is set: the job of Email{To: to} enqueued
// to jobs.email is dead-lettered to dead.email. It returns once that job
// is; the handler sends to ran the address of each job it runs. stop stops the consumer and the server.
func deadLetterServer(ctx context.Context, to string, fixed *atomic.Bool, ran chan<- string) (js jetstream.JetStream, stop func()) {
	js, stopServer := jobServer(ctx)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dead.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "JOBS", jetstream.ConsumerConfig{
		Durable: "mailers", FilterSubject: "jobs.email", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}
	pool := crew.New(4)
	given := make(chan struct{}, 1)
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Email]) error {
		if !fixed.Load() {
			return crewjs.Permanent(errors.New("no such mailbox"))
		}
		ran <- m.Value.To
		return nil
	}, crewjs.WithDeadLetter(js, "dead.email"), crewjs.WithErrorHandler(func(err error) {
		if me := (*crewjs.MessageError)(nil); errors.As(err, &me) && me.DeadLettered {
			select {
			case given <- struct{}{}:
			default:
			}
		}
	}))
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- c.Run(runCtx) }()
	if _, err := crewjs.NewQueue[Email](js, "jobs.email").Enqueue(ctx, Email{To: to}); err != nil {
		log.Fatal(err)
	}
	<-given
	return js, func() {
		stopRun()
		if err := <-done; err != nil {
			log.Fatal(err)
		}
		pool.Stop()
		stopServer()
	}
}

// A job that fails for good is dead-lettered. DeadLetters lists it with
// why it failed, and, once the cause is fixed, replays it to its subject,
// where the consumer runs it again; the dead letter is gone.
func ExampleDeadLetters() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fixed atomic.Bool
	ran := make(chan string, 1)
	js, stop := deadLetterServer(ctx, "ann@example.com", &fixed, ran)
	defer stop()

	dead := crewjs.NewDeadLetters(js, "dead.email")
	for dl, err := range dead.List(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		var e Email
		if err := dl.Decode(crewjs.JSON{}, &e); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d: %s/%d %s %s: %s\n", dl.Seq, dl.Stream, dl.OriginalSeq, dl.Subject, e.To, dl.Error)
	}

	fixed.Store(true)
	seq, err := dead.Replay(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replayed as JOBS", seq, "and ran for", <-ran)
	_, err = dead.Get(ctx, 1)
	fmt.Println(errors.Is(err, jetstream.ErrMsgNotFound))
	// Output:
	// 1: JOBS/1 jobs.email ann@example.com: permanent: no such mailbox
	// replayed as JOBS 2 and ran for ann@example.com
	// true
}

// Delete drops a dead letter that is not to be replayed.
func ExampleDeadLetters_Delete() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fixed atomic.Bool
	js, stop := deadLetterServer(ctx, "nobody@example.com", &fixed, make(chan string, 1))
	defer stop()

	dead := crewjs.NewDeadLetters(js, "dead.>") // all the dead letters of the stream
	dl, err := dead.Get(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dl.Subject, dl.Delivery)
	if err := dead.Delete(ctx, dl.Seq); err != nil {
		log.Fatal(err)
	}
	n := 0
	for _, err := range dead.List(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		n++
	}
	fmt.Println(n, "dead letters left")
	// Output:
	// jobs.email 1
	// 0 dead letters left
}
