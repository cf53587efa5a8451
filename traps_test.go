package crew_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Deadlock traps: things a program can do to a pool from inside its own
// tasks, or at the worst moment. Each must either work or end with a clear
// error; none may hang. The tests wait with deadlines (mustReturn,
// waitUntil), never with sleeps, and fail with a goroutine dump.
//
// Traps that hang are marked knownBug: they are skipped unless
// CREW_KNOWN_BUGS=1, because a hung pool cannot be cleaned up and would
// leak into the other tests. RELIABILITY.md lists them.

const trapDeadline = 5 * time.Second

// A task that submits to its own full pool, by each entry point that can
// refuse or give up.
func TestTrapTaskSubmitsToItsOwnFullPool(t *testing.T) {
	leak.Check(t)
	// One worker and no queue: while the task runs, the pool is full.
	run := func(t *testing.T, p *crew.Pool, inner func() error) error {
		t.Helper()
		got := make(chan error, 1)
		if err := p.Go(func() { got <- inner() }); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			return err
		case <-time.After(trapDeadline):
			t.Fatalf("a task submitting to its own full pool hung; goroutines:\n\n%s", leak.Dump())
			return nil
		}
	}
	t.Run("TryGo reports false", func(t *testing.T) {
		p := crew.New(1, crew.WithQueueSize(0))
		defer p.Stop()
		err := run(t, p, func() error {
			if p.TryGo(func() { t.Error("refused task ran") }) {
				return errors.New("TryGo accepted a task into a full pool")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("GoContext gives up with its context", func(t *testing.T) {
		p := crew.New(1, crew.WithQueueSize(0))
		defer p.Stop()
		err := run(t, p, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			return p.GoContext(ctx, func() { t.Error("refused task ran") })
		})
		if err != context.DeadlineExceeded {
			t.Fatalf("GoContext from inside a task on its full pool = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("WithNonBlocking returns ErrQueueFull", func(t *testing.T) {
		p := crew.New(1, crew.WithQueueSize(0), crew.WithNonBlocking())
		defer p.Stop()
		err := run(t, p, func() error {
			if err := p.Go(func() { t.Error("refused task ran") }); err != crew.ErrQueueFull {
				return err
			}
			return p.Submit(func(context.Context) error { return nil }).Wait()
		})
		if err != crew.ErrQueueFull {
			t.Fatalf("Submit from inside a task on its full non-blocking pool = %v, want ErrQueueFull", err)
		}
	})
	t.Run("a room in the queue is used", func(t *testing.T) {
		p := crew.New(1, crew.WithQueueSize(1))
		defer p.Stop()
		child := make(chan struct{})
		err := run(t, p, func() error { return p.Go(func() { close(child) }) })
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-child:
		case <-time.After(trapDeadline):
			t.Fatal("the child task never ran")
		}
	})
	t.Run("an unbounded queue never blocks", func(t *testing.T) {
		p := crew.New(1)
		defer p.Stop()
		var ran atomic.Int64
		err := run(t, p, func() error {
			for range 1000 {
				if err := p.Go(func() { ran.Add(1) }); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		mustReturn(t, trapDeadline, "Wait", p.Wait)
		if ran.Load() != 1000 {
			t.Fatalf("%d of 1000 children ran", ran.Load())
		}
	})
}

// Go and Submit wait for room in a bounded queue. From inside a task, room
// may come from the other workers, so they wait; but when every worker is
// a task waiting for room in its own pool, none would ever come, and they
// fail with ErrQueueFull instead.
func TestTrapTaskGoBlocksOnItsOwnFullPool(t *testing.T) {
	leak.Check(t)
	t.Run("every worker waiting: ErrQueueFull", func(t *testing.T) {
		p := crew.New(1, crew.WithQueueSize(0))
		defer p.Stop()
		got := make(chan error, 1)
		p.Go(func() { got <- p.Go(func() { t.Error("refused task ran") }) })
		select {
		case err := <-got:
			if !errors.Is(err, crew.ErrQueueFull) {
				t.Errorf("Go from inside a task on its own full pool = %v, want ErrQueueFull", err)
			}
		case <-time.After(trapDeadline):
			p.Stop() // closes the intake: the blocked Go returns ErrStopped
			t.Fatalf("Go from inside a task on its own full pool blocked for %v (it returned %v after Stop)", trapDeadline, <-got)
		}
	})
	t.Run("another worker frees room: the task is queued", func(t *testing.T) {
		p := crew.New(2, crew.WithQueueSize(0))
		defer p.Stop()
		release := make(chan struct{})
		p.Go(func() { <-release })
		got, child, submitting := make(chan error, 1), make(chan struct{}), make(chan struct{})
		p.Go(func() {
			close(submitting)
			got <- p.Submit(func(context.Context) error { close(child); return nil }).Wait()
		})
		// Both workers are busy and there is no queue: the inner Submit
		// must wait, not fail, while the other worker may still free room.
		<-submitting
		close(release)
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("Submit from inside a task, once room came = %v", err)
			}
		case <-time.After(trapDeadline):
			t.Fatal("Submit from inside a task did not get the room another worker freed")
		}
		<-child
	})
}

// insideTask runs f inside a task of p, Go or Submit, and reports whether
// the task ended within the deadline, with the panic it raised if any.
func insideTask(t *testing.T, p *crew.Pool, panics <-chan *crew.PanicError, f func()) (ended bool, pe *crew.PanicError) {
	t.Helper()
	done := make(chan struct{})
	if err := p.Go(func() { defer close(done); f() }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		select {
		case pe = <-panics:
		default:
		}
		return true, pe
	case <-time.After(trapDeadline):
		return false, nil
	}
}

// A task that calls Wait on its own pool would wait for itself: Wait
// panics with ErrInsideTask instead, and the pool goes on.
func TestTrapWaitInsideTask(t *testing.T) {
	leak.Check(t)
	panics := make(chan *crew.PanicError, 4)
	p := crew.New(2, crew.WithPanicHandler(func(pe *crew.PanicError) { panics <- pe }))
	ended, pe := insideTask(t, p, panics, func() {
		p.Wait()
		t.Error("Wait inside a task returned")
	})
	if !ended {
		t.Fatalf("Wait called from inside a task did not return within %v; goroutines:\n\n%s", trapDeadline, leak.Dump())
	}
	if pe == nil {
		// The task has ended; its panic reaches the handler just after.
		select {
		case pe = <-panics:
		case <-time.After(trapDeadline):
			t.Fatal("Wait inside a task neither blocked nor panicked")
		}
	}
	if !errors.Is(pe, crew.ErrInsideTask) || !strings.Contains(pe.Error(), "Wait") {
		t.Errorf("Wait inside a task panicked with %v, want an ErrInsideTask naming Wait", pe.Value)
	}
	// The pool still works, and Wait from outside still waits.
	var ran atomic.Bool
	p.Go(func() { ran.Store(true) })
	mustReturn(t, trapDeadline, "Wait from outside", p.Wait)
	if !ran.Load() {
		t.Error("Wait from outside returned before the task ran")
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

// A task that calls Stop on its own pool: the pool stops taking work, Stop
// returns without waiting for its caller, the queued tasks still run, and
// a Stop from outside waits for them.
func TestTrapStopInsideTask(t *testing.T) {
	leak.Check(t)
	panics := make(chan *crew.PanicError, 4)
	p := crew.New(2, crew.WithPanicHandler(func(pe *crew.PanicError) { panics <- pe }))
	var queuedRan atomic.Int64
	var after error
	ended, _ := insideTask(t, p, panics, func() {
		for range 10 {
			p.Go(func() { queuedRan.Add(1) })
		}
		p.Stop()
		after = p.Go(func() { t.Error("a task submitted after Stop ran") })
	})
	if !ended {
		t.Fatalf("Stop called from inside a task did not return within %v; goroutines:\n\n%s", trapDeadline, leak.Dump())
	}
	if after != crew.ErrStopped {
		t.Errorf("Go after Stop inside a task = %v, want ErrStopped", after)
	}
	mustReturn(t, trapDeadline, "Stop from outside", p.Stop)
	if n := queuedRan.Load(); n != 10 {
		t.Errorf("%d of the 10 tasks queued before Stop ran", n)
	}
	select {
	case pe := <-panics:
		t.Errorf("Stop inside a task panicked: %v", pe.Value)
	default:
	}
}

// A pool stopped only from inside one of its tasks leaves no goroutine
// behind once its queue is done: the workers of a stopped pool retire as
// they find it empty, and the idle timeout plays no part: they must not
// park and wait for the timeout or a Stop from outside.
func TestTrapStopInsideTaskLeavesNoWorker(t *testing.T) {
	leak.Check(t)
	p := crew.New(4, crew.WithIdleTimeout(time.Hour), crew.WithMinWorkers(2))
	var ran atomic.Int64
	err := p.Go(func() {
		for range 10 {
			p.Go(func() { ran.Add(1) })
		}
		p.Stop()
	})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, trapDeadline, "the stopped pool's workers to retire", func() bool {
		return ran.Load() == 10 && p.Stats().Workers == 0
	})
}

// A task that calls Shutdown on its own pool: Shutdown closes the pool and
// reports ErrInsideTask at once rather than wait for its caller, deadline
// or not; a Shutdown from outside then finishes the job.
func TestTrapShutdownInsideTask(t *testing.T) {
	leak.Check(t)
	panics := make(chan *crew.PanicError, 4)
	p := crew.New(2, crew.WithPanicHandler(func(pe *crew.PanicError) { panics <- pe }))
	var err error
	ended, _ := insideTask(t, p, panics, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = p.Shutdown(ctx)
	})
	if !ended {
		t.Fatalf("Shutdown called from inside a task did not return within %v; goroutines:\n\n%s", trapDeadline, leak.Dump())
	}
	if !errors.Is(err, crew.ErrInsideTask) {
		t.Errorf("Shutdown inside a task = %v, want ErrInsideTask", err)
	}
	if err := p.Go(func() {}); err != crew.ErrStopped {
		t.Errorf("Go after Shutdown inside a task = %v, want ErrStopped", err)
	}
	mustReturn(t, trapDeadline, "Shutdown from outside", func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown from outside = %v", err)
		}
	})
}

// layerOnPool is a layer made on a fresh pool for a trap test: its Go (with
// a key or priority of its choice) and Wait, and the name its Wait's panic
// must carry.
type layerOnPool struct {
	test, name string
	make       func(p *crew.Pool) (goFn func(func()) error, wait func())
}

// layersOnPool are the layers whose Wait must recognise its own tasks,
// alone and stacked (a Keyed's tasks are its RateLimited's tasks too).
func layersOnPool() []layerOnPool {
	rate := crew.Rate{Limit: 1_000_000, Per: time.Second, Burst: 1_000}
	return []layerOnPool{
		{"Keyed", "Keyed.Wait", func(p *crew.Pool) (func(func()) error, func()) {
			k := crew.NewKeyed[string](p)
			return func(f func()) error { return k.Go("a", f) }, k.Wait
		}},
		{"Priority", "Priority.Wait", func(p *crew.Pool) (func(func()) error, func()) {
			q := crew.NewPriority(p)
			return func(f func()) error { return q.Go(0, f) }, q.Wait
		}},
		{"RateLimited", "RateLimited.Wait", func(p *crew.Pool) (func(func()) error, func()) {
			r := crew.NewRateLimited(p, rate)
			return r.Go, r.Wait
		}},
		{"KeyedOnRateLimited", "Keyed.Wait", func(p *crew.Pool) (func(func()) error, func()) {
			k := crew.NewKeyed[string](crew.NewRateLimited(p, rate))
			return func(f func()) error { return k.Go("a", f) }, k.Wait
		}},
		{"RateLimitedUnderKeyed", "RateLimited.Wait", func(p *crew.Pool) (func(func()) error, func()) {
			r := crew.NewRateLimited(p, rate)
			k := crew.NewKeyed[string](r)
			return func(f func()) error { return k.Go("a", f) }, r.Wait
		}},
	}
}

// A task of a Keyed, Priority or RateLimited that calls that layer's Wait
// would wait for itself: Wait panics with an error wrapping ErrInsideTask
// that names it, and the layer goes on.
func TestTrapLayerWaitInsideOwnTask(t *testing.T) {
	leak.Check(t)
	for _, c := range layersOnPool() {
		t.Run(c.test, func(t *testing.T) { testLayerWaitInsideOwnTask(t, c) })
	}
}

// testLayerWaitInsideOwnTask has a task of c's layer call c's Wait, and
// recovers the panic inside the task.
func testLayerWaitInsideOwnTask(t *testing.T, c layerOnPool) {
	p := crew.New(4)
	goFn, wait := c.make(p)
	got := make(chan any, 1) // what the task's Wait panicked with
	err := goFn(func() {
		defer func() { got <- recover() }()
		wait()
		t.Errorf("%s inside one of its own tasks returned", c.name)
	})
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if !mustReturn(t, trapDeadline, c.name+" from inside one of its own tasks", func() { v = <-got }) {
		t.FailNow()
	}
	if err, _ := v.(error); !errors.Is(err, crew.ErrInsideTask) || !strings.Contains(err.Error(), c.name) {
		t.Errorf("%s inside one of its own tasks panicked with %v, want an ErrInsideTask naming %s", c.name, v, c.name)
	}
	// The layer still works, and Wait from outside still waits.
	var ran atomic.Bool
	if err := goFn(func() { ran.Store(true) }); err != nil {
		t.Fatal(err)
	}
	mustReturn(t, trapDeadline, c.name+" from outside", wait)
	if !ran.Load() {
		t.Errorf("%s from outside returned before the task ran", c.name)
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

// A layer's Wait from a task that is not one of the layer's own is
// legitimate, though the task runs on the same pool: a plain task, or a
// task of another layer, waits until the layer is idle, without a panic.
func TestTrapLayerWaitFromAnotherTask(t *testing.T) {
	leak.Check(t)
	t.Run("PlainTask", func(t *testing.T) {
		testLayerWaitFromAnotherTask(t, func(p *crew.Pool) func(func()) error { return p.Go })
	})
	t.Run("TaskOfAnotherKeyed", func(t *testing.T) {
		testLayerWaitFromAnotherTask(t, func(p *crew.Pool) func(func()) error {
			a := crew.NewKeyed[int](p)
			return func(f func()) error { return a.Go(1, f) }
		})
	})
}

// testLayerWaitFromAnotherTask makes a Keyed b with a task that runs until
// released, and has a task submitted by the Go that goFn returns wait for b.
func testLayerWaitFromAnotherTask(t *testing.T, goFn func(p *crew.Pool) func(func()) error) {
	p := crew.New(4)
	b := crew.NewKeyed[string](p)
	release := make(chan struct{})
	var finished atomic.Bool
	if err := b.Go("b", func() { <-release; finished.Store(true) }); err != nil {
		t.Fatal(err)
	}
	got := make(chan any, 1) // whether b's task had finished when Wait returned, or Wait's panic
	err := goFn(p)(func() {
		defer func() {
			if v := recover(); v != nil {
				got <- v
			}
		}()
		b.Wait()
		got <- finished.Load()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Let the waiter take the path that blocks (b has a task), where it
	// looks at its stack, before b's task finishes; or panic.
	waitUntil(t, trapDeadline, "the task to wait for the Keyed", func() bool {
		return len(got) > 0 || strings.Contains(leak.Dump(), "crew.(*layer).wait(")
	})
	close(release)
	var v any
	if !mustReturn(t, trapDeadline, "Keyed.Wait from another task", func() { v = <-got }) {
		t.FailNow()
	}
	if v != true {
		t.Errorf("Keyed.Wait from another task: %v, want it to return once the Keyed's task finished", v)
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

// fullPool returns a pool with one worker and a queue of one, both held by
// tasks that run until release is closed.
func fullPool(t *testing.T, opts ...crew.Option) (p *crew.Pool, release chan struct{}) {
	t.Helper()
	p = crew.New(1, append([]crew.Option{crew.WithQueueSize(1)}, opts...)...)
	release = make(chan struct{})
	started := make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started
	if !p.TryGo(func() { <-release }) {
		t.Fatal("could not fill the queue")
	}
	if p.TryGo(func() {}) {
		t.Fatal("the pool is not full")
	}
	return p, release
}

// Producers blocked in GoContext on a full queue all return when their
// context is cancelled, and none of their tasks runs.
func TestTrapContextCancelledWhileProducersBlocked(t *testing.T) {
	leak.Check(t)
	p, release := fullPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	const producers = 100
	var wg sync.WaitGroup
	var ran atomic.Int64
	errs := make(chan error, producers)
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- p.GoContext(ctx, func() { ran.Add(1) })
		}()
	}
	waitUntil(t, trapDeadline, "the producers to block", func() bool {
		return len(errs) == 0 && p.Stats().Submitted == 2
	})
	cancel()
	mustReturn(t, trapDeadline, "producers blocked in GoContext after cancel", wg.Wait)
	for range producers {
		if err := <-errs; err != context.Canceled {
			t.Fatalf("blocked GoContext after cancel = %v, want context.Canceled", err)
		}
	}
	close(release)
	mustReturn(t, trapDeadline, "Stop", p.Stop)
	if ran.Load() != 0 {
		t.Fatalf("%d tasks whose GoContext was cancelled ran", ran.Load())
	}
	if s := p.Stats(); s.Submitted != 2 || s.Completed != 2 {
		t.Fatalf("stats = %+v, want only the two tasks that filled the pool", s)
	}
}

// Some producers blocked with a context that ends, others with one that
// does not: cancelling the first kind must not lose the wake-up that the
// second kind is waiting for, and every accepted task runs.
func TestTrapCancelMixedWithWaitingProducers(t *testing.T) {
	leak.Check(t)
	p, release := fullPool(t)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var accepted, ran atomic.Int64
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := context.Background()
			if i%2 == 0 {
				c = ctx
			}
			if p.GoContext(c, func() { ran.Add(1) }) == nil {
				accepted.Add(1)
			}
		}()
	}
	waitUntil(t, trapDeadline, "the producers to block", func() bool { return accepted.Load() == 0 && p.Stats().Submitted == 2 })
	cancel()
	close(release)
	mustReturn(t, trapDeadline, "the producers", wg.Wait)
	mustReturn(t, trapDeadline, "Wait", p.Wait)
	if accepted.Load() < 32 || ran.Load() != accepted.Load() {
		t.Fatalf("accepted %d (the 32 without a deadline at least), ran %d", accepted.Load(), ran.Load())
	}
}

// The pool's own context (WithContext) being cancelled does not stop the
// pool: blocked producers keep waiting for room and get it.
func TestTrapPoolContextCancelledWhileProducersBlocked(t *testing.T) {
	leak.Check(t)
	parent, cancel := context.WithCancel(context.Background())
	p, release := fullPool(t, crew.WithContext(parent))
	var wg sync.WaitGroup
	var ran atomic.Int64
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- p.Go(func() { ran.Add(1) })
		}()
	}
	waitUntil(t, trapDeadline, "the producers to block", func() bool { return len(errs) == 0 && p.Stats().Submitted == 2 })
	cancel()
	if err := p.Context().Err(); err != context.Canceled {
		t.Fatalf("pool context after its parent was cancelled: %v", err)
	}
	close(release)
	mustReturn(t, trapDeadline, "producers blocked in Go", wg.Wait)
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatalf("blocked Go = %v, want nil: a cancelled parent does not stop the pool", err)
		}
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
	if ran.Load() != 20 {
		t.Fatalf("%d of 20 tasks ran", ran.Load())
	}
}

// Shutdown with an expired deadline while producers are blocked on a full
// queue: every blocked producer returns ErrStopped, the queued task is
// dropped and counted, the running one sees its context cancelled.
func TestTrapShutdownWhileProducersBlocked(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(1))
	started := make(chan struct{})
	running := p.Submit(func(ctx context.Context) error { close(started); <-ctx.Done(); return ctx.Err() })
	<-started
	queued := p.Submit(func(context.Context) error { return errors.New("a dropped task ran") })
	var wg sync.WaitGroup
	errs := make(chan error, 60)
	kinds := 2 // Go, GoContext
	if submitRacesShutdown() {
		kinds = 3 // and Submit
	}
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch i % kinds {
			case 0:
				errs <- p.Go(func() { t.Error("a refused task ran") })
			case 1:
				errs <- p.GoContext(context.Background(), func() { t.Error("a refused task ran") })
			default:
				errs <- p.Submit(func(context.Context) error { return errors.New("a refused task ran") }).Wait()
			}
		}()
	}
	waitUntil(t, trapDeadline, "the producers to block", func() bool { return len(errs) == 0 && p.Stats().Submitted == 2 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	mustReturn(t, trapDeadline, "Shutdown", func() { err = p.Shutdown(ctx) })
	var se *crew.ShutdownError
	if !errors.As(err, &se) || se.Dropped != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want a ShutdownError with 1 dropped", err)
	}
	mustReturn(t, trapDeadline, "blocked producers", wg.Wait)
	for range 60 {
		if err := <-errs; err != crew.ErrStopped {
			t.Fatalf("a producer blocked during Shutdown got %v, want ErrStopped", err)
		}
	}
	if err := running.Wait(); err != context.Canceled {
		t.Fatalf("running task = %v, want its context cancelled", err)
	}
	if err := queued.Wait(); err != crew.ErrDropped {
		t.Fatalf("queued task = %v, want ErrDropped", err)
	}
}

