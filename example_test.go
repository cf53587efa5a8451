package crew_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

func ExampleNew() {
	p := crew.New(4) // at most 4 tasks at a time
	defer p.Stop()

	var sum atomic.Int64
	for i := 1; i <= 100; i++ {
		p.Go(func() { sum.Add(int64(i)) })
	}
	p.Wait()
	fmt.Println(sum.Load())
	// Output: 5050
}

func ExamplePool_Go() {
	p := crew.New(2)
	var done atomic.Int64
	for range 10 {
		if err := p.Go(func() { done.Add(1) }); err != nil {
			fmt.Println(err)
		}
	}
	p.Stop()
	fmt.Println(done.Load(), p.Go(func() {}))
	// Output: 10 crew: pool is stopped
}

func ExamplePool_Submit() {
	p := crew.New(2)
	defer p.Stop()

	t := p.Submit(func(ctx context.Context) error {
		return errors.New("disk full")
	})
	fmt.Println(t.Wait())

	t = p.Submit(func(ctx context.Context) error { panic("bug") })
	var pe *crew.PanicError
	fmt.Println(errors.As(t.Wait(), &pe), pe.Value)
	// Output:
	// disk full
	// true bug
}

func ExamplePool_TryGo() {
	release := make(chan struct{})
	p := crew.New(1, crew.WithQueueSize(1))
	defer p.Stop()
	defer close(release)

	fmt.Println(p.TryGo(func() { <-release })) // runs
	fmt.Println(p.TryGo(func() { <-release })) // queued
	fmt.Println(p.TryGo(func() { <-release })) // no room
	// Output:
	// true
	// true
	// false
}

func ExamplePool_GoContext() {
	release := make(chan struct{})
	p := crew.New(1, crew.WithQueueSize(0))
	defer p.Stop()
	defer close(release)
	p.Go(func() { <-release })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := p.GoContext(ctx, func() {}) // waits for room, gives up with ctx
	fmt.Println(err)
	// Output: context deadline exceeded
}

// TrySubmit never waits: a caller that must not block, such as a request
// handler, sheds the work when the pool has no room for it.
func ExamplePool_TrySubmit() {
	p := crew.New(1, crew.WithQueueSize(1))
	defer p.Stop()

	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release }) // occupies the only worker
	<-started
	p.Go(func() {}) // fills the queue

	t, ok := p.TrySubmit(func(ctx context.Context) error { return nil })
	fmt.Println(ok, errors.Is(t.Wait(), crew.ErrQueueFull)) // refused: the Task says why

	close(release)
	p.Wait()
	t, ok = p.TrySubmit(func(ctx context.Context) error { return nil })
	fmt.Println(ok, t.Wait())
	// Output:
	// false true
	// true <nil>
}

// SubmitContext waits for room in a full queue only until its context
// ends; the Task then reports the context's error.
func ExamplePool_SubmitContext() {
	release := make(chan struct{})
	p := crew.New(1, crew.WithQueueSize(0))
	defer p.Stop()
	defer close(release)
	p.Go(func() { <-release }) // the only worker is busy, and there is no queue

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	t := p.SubmitContext(ctx, func(ctx context.Context) error { return nil })
	err := t.Wait()
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}

// Cancel keeps a queued task from ever running, and cancels the context
// of one that is running.
func ExampleTask_Cancel() {
	p := crew.New(1)
	defer p.Stop()
	started := make(chan struct{})
	running := p.Submit(func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // a long task that honours cancellation
		return ctx.Err()
	})
	<-started
	queued := p.Submit(func(ctx context.Context) error {
		fmt.Println("never printed")
		return nil
	})

	fmt.Println(queued.Cancel(), queued.Wait())   // kept from starting
	fmt.Println(running.Cancel(), running.Wait()) // its context cancelled: it returns
	fmt.Println(running.Cancel())                 // finished: nothing to cancel
	p.Wait()
	fmt.Println(p.Stats().Cancelled)
	// Output:
	// true context canceled
	// false context canceled
	// false
	// 1
}

func ExamplePool_Shutdown() {
	p := crew.New(1)
	started := make(chan struct{})
	p.Submit(func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // a long task that honours cancellation
		return ctx.Err()
	})
	<-started
	for range 5 {
		p.Go(func() {}) // queued behind it
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := p.Shutdown(ctx)
	var se *crew.ShutdownError
	fmt.Println(errors.As(err, &se), se.Dropped, errors.Is(err, context.DeadlineExceeded))
	// Output: true 5 true
}

// Done lets a goroutine that does not stop the pool learn that it has
// ended, to release what the pool's tasks used.
func ExamplePool_Done() {
	p := crew.New(2)
	cleanedUp := make(chan struct{})
	go func() {
		<-p.Done() // every queued task has run (Stop) or been dropped (Shutdown)
		fmt.Println("pool done: closing connections")
		close(cleanedUp)
	}()

	p.Go(func() { fmt.Println("task") })
	p.Stop()
	<-cleanedUp
	// Output:
	// task
	// pool done: closing connections
}

func ExamplePool_Wait() {
	p := crew.New(8)
	defer p.Stop()
	var n atomic.Int64
	for range 1000 {
		p.Go(func() { n.Add(1) })
	}
	p.Wait() // idle, still running
	fmt.Println(n.Load(), p.Go(func() {}))
	// Output: 1000 <nil>
}

func ExamplePool_Pause() {
	p := crew.New(4)
	p.Pause() // during a maintenance window: tasks queue, none starts
	var n atomic.Int64
	for range 100 {
		p.Go(func() { n.Add(1) })
	}
	fmt.Println(p.Paused(), p.Stats().Queued, n.Load())
	p.Resume()
	p.Wait()
	fmt.Println(p.Paused(), n.Load())

	p.Pause()
	p.Go(func() { n.Add(1) })
	err := p.Shutdown(context.Background()) // a paused pool's queue is dropped at once
	fmt.Println(err, errors.Is(err, crew.ErrPaused))
	// Output:
	// true 100 0
	// false 100
	// crew: shutdown: crew: the pool is paused: dropped 1 queued tasks true
}

func ExamplePool_Resize() {
	p := crew.New(1)
	defer p.Stop()
	p.Resize(16)
	fmt.Println(p.Stats().MaxWorkers)
	fmt.Println(p.Resize(0))
	// Output:
	// 16
	// crew: invalid argument: Resize(0): worker limit must be at least 1
}

func ExampleWithPanicHandler() {
	panics := make(chan *crew.PanicError, 1)
	p := crew.New(1, crew.WithPanicHandler(func(pe *crew.PanicError) { panics <- pe }))
	defer p.Stop()
	p.Go(func() { panic("oops") })
	fmt.Println((<-panics).Value)
	// Output: oops
}

func ExamplePool_Stats() {
	p := crew.New(4)
	for range 10 {
		p.Go(func() {})
	}
	p.Stop()
	s := p.Stats()
	fmt.Println(s.Submitted, s.Completed, s.Workers)
	// Output: 10 10 0
}
