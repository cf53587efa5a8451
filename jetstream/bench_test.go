package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
)

// BenchmarkThroughput measures messages per second through one and two
// consumer processes (each with its own connection and a pool of 32
// workers) sharing a durable consumer of an embedded server, with tasks
// that take no time and tasks that wait 1ms (as for I/O). The b.N messages
// are published before the timer starts. Run it with a fixed count, for
// example -benchtime=10000x.
func BenchmarkThroughput(b *testing.B) {
	for _, work := range []time.Duration{0, time.Millisecond} {
		for _, consumers := range []int{1, 2} {
			b.Run(fmt.Sprintf("work=%v/consumers=%d", work, consumers), func(b *testing.B) {
				benchmarkThroughput(b, consumers, work)
			})
		}
	}
}

func benchmarkThroughput(b *testing.B, consumers int, work time.Duration) {
	ts := startServer(b)
	_, js := ts.connect(b)
	createStream(b, js, "JOBS", "jobs.>")
	createDurable(b, js, "JOBS", "workers", natsjs.ConsumerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := NewPublisher(js, "jobs.new", itemID, WithBatch(batch.WithMaxItems(500)))
	for i := range b.N {
		if err := p.Add(ctx, item{ID: i}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}

	var done atomic.Int64
	all := make(chan struct{})
	handler := func(ctx context.Context, m Msg[item]) error {
		if work > 0 {
			t := time.NewTimer(work)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if done.Add(1) == int64(b.N) {
			close(all)
		}
		return nil
	}
	b.ResetTimer()
	start := time.Now()
	stops := make([]func() error, consumers)
	for i := range consumers {
		_, cjs := ts.connect(b) // a process of its own: its own connection and pool
		cons, err := cjs.Consumer(ctx, "JOBS", "workers")
		if err != nil {
			b.Fatal(err)
		}
		pool := crew.New(32, crew.WithQueueSize(0))
		b.Cleanup(pool.Stop)
		stops[i] = runConsumer(b, NewConsumer(cons, pool, handler, WithFetchWait(200*time.Millisecond)))
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%d of %d messages processed", done.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	for _, stop := range stops {
		if err := stop(); err != nil {
			b.Error(err)
		}
	}
}

// BenchmarkPublish measures messages per second through a Publisher:
// batches of 100, each flush publishing asynchronously and waiting for the
// acknowledgements.
func BenchmarkPublish(b *testing.B) {
	ts := startServer(b)
	_, js := ts.connect(b)
	createStream(b, js, "JOBS", "jobs.>")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := NewPublisher(js, "jobs.new", itemID)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := p.Add(ctx, item{ID: i}); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