// Every worker panics at once while a backlog of tiny tasks, some of which
// panic too, is queued behind them: each panic is reported once, every
// other task runs exactly once, and the pool keeps working.
// TestPanicInEveryWorkerAtOnce (pool_test.go) covers the simple case.
func TestTrapPanicInEveryWorkerWithBacklog(t *testing.T) {
	leak.Check(t)
	const workers = 8
	var panics atomic.Int64
	p := crew.New(workers, crew.WithPanicHandler(func(*crew.PanicError) { panics.Add(1) }))
	// The panicking tasks start first, one on each worker, the backlog
	// is queued behind them, then they all panic.
	var started sync.WaitGroup
	started.Add(workers)
	release := make(chan struct{})
	for range workers {
		p.Go(func() { started.Done(); <-release; panic("all at once") })
	}
	mustReturn(t, trapDeadline, "every worker to start", started.Wait)
	const tiny = 20000
	runs := make([]atomic.Int32, tiny)
	var tasks []*crew.Task
	for i := range tiny {
		switch {
		case i%1000 == 999:
			p.Go(func() { runs[i].Add(1); panic("in the backlog") })
		case i%1000 == 500:
			tasks = append(tasks, p.Submit(func(context.Context) error { runs[i].Add(1); panic(i) }))
		default:
			p.Go(func() { runs[i].Add(1) })
		}
	}
	close(release)
	mustReturn(t, trapDeadline, "Wait", p.Wait)
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("task %d ran %d times", i, n)
		}
	}
	for _, task := range tasks {
		var pe *crew.PanicError
		if err := task.Wait(); !errors.As(err, &pe) {
			t.Fatalf("a panicking Submit task = %v", err)
		}
	}
	if want := int64(workers + tiny/1000); panics.Load() != want {
		t.Fatalf("handler saw %d panics, want %d", panics.Load(), want)
	}
	if s := p.Stats(); s.Panicked != uint64(workers+2*tiny/1000) || s.Completed != uint64(workers+tiny) {
		t.Fatalf("stats = %+v", s)
	}
	done := make(chan struct{})
	p.Go(func() { close(done) })
	mustReturn(t, trapDeadline, "a task after the panics", func() { <-done })
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

