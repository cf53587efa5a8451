package crew_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// With aging off, queued tasks start by priority, highest first, and in
// submission order within one priority.
func TestPriorityStrictOrder(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))
	release := gate(t, p)
	type job struct{ prio, seq int }
	var ran []job // one worker: one task at a time
	var want []job
	for i := range 200 {
		j := job{rand.IntN(5) - 2, i}
		want = append(want, j)
		if err := q.Go(j.prio, func() { ran = append(ran, j) }); err != nil {
			t.Fatal(err)
		}
	}
	release()
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	slices.SortStableFunc(want, func(a, b job) int { return b.prio - a.prio })
	if !slices.Equal(ran, want) {
		t.Fatalf("ran in order %v, want %v", ran, want)
	}
}

// A low-priority task is not starved by a steady stream of high-priority
// ones, and the bound holds: every task that started before it was queued
// before it, or submitted less than (P-p)×aging after it.
func TestPriorityAgingPreventsStarvation(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	const aging, high = time.Millisecond, 50 // the bound: 50 × 1ms after the low task
	q := crew.NewPriority(p, crew.WithAging(aging))
	lowRan := make(chan struct{})
	var mu sync.Mutex
	var ranBeforeLow []time.Time // submission times of high tasks that started before the low one
	lowDone := false
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the flood: always more high-priority work than one worker does
		for {
			select {
			case <-stop:
				return
			default:
			}
			submitted := time.Now()
			q.Go(high, func() {
				mu.Lock()
				if !lowDone {
					ranBeforeLow = append(ranBeforeLow, submitted)
				}
				mu.Unlock()
				for time.Since(submitted) < 20*time.Microsecond { // some work
				}
			})
			if st := q.Stats(); st.Waiting > 200 {
				time.Sleep(50 * time.Microsecond) // pace the flood, keep a backlog
			}
		}
	})
	// Let the backlog build, then submit the low-priority task.
	deadline := time.Now().Add(schedDeadline)
	for q.Stats().Waiting < 100 {
		if time.Now().After(deadline) {
			t.Fatal("no backlog")
		}
		time.Sleep(100 * time.Microsecond)
	}
	q.Go(0, func() {
		mu.Lock()
		lowDone = true
		mu.Unlock()
		close(lowRan)
	})
	lowQueued := time.Now() // after Go returned: the task's own time is earlier
	recvWithin(t, lowRan, "the low-priority task under a flood of high-priority ones")
	close(stop)
	wg.Wait()
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	bound := lowQueued.Add(high * aging)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range ranBeforeLow {
		if !s.Before(bound) {
			t.Fatalf("a high-priority task submitted %v after the low one started before it (bound %v)", s.Sub(lowQueued), high*aging)
		}
	}
	t.Logf("%d high-priority tasks started before the low one", len(ranBeforeLow))
}

func TestPrioritySubmitPanicAndErrors(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	p := crew.New(2, quietPanics(&panics))
	q := crew.NewPriority(p)
	errBad := errors.New("bad")
	if err := q.Submit(1, func(context.Context) error { return errBad }).Wait(); err != errBad {
		t.Fatalf("Submit = %v", err)
	}
	var pe *crew.PanicError
	if err := q.Submit(1, func(context.Context) error { panic("x") }).Wait(); !errors.As(err, &pe) {
		t.Fatalf("Submit of a panicking task = %v", err)
	}
	q.Go(1, func() { panic("y") })
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	if panics.Load() != 1 {
		t.Fatalf("%d panics handled, want 1", panics.Load())
	}
	if err := q.Go(1, nil); err != crew.ErrNilTask {
		t.Fatalf("Go(nil) = %v", err)
	}
	p.Stop()
	if err := q.Go(1, func() {}); err != crew.ErrStopped {
		t.Fatalf("Go after Stop = %v", err)
	}
	if err := q.Submit(1, func(context.Context) error { return nil }).Wait(); err != crew.ErrStopped {
		t.Fatalf("Submit after Stop = %v", err)
	}
	var zero crew.Priority
	if err := zero.Go(1, func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Priority: Go = %v", err)
	}
	zero.Wait()
	if err, ok := recoverErr(func() { crew.NewPriority(p, crew.WithAging(-1)) }); !ok || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("WithAging(-1): %v", err)
	}
}

