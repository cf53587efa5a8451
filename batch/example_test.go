package batch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gocrew/crew/batch"
)

func Example() {
	ctx := context.Background()
	b := batch.New(func(ctx context.Context, items []int) error {
		fmt.Println("flush", items)
		return nil
	}, batch.WithMaxItems(3), batch.WithMaxWait(time.Hour))

	for i := 1; i <= 7; i++ {
		if err := b.Add(ctx, i); err != nil {
			fmt.Println(err)
		}
	}
	if err := b.Close(ctx); err != nil { // flushes the last, partial batch
		fmt.Println(err)
	}
	s := b.Stats()
	fmt.Println(s.Added, "items in", s.Batches, "batches")
	// Output:
	// flush [1 2 3]
	// flush [4 5 6]
	// flush [7]
	// 7 items in 3 batches
}

func ExampleWithMaxBytes() {
	ctx := context.Background()
	b := batch.New(func(ctx context.Context, lines []string) error {
		fmt.Printf("%q\n", lines)
		return nil
	}, batch.WithMaxBytes(8, func(s string) int { return len(s) }), batch.WithMaxWait(time.Hour))

	for _, s := range []string{"one", "two", "three", "four"} {
		b.Add(ctx, s)
	}
	b.Close(ctx)
	// Output:
	// ["one" "two"]
	// ["three"]
	// ["four"]
}

func ExampleWithRetry() {
	ctx := context.Background()
	calls := 0
	b := batch.New(func(ctx context.Context, items []string) error {
		calls++
		if calls < 3 {
			fmt.Println("attempt", calls, "fails")
			return errors.New("collector unavailable")
		}
		fmt.Println("attempt", calls, "sends", items)
		return nil
	}, batch.WithRetry(5, time.Millisecond, 10*time.Millisecond))

	b.Add(ctx, "login")
	b.Add(ctx, "logout")
	if err := b.Flush(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("retries:", b.Stats().Retries)
	b.Close(ctx)
	// Output:
	// attempt 1 fails
	// attempt 2 fails
	// attempt 3 sends [login logout]
	// retries: 2
}

func ExampleWithErrorHandler() {
	ctx := context.Background()
	b := batch.New(func(ctx context.Context, items []string) error {
		return errors.New("disk full")
	}, batch.WithErrorHandler(func(ctx context.Context, items []string, err error) {
		// A real handler might write the items to a dead-letter file.
		fmt.Println("not flushed:", items, err)
	}), batch.WithMaxWait(time.Hour))

	b.Add(ctx, "a")
	b.Add(ctx, "b")
	err := b.Close(ctx)
	fmt.Println("Close:", err)
	fmt.Println("failed items:", b.Stats().Failed)
	// Output:
	// not flushed: [a b] disk full
	// Close: batch: 2 items handed to the error handler: disk full
	// failed items: 2
}

func ExampleWithMaxPending() {
	ctx := context.Background()
	release := make(chan struct{})
	b := batch.New(func(ctx context.Context, items []int) error {
		<-release // a slow collector
		return nil
	}, batch.WithMaxItems(2), batch.WithMaxPending(2, batch.Fail))

	fmt.Println(b.Add(ctx, 1), b.Add(ctx, 2)) // one full batch, being flushed
	fmt.Println(b.Add(ctx, 3))                // no room
	close(release)
	fmt.Println(b.Close(ctx), b.Stats().Rejected)
	// Output:
	// <nil> <nil>
	// batch: too many pending items
	// <nil> 1
}

func ExampleBatcher_Flush() {
	ctx := context.Background()
	b := batch.New(func(ctx context.Context, items []string) error {
		fmt.Println("sent", items)
		return nil
	}, batch.WithMaxWait(time.Hour))
	defer b.Close(ctx)

	b.Add(ctx, "checkout")
	if err := b.Flush(ctx); err == nil { // returns once the batch is sent
		fmt.Println("flushed; pending:", b.Stats().Pending)
	}
	// Output:
	// sent [checkout]
	// flushed; pending: 0
}
