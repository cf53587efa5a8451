package crew_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Tasks of one key, submitted by one goroutine each, run one at a time and
// in submission order, while many producers and workers run concurrently.
func TestKeyedOrderPerKeyUnderConcurrency(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	keys, perKey, producers := 64, scaled(400, 4), 8
	next := make([]int, keys) // written only by the key's own tasks
	running := make([]atomic.Int32, keys)
	var overlaps, outOfOrder atomic.Int64
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := range perKey {
				for key := g; key < keys; key += producers {
					seq := i
					if err := k.Go(key, func() {
						if running[key].Add(1) != 1 {
							overlaps.Add(1)
						}
						if next[key] != seq {
							outOfOrder.Add(1)
						}
						next[key] = seq + 1
						if seq%5 == 0 {
							runtime.Gosched() // let another task of the key try to overlap
						}
						running[key].Add(-1)
					}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if overlaps.Load() != 0 || outOfOrder.Load() != 0 {
		t.Fatalf("%d overlapping and %d out-of-order tasks", overlaps.Load(), outOfOrder.Load())
	}
	for key, n := range next {
		if n != perKey {
			t.Fatalf("key %d ran %d tasks, want %d", key, n, perKey)
		}
	}
	if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 || s.Waiting != 0 {
		t.Fatalf("Stats after Wait = %+v, want no key and nothing unfinished", s)
	}
}

// Concurrent producers of the same key: whatever order the Go calls take,
// the key's tasks never overlap and each runs once.
func TestKeyedSharedKeyNeverOverlaps(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	const keys = 3
	n := scaled(3000, 5)
	var running [keys]atomic.Int32
	var overlaps, ran atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range n {
				key := (g + i) % keys
				k.Go(fmt.Sprint("key-", key), func() {
					if running[key].Add(1) != 1 {
						overlaps.Add(1)
					}
					ran.Add(1)
					running[key].Add(-1)
				})
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if overlaps.Load() != 0 || ran.Load() != int64(6*n) {
		t.Fatalf("%d overlaps, %d of %d tasks ran", overlaps.Load(), ran.Load(), 6*n)
	}
}

// Tasks of different keys run in parallel, up to the pool's limit.
func TestKeyedDifferentKeysRunInParallel(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	started := make(chan int, 4)
	release := make(chan struct{})
	for key := range 4 {
		k.Go(key, func() { started <- key; <-release })
	}
	for range 4 { // all four run at once, or this times out
		recvWithin(t, started, "four keys to run at once")
	}
	close(release)
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
}

// A hot key gives its worker back after each task: on a one-worker pool,
// another key's task submitted after 200 of the hot key's does not wait
// for all of them. (The pool's queue is sharded, so its order is only
// approximately FIFO: the hot key's resubmitted step may land ahead of the
// other key's a few times, each time with probability at most 3/4 on two
// cores; being behind 100 of them has probability below 1e-12. A key that
// kept its worker would run all 200 first.)
func TestKeyedHotKeyDoesNotMonopoliseWorkers(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	release := gate(t, p)
	var order []string // the pool has one worker: tasks run one at a time
	for i := range 200 {
		k.Go("hot", func() { order = append(order, fmt.Sprint("hot", i)) })
	}
	k.Go("cold", func() { order = append(order, "cold") })
	release()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	pos := slices.Index(order, "cold")
	if len(order) != 201 || pos < 0 || pos > 100 {
		t.Fatalf("the cold key's task ran %dth of %d", pos+1, len(order))
	}
	t.Logf("the cold key's task ran %dth", pos+1)
}

// Busy keys hold no goroutine: 10,000 keys queued behind busy workers add
// no goroutines.
func TestKeyedNoGoroutinePerKey(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	r1, r2 := gate(t, p), gate(t, p)
	before := runtime.NumGoroutine()
	var ran atomic.Int64
	for key := range 10_000 {
		k.Go(key, func() { ran.Add(1) })
		k.Go(key, func() { ran.Add(1) })
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Fatalf("%d goroutines for 10,000 busy keys, %d before", after, before)
	}
	if s := k.Stats(); s.Keys != 10_000 || s.Waiting != 20_000 {
		t.Fatalf("Stats = %+v, want 10,000 keys and 20,000 waiting", s)
	}
	r1()
	r2()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if ran.Load() != 20_000 || k.Stats().Keys != 0 {
		t.Fatalf("%d tasks ran, %d keys left", ran.Load(), k.Stats().Keys)
	}
}

// A panic in a key's task goes to the pool's handler, and the key's next
// task runs as usual; so does one after runtime.Goexit.
func TestKeyedPanicAndGoexitPassTheKeyOn(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	p := crew.New(2, quietPanics(&panics))
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	var ran []string
	k.Go("a", func() { ran = append(ran, "1") })
	k.Go("a", func() { panic("boom") })
	k.Go("a", func() { ran = append(ran, "2") })
	k.Go("a", func() { runtime.Goexit() })
	k.Go("a", func() { ran = append(ran, "3") })
	task := k.Submit("a", func(context.Context) error { panic("in a Task") })
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	var pe *crew.PanicError
	if fmt.Sprint(ran) != "[1 2 3]" || panics.Load() != 1 || !errors.As(task.Wait(), &pe) {
		t.Fatalf("ran %v, %d panics handled, Task error %v", ran, panics.Load(), task.Wait())
	}
	if s := k.Stats(); s.Keys != 0 {
		t.Fatalf("%d keys left", s.Keys)
	}
}

func TestKeyedSubmitAndErrors(t *testing.T) {
	leak.Check(t)
	type key struct{}
	p := crew.New(2, crew.WithContext(context.WithValue(context.Background(), key{}, "v")))
	k := crew.NewKeyed[int](p)
	errDisk := errors.New("disk full")
	task := k.Submit(1, func(ctx context.Context) error {
		if ctx.Value(key{}) != "v" || ctx.Err() != nil {
			return errors.New("wrong context")
		}
		return errDisk
	})
	if err := task.Wait(); err != errDisk {
		t.Fatalf("Submit: %v, want %v", err, errDisk)
	}
	if err := k.Go(1, nil); err != crew.ErrNilTask {
		t.Fatalf("Go(nil) = %v", err)
	}
	if err := k.Submit(1, nil).Wait(); err != crew.ErrNilTask {
		t.Fatalf("Submit(nil) = %v", err)
	}
	p.Stop()
	if err := k.Go(1, func() {}); err != crew.ErrStopped {
		t.Fatalf("Go after Stop = %v", err)
	}
	if err := k.Submit(2, func(context.Context) error { return nil }).Wait(); err != crew.ErrStopped {
		t.Fatalf("Submit after Stop = %v", err)
	}
	var zero crew.Keyed[int]
	if err := zero.Go(1, func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Keyed: Go = %v", err)
	}
	if err := zero.Submit(1, func(context.Context) error { return nil }).Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Keyed: Submit = %v", err)
	}
	zero.Wait()
	_ = zero.Stats()
	if err, ok := recoverErr(func() { crew.NewKeyed[int](nil) }); !ok || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("NewKeyed(nil): %v", err)
	}
	if err, ok := recoverErr(func() { crew.NewKeyed[int](crew.New(1), crew.WithKeyRate(crew.Rate{})) }); !ok || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("NewKeyed with a zero Rate: %v", err)
	}
}

// recoverErr runs f and returns the error it panicked with.
func recoverErr(f func()) (err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			err, _ = v.(error)
			panicked = true
		}
	}()
	f()
	return nil, false
}

