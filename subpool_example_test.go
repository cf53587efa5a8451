package crew_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

// Two kinds of work share one pool of 8 workers: reports may take at most
// 2 of them, so imports always have room.
func ExampleNewSubpool() {
	p := crew.New(8)
	defer p.Stop()
	reports := crew.NewSubpool(p, 2)
	var running, most, done atomic.Int64
	for range 10 {
		reports.Go(func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // a report
			running.Add(-1)
			done.Add(1)
		})
	}
	reports.Wait()
	fmt.Println(done.Load(), most.Load() <= 2, reports.Stats().Limit)
	// Output: 10 true 2
}

// A big job counts as four small ones: with a limit of 4, it runs alone,
// and the small jobs submitted after it wait for it to start.
func ExampleSubpool_Weighted() {
	p := crew.New(8)
	defer p.Stop()
	s := crew.NewSubpool(p, 4)
	var used, most atomic.Int64
	job := func(w int64) func() {
		return func() {
			n := used.Add(w)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			used.Add(-w)
		}
	}
	for i := range 20 {
		if i%5 == 0 {
			s.Weighted(4).Go(job(4))
		} else {
			s.Go(job(1))
		}
	}
	s.Wait()
	fmt.Println(most.Load() <= 4)
	fmt.Println(s.Weighted(5).Go(job(5)) != nil) // more than the limit
	// Output:
	// true
	// true
}

// Stop ends a Subpool's work and leaves its pool running.
func ExampleSubpool_Stop() {
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1)
	var done atomic.Int64
	for range 3 {
		s.Go(func() { done.Add(1) })
	}
	s.Stop() // runs the three
	fmt.Println(done.Load(), errors.Is(s.Go(func() {}), crew.ErrStopped))
	fmt.Println(p.Go(func() {}))
	// Output:
	// 3 true
	// <nil>
}

// Shutdown gives up on a Subpool's queue when its context ends: the tasks
// that have not started are dropped and counted.
func ExampleSubpool_Shutdown() {
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1)
	release := make(chan struct{})
	started := make(chan struct{})
	s.Go(func() { close(started); <-release })
	<-started
	tasks := make([]*crew.Task, 3)
	for i := range tasks {
		tasks[i] = s.Submit(func(context.Context) error { return nil })
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	go func() { <-tasks[2].Done(); close(release) }()
	err := s.Shutdown(ctx)
	fmt.Println(err)
	fmt.Println(errors.Is(tasks[0].Wait(), crew.ErrDropped), s.Stats().Dropped)
	// Output:
	// crew: shutdown: context canceled: dropped 3 queued tasks
	// true 3
}

// A bounded Subpool queue: TryGo refuses a task when it is full.
func ExampleWithSubpoolQueue() {
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1, crew.WithSubpoolQueue(1))
	release := make(chan struct{})
	started := make(chan struct{})
	s.Go(func() { close(started); <-release })
	<-started
	fmt.Println(s.TryGo(func() {})) // waits for the slot
	fmt.Println(s.TryGo(func() {})) // the queue is full
	close(release)
	s.Wait()
	// Output:
	// true
	// false
}

// A non-blocking Subpool's Go fails at once when its queue is full.
func ExampleWithSubpoolNonBlocking() {
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1, crew.WithSubpoolQueue(1), crew.WithSubpoolNonBlocking())
	release := make(chan struct{})
	started := make(chan struct{})
	s.Go(func() { close(started); <-release })
	<-started
	fmt.Println(s.Go(func() {}))
	fmt.Println(s.Go(func() {}))
	close(release)
	s.Wait()
	// Output:
	// <nil>
	// crew: queue is full
}

// Stats shows the slots in use and the tasks waiting for them.
func ExampleSubpool_Stats() {
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 3)
	release := make(chan struct{})
	started := make(chan struct{})
	s.Weighted(2).Go(func() { close(started); <-release })
	<-started
	s.Weighted(2).Go(func() {}) // 2 more would pass the limit: it waits
	st := s.Stats()
	fmt.Println(st.Limit, st.InUse, st.Running, st.Waiting)
	close(release)
	s.Wait()
	// Output: 3 2 1 1
}