// Stop runs every queued task; Shutdown's deadline drops the queued ones.
func TestPriorityStopAndShutdown(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	q := crew.NewPriority(p)
	var ran atomic.Int64
	release := gate(t, p)
	for i := range 100 {
		q.Go(i%3, func() { ran.Add(1) })
	}
	release()
	within(t, schedDeadline, "Pool.Stop", p.Stop)
	if ran.Load() != 100 {
		t.Fatalf("%d of 100 ran before Stop returned", ran.Load())
	}

	p = crew.New(1)
	q = crew.NewPriority(p)
	release = gate(t, p)
	go func() { <-p.Context().Done(); release() }()
	var tasks []*crew.Task
	for i := range 10 {
		tasks = append(tasks, q.Submit(i, func(context.Context) error { ran.Add(1); return nil }))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var se *crew.ShutdownError
	within(t, schedDeadline, "Pool.Shutdown", func() {
		if err := p.Shutdown(ctx); !errors.As(err, &se) || se.Dropped != 10 {
			t.Errorf("Shutdown = %v, want 10 dropped", err)
		}
	})
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	for _, task := range tasks {
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("a dropped Task reports %v", err)
		}
	}
	if s := q.Stats(); s.Dropped != 10 || s.Unfinished != 0 || s.Waiting != 0 {
		t.Fatalf("Stats = %+v, want 10 dropped", s)
	}
}

// On a bounded non-blocking pool, Go fails fast with ErrQueueFull and its
// task never runs; every accepted task runs once, from many producers.
func TestPriorityNonBlockingPoolAcceptsExactly(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithQueueSize(2), crew.WithNonBlocking())
	defer p.Stop()
	q := crew.NewPriority(p)
	n := scaled(2000, 4)
	runs := make([]atomic.Int32, 8*n)
	var accepted, ran atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range n {
				id := g*n + i
				switch err := q.Go(id%7, func() { runs[id].Add(1); ran.Add(1) }); err {
				case nil:
					accepted.Add(1)
				case crew.ErrQueueFull:
					runs[id].Add(100)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	for id := range runs {
		if v := runs[id].Load(); v != 1 && v != 100 {
			t.Fatalf("task %d: runs %d (1: accepted and ran once; 100: refused, never ran)", id, v)
		}
	}
	if ran.Load() != accepted.Load() {
		t.Fatalf("%d accepted, %d ran", accepted.Load(), ran.Load())
	}
}

// A Priority on a RateLimited starts its tasks at the limiter's rate, best
// first: the task each step runs is chosen when it starts.
func TestPriorityOnRateLimited(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: time.Millisecond})
	q := crew.NewPriority(rl, crew.WithAging(0))
	release := gate(t, p) // every task is queued before the first starts
	var ran []int         // one worker: one task at a time
	for i := range 20 {
		q.Go(i, func() { ran = append(ran, i) })
	}
	start := time.Now()
	release()
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	if d := time.Since(start); len(ran) != 20 || d < 19*time.Millisecond {
		t.Fatalf("%d of 20 ran in %v; want all, at one per ms", len(ran), d)
	}
	if !slices.IsSortedFunc(ran, func(a, b int) int { return b - a }) {
		t.Fatalf("order %v, want highest first", ran)
	}
}

// Two submissions refused by a full non-blocking pool, where the step of
// an earlier one ran the first's task: the first then counts on the
// second's step, which was refused too; the second takes its own task back
// and must see that the earliest task has no step left. (The Drop hook
// holds each refused submission before it undoes itself.)
func TestPriorityRefusedSubmissionsLeaveNoOrphan(t *testing.T) {
	leak.Check(t)
	aRefused, aGo := make(chan struct{}), make(chan struct{})
	bRefused, bGo := make(chan struct{}), make(chan struct{})
	var drops atomic.Int32
	p := crew.New(1, crew.WithQueueSize(1), crew.WithNonBlocking(), crew.WithHooks(crew.Hooks{
		Drop: func(crew.TaskEvent) {
			switch drops.Add(1) {
			case 1:
				close(aRefused)
				<-aGo
			case 2:
				close(bRefused)
				<-bGo
			}
		},
	}))
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))
	release := gate(t, p)
	var cRan atomic.Bool
	if err := q.Go(0, func() { cRan.Store(true) }); err != nil { // its step fills the queue
		t.Fatal(err)
	}
	aErr, bErr := make(chan error, 1), make(chan error, 1)
	go func() { aErr <- q.Go(10, func() {}) }()
	recvWithin(t, aRefused, "A's refusal")
	go func() { bErr <- q.Go(5, func() {}) }()
	recvWithin(t, bRefused, "B's refusal")
	release()
	p.Wait() // the first step ran the best task, A's
	close(aGo)
	if err := recvWithin(t, aErr, "A's Go"); err != nil {
		t.Fatalf("A's Go = %v, want nil: its task ran", err)
	}
	close(bGo)
	if err := recvWithin(t, bErr, "B's Go"); err != crew.ErrQueueFull {
		t.Fatalf("B's Go = %v, want ErrQueueFull", err)
	}
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	if !cRan.Load() {
		t.Fatal("the first task, accepted, never ran")
	}
}