// Stop runs every accepted task, including those queued behind a running
// task of their key, with any key limit, on a plain and on a bounded pool.
func TestKeyedStopRunsEverything(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 3} {
		for _, bounded := range []bool{false, true} {
			t.Run(fmt.Sprintf("limit=%d/bounded=%v", limit, bounded), func(t *testing.T) {
				var opts []crew.Option
				if bounded {
					opts = append(opts, crew.WithQueueSize(2))
				}
				p := crew.New(2, opts...)
				k := crew.NewKeyed[int](p, crew.WithKeyLimit(limit))
				var ran atomic.Int64
				n := scaled(200, 4)
				for i := range 10 * n {
					if err := k.Go(i%10, func() { ran.Add(1) }); err != nil {
						t.Fatal(err)
					}
				}
				within(t, schedDeadline, "Pool.Stop", p.Stop)
				if ran.Load() != int64(10*n) {
					t.Fatalf("%d of %d tasks ran before Stop returned", ran.Load(), 10*n)
				}
				within(t, schedDeadline, "Keyed.Wait", k.Wait)
				if s := k.Stats(); s.Keys != 0 || s.Dropped != 0 {
					t.Fatalf("Stats after Stop = %+v", s)
				}
			})
		}
	}
}

// Shutdown's deadline drops the keyed tasks that have not started: those
// whose step Shutdown removed from the pool's queue, and those behind a
// running task. Nothing is left waiting.
func TestKeyedShutdownDropsWhatHasNotStarted(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	k := crew.NewKeyed[int](p)
	started := make(chan struct{})
	// Key 0 runs a task that returns only when Shutdown cancels the pool's
	// context; 9 more tasks of key 0 wait behind it.
	k.Go(0, func() { close(started); <-p.Context().Done() })
	recvWithin(t, started, "key 0's first task")
	release := gate(t, p) // the other worker
	defer release()
	var ran atomic.Int64
	var tasks []*crew.Task
	for key := range 5 {
		for range 9 {
			k.Go(key, func() { ran.Add(1) })
		}
		tasks = append(tasks, k.Submit(key, func(context.Context) error { ran.Add(1); return nil }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	go func() { <-p.Context().Done(); release() }()
	var err error
	within(t, schedDeadline, "Pool.Shutdown", func() { err = p.Shutdown(ctx) })
	var se *crew.ShutdownError
	if !errors.As(err, &se) {
		t.Fatalf("Shutdown = %v, want a *ShutdownError", err)
	}
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	for _, task := range tasks {
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("a dropped Task reports %v", err)
		}
	}
	if s := k.Stats(); ran.Load() != 0 || s.Dropped != 50 || s.Keys != 0 || s.Unfinished != 0 {
		t.Fatalf("%d ran; Stats %+v; want none ran, 50 dropped, no key left", ran.Load(), s)
	}
}

// Stop runs the next task of a key whose running task returns after
// Stop has closed the pool: also when WithContext's parent ended before
// (it cancels the pool's context, not the pool), and when the running task
// calls runtime.Goexit.
func TestKeyedStopRunsTheKeysNextTask(t *testing.T) {
	leak.Check(t)
	for _, tc := range []struct {
		name                 string
		parentEnded, goexits bool
	}{{"parent context ended", true, false}, {"Goexit", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := crew.New(1, crew.WithContext(parent))
			k := crew.NewKeyed[int](p)
			started, release := make(chan struct{}), make(chan struct{})
			k.Go(1, func() {
				close(started)
				<-release
				if tc.goexits {
					runtime.Goexit()
				}
			})
			recvWithin(t, started, "key 1's first task")
			var ran atomic.Int64
			second := k.Submit(1, func(context.Context) error { ran.Add(1); return nil })
			if tc.parentEnded {
				cancel()
			}
			stopped := make(chan struct{})
			go func() { p.Stop(); close(stopped) }()
			eventually(t, "Stop to close the pool", func() bool { return p.Go(func() {}) == crew.ErrStopped })
			close(release)
			recvWithin(t, stopped, "Pool.Stop")
			if err := second.Wait(); err != nil || ran.Load() != 1 {
				t.Fatalf("key 1's second task: %v, ran %d times; want nil, once", err, ran.Load())
			}
			within(t, schedDeadline, "Keyed.Wait", k.Wait)
		})
	}
}

// After WithContext's parent ended, Shutdown's deadline still drops and
// completes the keyed tasks whose steps it removed.
func TestKeyedShutdownAfterTheParentContextEnded(t *testing.T) {
	leak.Check(t)
	parent, cancel := context.WithCancel(context.Background())
	p := crew.New(1, crew.WithContext(parent))
	k := crew.NewKeyed[int](p)
	release := gate(t, p)
	defer release()
	task := k.Submit(1, func(context.Context) error { return nil })
	cancel()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer stop()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(ctx) }()
	eventually(t, "Shutdown to drop the step", func() bool { return p.Stats().Dropped > 0 })
	release()
	if err := recvWithin(t, shut, "Pool.Shutdown"); err == nil {
		t.Fatal("Shutdown = nil, want a *ShutdownError")
	}
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if err := task.Wait(); err != crew.ErrDropped {
		t.Fatalf("the dropped Task reports %v", err)
	}
	if s := k.Stats(); s.Dropped != 1 || s.Keys != 0 {
		t.Fatalf("Stats %+v; want 1 dropped, no key left", s)
	}
}