// Every Submit task panics at once: each Task reports its own panic.
func TestTrapSubmitPanicsInEveryWorkerAtOnce(t *testing.T) {
	leak.Check(t)
	const workers = 8
	p := crew.New(workers, crew.WithPanicHandler(func(*crew.PanicError) { t.Error("handler called for a Submit task") }))
	var gate sync.WaitGroup
	gate.Add(workers)
	var tasks []*crew.Task
	for i := range workers {
		tasks = append(tasks, p.Submit(func(context.Context) error { gate.Done(); gate.Wait(); panic(i) }))
	}
	for i, task := range tasks {
		var err error
		mustReturn(t, trapDeadline, "Task.Wait", func() { err = task.Wait() })
		var pe *crew.PanicError
		if !errors.As(err, &pe) || pe.Value != i {
			t.Fatalf("task %d = %v, want its own panic", i, err)
		}
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
	if s := p.Stats(); s.Panicked != workers || s.Failed != workers {
		t.Fatalf("stats = %+v", s)
	}
}

// Every worker calls runtime.Goexit at once, with a backlog queued behind
// them: each worker is replaced, the limit still holds, every other task
// runs exactly once and Stop returns. TestGoexitDoesNotWedgeThePool
// (pool_test.go) covers the simple case.
func TestTrapGoexitInEveryWorkerAtOnce(t *testing.T) {
	leak.Check(t)
	const workers = 4
	p := crew.New(workers)
	var running, peak atomic.Int64
	track := func() func() {
		raisePeak(&peak, running.Add(1))
		return func() { running.Add(-1) }
	}
	var started sync.WaitGroup
	started.Add(workers)
	release := make(chan struct{})
	for range workers {
		p.Go(func() { defer track()(); started.Done(); <-release; runtime.Goexit() })
	}
	mustReturn(t, trapDeadline, "every worker to start", started.Wait)
	const tiny = 20000
	runs := make([]atomic.Int32, tiny)
	var exits []*crew.Task
	for i := range tiny {
		switch {
		case i%500 == 499:
			p.Go(func() { defer track()(); runs[i].Add(1); runtime.Goexit() })
		case i%500 == 250:
			exits = append(exits, p.Submit(func(context.Context) error { defer track()(); runs[i].Add(1); runtime.Goexit(); return nil }))
		default:
			p.Go(func() { defer track()(); runs[i].Add(1) })
		}
	}
	close(release)
	mustReturn(t, trapDeadline, "Wait after Goexit in every worker", p.Wait)
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("task %d ran %d times", i, n)
		}
	}
	for _, task := range exits {
		if err := task.Wait(); err != crew.ErrGoexit {
			t.Fatalf("Submit task that called Goexit = %v, want ErrGoexit", err)
		}
	}
	if peak.Load() > workers {
		t.Fatalf("%d tasks ran at once with a limit of %d", peak.Load(), workers)
	}
	if s := p.Stats(); s.Workers > workers || s.Completed != uint64(workers+tiny) {
		t.Fatalf("stats = %+v", s)
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

// Goexit in tasks while Shutdown drops the queue: each task is run once or
// dropped, never both, never lost, and Shutdown returns.
func TestTrapGoexitDuringShutdown(t *testing.T) {
	leak.Check(t)
	for round := range 20 {
		p := crew.New(4)
		const n = 5000
		runs := make([]atomic.Int32, n)
		for i := range n {
			if i%7 == 0 {
				p.Go(func() { runs[i].Add(1); runtime.Goexit() })
			} else {
				p.Go(func() { runs[i].Add(1) })
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		if round%2 == 0 {
			cancel()
		}
		var err error
		mustReturn(t, trapDeadline, "Shutdown", func() { err = p.Shutdown(ctx) })
		cancel()
		dropped := 0
		var se *crew.ShutdownError
		if errors.As(err, &se) {
			dropped = se.Dropped
		} else if err != nil {
			t.Fatal(err)
		}
		ran := 0
		for i := range runs {
			switch runs[i].Load() {
			case 0:
			case 1:
				ran++
			default:
				t.Fatalf("task %d ran %d times", i, runs[i].Load())
			}
		}
		if ran+dropped != n {
			t.Fatalf("round %d: %d tasks, %d ran, %d dropped", round, n, ran, dropped)
		}
	}
}

// runtime.Goexit just after Resize shrank the pool, with the other worker
// parked: the exiting worker hands its slot over, but no new worker may
// start beyond the limit, so the parked one must be woken for new work.
// A task handed back to the queue with no worker allowed to start and none
// woken would be stranded, and Wait would hang.
func TestTrapGoexitAfterShrink(t *testing.T) {
	leak.Check(t)
	for range 20 {
		p := crew.New(2, crew.WithIdleTimeout(time.Minute))
		var ran atomic.Int64
		exit := make(chan struct{})
		exiting := make(chan struct{})
		p.Go(func() { close(exiting); <-exit; runtime.Goexit() })
		<-exiting
		const before, after = 2000, 100
		for range before {
			p.Go(func() { ran.Add(1) })
		}
		// The other worker runs the backlog and parks.
		waitUntil(t, trapDeadline, "the backlog to run and a worker to park", func() bool {
			return ran.Load() == before && p.Stats().Idle == 1
		})
		p.Resize(1)
		close(exit)
		for range after {
			p.Go(func() { ran.Add(1) })
		}
		if !mustReturn(t, trapDeadline, "Wait after a Goexit", p.Wait) {
			t.Fatalf("tasks never run after the Goexit; stats %+v", p.Stats())
		}
		mustReturn(t, trapDeadline, "Stop", p.Stop)
		if ran.Load() != before+after {
			t.Fatalf("%d of %d tasks ran", ran.Load(), before+after)
		}
	}
}

// Stop straight after a burst, while workers go idle (a short idle timeout
// makes them park and retire often): every queued task must run. A
// worker's last look before it parks must not skip a shard whose lock is
// busy: when Close holds it (Stop's first step), the worker would park or
// retire without the tasks in it, nobody would be left to wake, and Stop
// would hang with tasks queued and no worker.
// TestEngineParkLooksAtBusyShards in internal/engine checks the mechanism
// deterministically.
func TestTrapStopWhileWorkersPark(t *testing.T) {
	leak.Check(t)
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		p := crew.New(15, crew.WithIdleTimeout(16*time.Microsecond))
		var ran atomic.Int64
		const n = 1468
		for j := range n {
			p.Go(func() { ran.Add(1) })
			if j%300 == 0 {
				time.Sleep(time.Duration(j%7) * 20 * time.Microsecond)
			}
		}
		if !returnsWithin(trapDeadline, p.Stop) {
			t.Fatalf("pool %d: Stop hung with %d of %d tasks run; stats %+v", i, ran.Load(), n, p.Stats())
		}
		if ran.Load() != n {
			t.Fatalf("pool %d: %d of %d tasks ran", i, ran.Load(), n)
		}
	}
}

// Submit racing with Shutdown: each Task completes exactly once, with
// ErrStopped (refused), ErrDropped (accepted and dropped) or its result.
// A Submit blocked for room when Shutdown drops the queued Submit tasks
// must not be completed twice, which would panic with "close of closed
// channel" and crash the program.
func TestSubmitRacingShutdownCompletesEachTaskOnce(t *testing.T) {
	leak.Check(t)
	for range 50 {
		p := crew.New(1, crew.WithQueueSize(0))
		started := make(chan struct{})
		p.Submit(func(ctx context.Context) error { close(started); <-ctx.Done(); return nil })
		<-started
		const producers = 100
		tasks := make(chan *crew.Task, producers)
		var wg sync.WaitGroup
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tasks <- p.Submit(func(context.Context) error { return nil })
			}()
		}
		waitUntil(t, trapDeadline, "the producers to block", func() bool { return p.Stats().Submitted == 1 })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := p.Shutdown(ctx)
		wg.Wait()
		close(tasks)
		dropped := 0
		for task := range tasks {
			switch err := task.Wait(); err {
			case crew.ErrStopped:
			case crew.ErrDropped:
				dropped++
			default:
				t.Fatalf("a Submit racing Shutdown = %v", err)
			}
		}
		var se *crew.ShutdownError
		if errors.As(err, &se) && se.Dropped != dropped {
			t.Fatalf("%d Submit tasks report ErrDropped, Shutdown says %d dropped", dropped, se.Dropped)
		}
	}
}

// Tasks that wait for each other (a barrier, a channel between a producer
// task and a consumer task) in a pool whose limit is large enough for all of
// them at once, behind and among a flood of tiny tasks. A worker takes one
// task at a time: were it to take tiny tasks in batches, a task that
// blocked would hold the rest of its worker's batch hostage though the pool
// was below its limit, and if the task it waited for was among them, the
// pool would deadlock with free worker slots.
func TestTrapRendezvousTasks(t *testing.T) {
	leak.Check(t)
	for range 30 {
		const workers = 8
		p := crew.New(workers)
		var gate sync.WaitGroup
		gate.Add(workers)
		var waiting atomic.Int64
		for range workers {
			p.Go(func() { waiting.Add(1); gate.Done(); gate.Wait(); waiting.Add(-1) })
		}
		for range 20000 {
			p.Go(func() {})
		}
		if !returnsWithin(trapDeadline, p.Wait) {
			t.Fatalf("%d of %d tasks wait at the barrier for the others, which never start; stats %+v", waiting.Load(), workers, p.Stats())
		}
		mustReturn(t, trapDeadline, "Stop", p.Stop)
	}
}