// holdingFirstRefusal returns a pool of n workers with a non-blocking
// queue of one, whose Drop hook holds the first refused submission: it
// closes refused, then waits until resume is closed.
func holdingFirstRefusal(n int, opts ...crew.Option) (p *crew.Pool, refused, resume chan struct{}) {
	refused, resume = make(chan struct{}), make(chan struct{})
	var drops atomic.Int32
	hold := crew.WithHooks(crew.Hooks{Drop: func(crew.TaskEvent) {
		if drops.Add(1) == 1 {
			close(refused)
			<-resume
		}
	}})
	opts = append(opts, crew.WithQueueSize(1), crew.WithNonBlocking(), hold)
	return crew.New(n, opts...), refused, resume
}

// The step that a refused submission counts on to adopt its orphan runs a
// task that calls runtime.Goexit: the step still adopts it on the way out.
func TestPriorityGoexitStillAdoptsTheOrphan(t *testing.T) {
	leak.Check(t)
	p, refused, refusedGo := holdingFirstRefusal(1)
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))
	release := gate(t, p)
	var lowRan atomic.Bool
	if err := q.Go(0, func() { lowRan.Store(true) }); err != nil { // its step fills the queue
		t.Fatal(err)
	}
	highStarted, highGo := make(chan struct{}), make(chan struct{})
	goErr := make(chan error, 1)
	go func() {
		goErr <- q.Go(10, func() {
			close(highStarted)
			<-highGo
			runtime.Goexit()
		})
	}()
	recvWithin(t, refused, "the high task's refusal")
	release()
	recvWithin(t, highStarted, "the low task's step to run the high task")
	close(refusedGo)
	if err := recvWithin(t, goErr, "the high task's Go"); err != nil {
		t.Fatalf("high Go = %v, want nil: its task runs", err)
	}
	close(highGo)
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	if !lowRan.Load() {
		t.Fatal("the low task never ran")
	}
}

// A task that submits to a Priority on a full non-blocking pool, and finds
// its refused submission's task taken by another step, leaves the orphan
// to a step that waits for room on a goroutine of its own: it does not
// wait on its worker, the only one, for room that only it could free.
func TestPrioritySettleInsideATaskDoesNotWait(t *testing.T) {
	leak.Check(t)
	p, refused, refusedGo := holdingFirstRefusal(2, crew.WithIdleTimeout(time.Millisecond))
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))
	taskStarted, taskGo := make(chan struct{}), make(chan struct{})
	goErr := make(chan error, 1)
	highRan := make(chan struct{})
	p.Go(func() { // a plain task that submits to q
		close(taskStarted)
		<-taskGo
		goErr <- q.Go(10, func() { close(highRan) })
	})
	recvWithin(t, taskStarted, "the submitting task")
	release := gate(t, p) // the other worker
	var lowRan atomic.Bool
	if err := q.Go(0, func() { lowRan.Store(true) }); err != nil { // its step fills the queue
		t.Fatal(err)
	}
	close(taskGo)
	recvWithin(t, refused, "the task's submission to be refused")
	release()
	recvWithin(t, highRan, "the low task's step to run the high task")
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other worker to retire", func() bool { return p.Stats().Workers == 1 })
	if err := p.Go(func() {}); err != nil { // fills the queue again
		t.Fatal(err)
	}
	close(refusedGo)
	if err := recvWithin(t, goErr, "the task's Priority.Go"); err != nil {
		t.Fatalf("the task's Priority.Go = %v, want nil: its task ran", err)
	}
	within(t, schedDeadline, "Priority.Wait", q.Wait)
	if !lowRan.Load() {
		t.Fatal("the orphaned low task never ran")
	}
}

// Under strict priorities the lowest int is the lowest priority: its key
// must not overflow, or math.MinInt would run first.
func TestPriorityStrictMinIntRunsLast(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))
	release := gate(t, p)
	var mu sync.Mutex
	var order []int
	for _, prio := range []int{math.MinInt, 0, math.MaxInt} {
		if err := q.Go(prio, func() { mu.Lock(); order = append(order, prio); mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
	}
	release()
	q.Wait()
	if want := []int{math.MaxInt, 0, math.MinInt}; !slices.Equal(order, want) {
		t.Fatalf("start order %v, want %v", order, want)
	}
}