// On a bounded non-blocking pool, Go for an idle key fails fast with
// ErrQueueFull when the pool's queue is full, and that task never runs;
// every task Go accepted runs exactly once, from many producers at once.
func TestKeyedNonBlockingPoolAcceptsExactly(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithQueueSize(2), crew.WithNonBlocking())
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	n := scaled(2000, 4)
	var accepted, refused, ran atomic.Int64
	runs := make([]atomic.Int32, 8*n)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range n {
				id := g*n + i
				err := k.Go(id%16, func() {
					runs[id].Add(1)
					ran.Add(1)
				})
				switch err {
				case nil:
					accepted.Add(1)
				case crew.ErrQueueFull:
					refused.Add(1)
					runs[id].Add(100) // must stay 100: a refused task never runs
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	p.Wait()
	for id := range runs {
		if v := runs[id].Load(); v != 1 && v != 100 {
			t.Fatalf("task %d: runs %d (1: accepted and ran once; 100: refused, never ran)", id, v)
		}
	}
	if ran.Load() != accepted.Load() || accepted.Load()+refused.Load() != int64(8*n) {
		t.Fatalf("%d ran, %d accepted, %d refused", ran.Load(), accepted.Load(), refused.Load())
	}
	t.Logf("%d accepted, %d refused with ErrQueueFull", accepted.Load(), refused.Load())
}

// Keyed layers on a RateLimited: the rate holds across all keys.
func TestKeyedOnRateLimited(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: 2 * time.Millisecond, Burst: 2})
	k := crew.NewKeyed[int](rl)
	var mu sync.Mutex
	var starts []time.Time
	for i := range 30 {
		k.Go(i%3, func() {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
		})
	}
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if len(starts) != 30 {
		t.Fatalf("%d tasks ran", len(starts))
	}
	// 30 starts at one per 2ms after a burst of 2 take at least 56ms.
	if d := starts[len(starts)-1].Sub(starts[0]); d < 50*time.Millisecond {
		t.Fatalf("30 starts in %v: faster than the rate", d)
	}
}

