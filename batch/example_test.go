package batch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gocrew/crew"
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

// The flush function receives a slice that is reused once it returns:
// it copies what must outlive the call.
func ExampleNew() {
	ctx := context.Background()
	var stored [][]string // only flush writes it: flushes run one at a time by default
	b := batch.New(func(ctx context.Context, rows []string) error {
		stored = append(stored, slices.Clone(rows))
		return nil
	}, batch.WithMaxItems(100), batch.WithMaxWait(time.Hour)) // seal by size only

	for i := range 250 {
		if err := b.Add(ctx, fmt.Sprint("row ", i)); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := b.Close(ctx); err != nil { // flushes the last 50 and waits
		fmt.Println(err)
	}
	for _, rows := range stored {
		fmt.Printf("%d rows: %s .. %s\n", len(rows), rows[0], rows[len(rows)-1])
	}
	// Output:
	// 100 rows: row 0 .. row 99
	// 100 rows: row 100 .. row 199
	// 50 rows: row 200 .. row 249
}

// At the pending bound Add waits (the Block policy) until a flush makes
// room or its context ends.
func ExampleBatcher_Add() {
	ctx := context.Background()
	release := make(chan struct{})
	b := batch.New(func(ctx context.Context, items []string) error {
		<-release // a slow collector
		return nil
	}, batch.WithMaxItems(1), batch.WithMaxPending(1, batch.Block))

	fmt.Println(b.Add(ctx, "a")) // accepted: its flush is under way

	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	fmt.Println(b.Add(tctx, "b")) // no room until "a" is flushed

	close(release)
	fmt.Println(b.Add(ctx, "b")) // waits for the flush of "a"
	fmt.Println(b.Close(ctx))
	// Output:
	// <nil>
	// context deadline exceeded
	// <nil>
	// <nil>
}

// TryAdd never waits: a producer that must not block, such as a request
// handler, sheds what the batcher has no room for.
func ExampleBatcher_TryAdd() {
	release := make(chan struct{})
	b := batch.New(func(ctx context.Context, events []string) error {
		<-release // a slow collector
		return nil
	}, batch.WithMaxItems(2), batch.WithMaxPending(2, batch.Block))

	shed := 0
	for _, ev := range []string{"a", "b", "c", "d"} {
		if !b.TryAdd(ev) {
			shed++ // at the bound: count it, log it, or answer 503
		}
	}
	close(release)
	if err := b.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	s := b.Stats()
	fmt.Println(s.Added, "added,", shed, "shed,", s.Rejected, "rejected")
	// Output: 2 added, 2 shed, 2 rejected
}

// Close waits for the last flushes until its context ends; then it cancels
// the flushes still running and hands their items to the error handler.
func ExampleBatcher_Close() {
	failed := make(chan []string, 1)
	b := batch.New(func(ctx context.Context, items []string) error {
		<-ctx.Done() // a collector that never answers; the flush honours ctx
		return ctx.Err()
	}, batch.WithErrorHandler(func(ctx context.Context, items []string, err error) {
		failed <- slices.Clone(items) // items is reused once the handler returns
	}), batch.WithMaxWait(time.Hour))

	ctx := context.Background()
	for _, ev := range []string{"a", "b"} {
		if err := b.Add(ctx, ev); err != nil {
			fmt.Println(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	fmt.Println(b.Close(ctx))
	fmt.Println("not flushed:", <-failed)
	// Output:
	// context deadline exceeded
	// not flushed: [a b]
}

// Stats reports counters and the latency of the flush calls.
func ExampleBatcher_Stats() {
	ctx := context.Background()
	b := batch.New(func(ctx context.Context, items []int) error {
		return nil
	}, batch.WithMaxItems(4), batch.WithMaxWait(time.Hour))

	for i := range 10 {
		if err := b.Add(ctx, i); err != nil {
			fmt.Println(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		fmt.Println(err)
	}
	s := b.Stats()
	fmt.Println(s.Added, "added,", s.Flushed, "flushed in", s.Batches, "batches,", s.Failed, "failed,", s.Pending, "pending")
	fmt.Println("flush calls:", s.Latency.Count, "p99 at most max:", s.Latency.Quantile(0.99) <= s.Latency.Max)
	// Output:
	// 10 added, 10 flushed in 3 batches, 0 failed, 0 pending
	// flush calls: 3 p99 at most max: true
}

// A Batcher can flush on a pool shared with other work. It never stops
// that pool: close the Batcher first, then stop the pool.
func ExampleWithPool() {
	p := crew.New(4)
	defer p.Stop()

	ctx := context.Background()
	b := batch.New(func(ctx context.Context, items []int) error {
		fmt.Println("flush", items)
		return nil
	}, batch.WithPool(p), batch.WithMaxItems(2), batch.WithMaxWait(time.Hour))

	for i := 1; i <= 5; i++ {
		if err := b.Add(ctx, i); err != nil {
			fmt.Println(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// flush [1 2]
	// flush [3 4]
	// flush [5]
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
	}, batch.WithRetry(crew.Retry{Attempts: 5, Delay: time.Millisecond, MaxDelay: 10 * time.Millisecond}))

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

// With DropOldest a full batcher makes room for a new item by dropping the
// oldest one not yet being flushed, which goes to the error handler.
func ExampleWithMaxPending_dropOldest() {
	ctx := context.Background()
	flushing, release := make(chan struct{}, 4), make(chan struct{})
	b := batch.New(func(ctx context.Context, items []int) error {
		flushing <- struct{}{}
		<-release // a slow collector
		fmt.Println("flushed", items)
		return nil
	}, batch.WithMaxItems(2), batch.WithMaxPending(4, batch.DropOldest),
		batch.WithErrorHandler(func(ctx context.Context, items []int, err error) {
			if errors.Is(err, batch.ErrDropped) {
				fmt.Println("dropped", items)
			}
		}), batch.WithMaxWait(time.Hour))

	add := func(items ...int) {
		for _, it := range items {
			if err := b.Add(ctx, it); err != nil {
				fmt.Println(err)
			}
		}
	}
	add(1, 2)  // a full batch
	<-flushing // being flushed: it is not dropped
	add(3, 4)  // a full batch, waiting for a flush
	add(5)     // at the bound: 3, the oldest item not being flushed, is dropped
	close(release)
	if err := b.Close(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("dropped:", b.Stats().Dropped)
	// Output:
	// dropped [3]
	// flushed [1 2]
	// flushed [4]
	// flushed [5]
	// dropped: 1
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