// With WithCrashOnPanic, a keyed task's panic crashes the program at once,
// without running the key's next task first (the pool's queue is full, so
// the step would otherwise go on inline).
func TestKeyedCrashOnPanicRunsNothingMore(t *testing.T) {
	leak.Check(t)
	crashes(t, func() {
		p := crew.New(1, crew.WithQueueSize(1), crew.WithCrashOnPanic())
		k := crew.NewKeyed[string](p)
		started, panicNow := make(chan struct{}), make(chan struct{})
		k.Go("a", func() { close(started); <-panicNow; panic("crash me") })
		<-started
		never := make(chan struct{})
		k.Go("a", func() { fmt.Println("the next task ran"); <-never })
		p.Go(func() {}) // fills the queue
		close(panicNow)
		<-never
	})
}

// On a pool that does not crash, a panic handler that panics in turn does
// not strand a layer: the key's next task runs, and both Waits return.
func TestLayersSurviveAPanickingPanicHandler(t *testing.T) {
	leak.Check(t)
	var handled atomic.Int64
	p := crew.New(2, crew.WithPanicHandler(func(pe *crew.PanicError) {
		// It panics on a task's panic, and takes its own quietly when
		// the worker hands it over in turn.
		handled.Add(1)
		if _, own := pe.Value.(*crew.PanicError); !own {
			panic(pe)
		}
	}))
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	ran := make(chan struct{})
	k.Go("a", func() { panic("task") })
	k.Go("a", func() { close(ran) })
	recvWithin(t, ran, "the key's next task")
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	q := crew.NewPriority(p)
	q.Go(0, func() { panic("task") })
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	// The third call panicked inside Priority's step. (The second, on the
	// worker that the Keyed's step panicked out of, may still be on its
	// way: Keyed.Wait does not wait for that worker.)
	waitUntil(t, schedDeadline, "three calls of the panic handler", func() bool { return handled.Load() >= 3 })
}

// A Go from inside a task, for a key whose first Go (from outside) waits
// for room in the pool's full bounded queue, does not wait for that Go:
// the room it waits for may be the calling task's own worker. Both tasks
// run, in the order of their Go calls.
func TestKeyedGoFromATaskBehindAStartWaitingForRoom(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(1))
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	callGo, innerReturned := make(chan struct{}), make(chan error, 1)
	var order []string
	var mu sync.Mutex
	record := func(s string) func() {
		return func() { mu.Lock(); order = append(order, s); mu.Unlock() }
	}
	holding := make(chan struct{})
	p.Go(func() { // holds the only worker
		close(holding)
		<-callGo
		innerReturned <- k.Go("a", record("inner"))
	})
	<-holding
	p.Go(func() {}) // fills the queue
	outerReturned := make(chan error, 1)
	go func() { outerReturned <- k.Go("a", record("outer")) }()
	// Counted in, the outer Go's task holds the key's start while it waits
	// for room.
	eventually(t, "the outer Go to wait for room", func() bool { return k.Stats().Unfinished == 1 })
	close(callGo)
	if err := recvWithin(t, innerReturned, "the Go from inside the task"); err != nil {
		t.Fatalf("the Go from inside the task: %v", err)
	}
	if err := recvWithin(t, outerReturned, "the outer Go"); err != nil {
		t.Fatalf("the outer Go: %v", err)
	}
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if len(order) != 2 || order[0] != "outer" {
		t.Fatalf("ran %v, want [outer inner]", order)
	}
}

// When Stop refuses the waiting first Go of that key, the task queued
// behind it from inside a task was accepted: it is dropped and counted,
// and nothing waits for it.
func TestKeyedGoFromATaskBehindARefusedStart(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(1))
	k := crew.NewKeyed[string](p)
	callGo, innerReturned := make(chan struct{}), make(chan error, 1)
	finish := make(chan struct{})
	var ran atomic.Int64
	holding := make(chan struct{})
	p.Go(func() { // holds the only worker until Stop has begun
		close(holding)
		<-callGo
		innerReturned <- k.Go("a", func() { ran.Add(1) })
		<-finish
	})
	<-holding
	p.Go(func() {}) // fills the queue
	outerReturned := make(chan error, 1)
	go func() { outerReturned <- k.Go("a", func() { ran.Add(1) }) }()
	eventually(t, "the outer Go to wait for room", func() bool { return k.Stats().Unfinished == 1 })
	close(callGo)
	if err := recvWithin(t, innerReturned, "the Go from inside the task"); err != nil {
		t.Fatalf("the Go from inside the task: %v", err)
	}
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	if err := recvWithin(t, outerReturned, "the outer Go"); err != crew.ErrStopped {
		t.Fatalf("the outer Go: %v, want ErrStopped", err)
	}
	close(finish)
	recvWithin(t, stopped, "Pool.Stop")
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if s := k.Stats(); ran.Load() != 0 || s.Dropped != 1 || s.Unfinished != 0 || s.Keys != 0 {
		t.Fatalf("%d ran; Stats %+v; want none ran, 1 dropped, nothing left", ran.Load(), s)
	}
}

// Go calls from outside and from inside the pool's tasks (which do not wait
// for a key's start, see TestKeyedGoFromATaskBehindAStartWaitingForRoom),
// on a few keys that keep going idle, of a Keyed on a bounded pool: every
// task accepted runs once, the tasks of a key never overlap, and nothing is
// left.
func TestKeyedGoInsideAndOutsideOnBoundedPool(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	p := crew.New(4, crew.WithQueueSize(1), quietPanics(&panics))
	defer p.Stop()
	abort := make(chan struct{})
	defer close(abort) // before Stop: lets the producers go on a failure
	k := crew.NewKeyed[int](p)
	const keys = 3
	perProducer := scaled(40000, 8)
	var busy [keys]atomic.Int32
	var accepted, ran, overlaps atomic.Int64
	// Each producer waits for its task, so that keys go idle and every Go
	// may start its key.
	produce := func(first int) {
		for i := first; i < first+perProducer; i++ {
			key := i % keys
			done := make(chan struct{})
			err := k.Go(key, func() {
				if busy[key].Add(1) != 1 {
					overlaps.Add(1)
				}
				ran.Add(1)
				busy[key].Add(-1)
				close(done)
			})
			if err != nil {
				continue
			}
			accepted.Add(1)
			select {
			case <-done:
			case <-abort:
				return
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 2 { // inside: each holds a worker
		wg.Add(1)
		if err := p.Go(func() { defer wg.Done(); produce(g) }); err != nil {
			t.Fatal(err)
		}
	}
	for g := 2; g < 4; g++ { // outside
		wg.Go(func() { produce(g) })
	}
	within(t, schedDeadline, "the producers", wg.Wait)
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if s := k.Stats(); panics.Load() != 0 || overlaps.Load() != 0 || ran.Load() != accepted.Load() || s.Unfinished != 0 || s.Keys != 0 {
		t.Fatalf("%d panics, %d overlaps, %d ran of %d accepted; Stats %+v", panics.Load(), overlaps.Load(), ran.Load(), accepted.Load(), s)
	}
}

// A key whose task was running when Shutdown gave up keeps no bucket
// refilling afterwards: it is gone with the others, and no timer stays
// armed until the bucket is full again (here an hour), holding the
// Keyed. The running task returns only once the Keyed has dropped key 2's
// task.
func TestKeyedShutdownLeavesNoRefillingKey(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	k := crew.NewKeyed[int](p, crew.WithKeyRate(crew.Rate{Limit: 1, Per: time.Hour}))
	running := make(chan struct{})
	others := make(chan *crew.Task, 1)
	if err := k.Go(1, func() { close(running); <-(<-others).Done() }); err != nil {
		t.Fatal(err)
	}
	<-running
	other := k.Submit(2, func(context.Context) error { return nil }) // its step waits behind key 1's
	others <- other
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	p.Shutdown(ctx)
	k.Wait()
	if err := other.Wait(); err != crew.ErrDropped {
		t.Fatalf("key 2's task = %v, want ErrDropped", err)
	}
	if s := k.Stats(); s.Keys != 0 {
		t.Fatalf("after Shutdown, Stats %+v: want no key left", s)
	}
}

// Keys WithKeyRate that go idle wait for their buckets to refill on one
// timer per shard, not one goroutine each: draining many keys at once
// starts a handful of goroutines, and every key's memory goes.
func TestKeyedRateDrainStartsFewGoroutines(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	k := crew.NewKeyed[int](p, crew.WithKeyRate(crew.Rate{Limit: 1, Per: 50 * time.Millisecond}))
	base := runtime.NumGoroutine()
	keys := scaled(20_000, 4)
	for i := range keys {
		k.Go(i, func() {})
	}
	k.Wait()
	peak := 0
	eventually(t, "every key's bucket to refill", func() bool {
		peak = max(peak, runtime.NumGoroutine()-base)
		return k.Stats().Keys == 0
	})
	if peak > 100 {
		t.Fatalf("%d goroutines beside the test's while %d keys' buckets refilled", peak, keys)
	}
}
