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

func TestGoRunsEveryTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	var n atomic.Int64
	const tasks = 20000
	for range tasks {
		if err := p.Go(func() { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	p.Stop()
	if got := n.Load(); got != tasks {
		t.Fatalf("ran %d tasks, want %d", got, tasks)
	}
	s := p.Stats()
	if s.Submitted != tasks || s.Completed != tasks || s.Workers != 0 {
		t.Fatalf("stats after Stop = %+v", s)
	}
}

func TestWorkerLimitIsNeverExceeded(t *testing.T) {
	leak.Check(t)
	const limit = 3
	p := crew.New(limit)
	var running, peak atomic.Int64
	release := make(chan struct{})
	for range 50 {
		p.Go(func() {
			n := running.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			running.Add(-1)
		})
	}
	eventually(t, "the limit to fill", func() bool { return running.Load() == limit })
	close(release)
	p.Stop()
	if peak.Load() != limit {
		t.Fatalf("peak concurrency %d, want %d", peak.Load(), limit)
	}
}

func TestSubmitReturnsTheTaskError(t *testing.T) {
	leak.Check(t)
	type key struct{}
	p := crew.New(2, crew.WithContext(context.WithValue(context.Background(), key{}, "v")))
	defer p.Stop()
	boom := errors.New("boom")
	task := p.Submit(func(ctx context.Context) error {
		if ctx.Value(key{}) != "v" || ctx.Err() != nil {
			return errors.New("task did not get a live context derived from the pool's")
		}
		return boom
	})
	if err := task.Wait(); err != boom {
		t.Fatalf("Wait() = %v, want %v", err, boom)
	}
	select {
	case <-task.Done():
	default:
		t.Fatal("Done not closed after Wait returned")
	}
	if ok := p.Submit(func(context.Context) error { return nil }).Wait(); ok != nil {
		t.Fatalf("Wait() = %v, want nil", ok)
	}
	eventually(t, "failed count", func() bool { return p.Stats().Failed == 1 })
}

func TestSubmissionAfterStopIsRefused(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	p.Stop()
	task := func() { t.Error("task ran after Stop") }
	if err := p.Go(task); err != crew.ErrStopped {
		t.Errorf("Go = %v, want ErrStopped", err)
	}
	if err := p.Submit(func(context.Context) error { task(); return nil }).Wait(); err != crew.ErrStopped {
		t.Errorf("Submit = %v, want ErrStopped", err)
	}
	if err := p.GoContext(context.Background(), task); err != crew.ErrStopped {
		t.Errorf("GoContext = %v, want ErrStopped", err)
	}
	if p.TryGo(task) {
		t.Error("TryGo accepted a task after Stop")
	}
	p.Stop() // idempotent
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Stop = %v", err)
	}
}

func TestBadInput(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	if err := p.Go(nil); err != crew.ErrNilTask {
		t.Errorf("Go(nil) = %v", err)
	}
	if err := p.Submit(nil).Wait(); err != crew.ErrNilTask {
		t.Errorf("Submit(nil) = %v", err)
	}
	if err := p.GoContext(context.Background(), nil); err != crew.ErrNilTask {
		t.Errorf("GoContext(nil) = %v", err)
	}
	if p.TryGo(nil) {
		t.Error("TryGo(nil) = true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.GoContext(ctx, func() { t.Error("ran with a cancelled context") }); err != context.Canceled {
		t.Errorf("GoContext(cancelled) = %v", err)
	}
	for _, n := range []int{0, -1} {
		if err := p.Resize(n); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Resize(%d) = %v, want ErrInvalid", n, err)
		}
	}
}

func TestNewPanicsOnInvalidConfiguration(t *testing.T) {
	cases := map[string]func(){
		"zero workers":         func() { crew.New(0) },
		"negative workers":     func() { crew.New(-5) },
		"negative queue":       func() { crew.New(1, crew.WithQueueSize(-1)) },
		"min above max":        func() { crew.New(2, crew.WithMinWorkers(3)) },
		"negative min":         func() { crew.New(2, crew.WithMinWorkers(-1)) },
		"zero idle timeout":    func() { crew.New(2, crew.WithIdleTimeout(0)) },
		"nil panic handler":    func() { crew.New(2, crew.WithPanicHandler(nil)) },
		"nil context":          func() { crew.New(2, crew.WithContext(nil)) }, //nolint:staticcheck // testing the check
		"non-blocking no size": func() { crew.New(2, crew.WithNonBlocking()) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, crew.ErrInvalid) {
					t.Fatalf("panic value %v, want an error wrapping ErrInvalid", err)
				}
			}()
			f()
		})
	}
}

func TestZeroPoolReportsAnError(t *testing.T) {
	var p crew.Pool
	if err := p.Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Go = %v", err)
	}
	if err := p.Submit(func(context.Context) error { return nil }).Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Submit = %v", err)
	}
	if err := p.GoContext(context.Background(), func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("GoContext = %v", err)
	}
	if p.TryGo(func() {}) {
		t.Error("TryGo = true")
	}
	if err := p.Resize(2); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Resize = %v", err)
	}
	if err := p.Shutdown(context.Background()); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Shutdown = %v", err)
	}
	p.Wait()
	p.Stop()
	if p.Context() == nil || p.Stats() != (crew.Stats{}) {
		t.Error("zero pool's Context or Stats")
	}
}

func TestBoundedQueue(t *testing.T) {
	leak.Check(t)
	release := make(chan struct{})
	block := func() { <-release }
	p := crew.New(1, crew.WithQueueSize(2))
	defer p.Stop()
	// One running, two queued: full.
	for range 3 {
		if !p.TryGo(block) {
			t.Fatal("TryGo refused a task with room")
		}
	}
	if p.TryGo(block) {
		t.Fatal("TryGo accepted a task beyond the queue size")
	}
	// GoContext waits, then gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.GoContext(ctx, block); err != context.DeadlineExceeded {
		t.Fatalf("GoContext on a full queue = %v, want DeadlineExceeded", err)
	}
	// Go waits for room and gets it once a task finishes.
	accepted := make(chan error)
	go func() { accepted <- p.Go(func() {}) }()
	select {
	case err := <-accepted:
		t.Fatalf("Go returned %v on a full queue", err)
	case <-time.After(10 * time.Millisecond):
	}
	close(release)
	if err := <-accepted; err != nil {
		t.Fatalf("Go after room appeared = %v", err)
	}
}

func TestBlockedSubmittersGetErrStoppedOnStop(t *testing.T) {
	leak.Check(t)
	release := make(chan struct{})
	p := crew.New(1, crew.WithQueueSize(0))
	p.Go(func() { <-release })
	errs := make(chan error, 10)
	for range 10 {
		go func() { errs <- p.Go(func() {}) }()
	}
	eventually(t, "submitters to block", func() bool { return len(errs) == 0 && p.Stats().Running == 1 })
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	eventually(t, "blocked submitters to return", func() bool { return len(errs) == 10 })
	for range 10 {
		if err := <-errs; err != crew.ErrStopped {
			t.Fatalf("blocked Go = %v, want ErrStopped", err)
		}
	}
	close(release)
	<-stopped
}

func TestNonBlockingReturnsErrQueueFull(t *testing.T) {
	leak.Check(t)
	release := make(chan struct{})
	p := crew.New(1, crew.WithQueueSize(0), crew.WithNonBlocking())
	defer p.Stop()
	defer close(release)
	if err := p.Go(func() { <-release }); err != nil {
		t.Fatal(err)
	}
	if err := p.Go(func() {}); err != crew.ErrQueueFull {
		t.Fatalf("Go = %v, want ErrQueueFull", err)
	}
	if err := p.Submit(func(context.Context) error { return nil }).Wait(); err != crew.ErrQueueFull {
		t.Fatalf("Submit = %v, want ErrQueueFull", err)
	}
}

func TestWaitDoesNotStopThePool(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	var n atomic.Int64
	for round := 1; round <= 3; round++ {
		for range 1000 {
			p.Go(func() { n.Add(1) })
		}
		p.Wait()
		if got := n.Load(); got != int64(round*1000) {
			t.Fatalf("after Wait in round %d: %d tasks ran", round, got)
		}
	}
	p.Wait() // idle: returns at once
}

func TestShutdownDropsQueuedTasksAndCountsThem(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	started := make(chan struct{})
	var ran atomic.Int64
	blocker := p.Submit(func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // released only by Shutdown's cancellation
		return ctx.Err()
	})
	<-started
	const queued = 100
	var tasks []*crew.Task
	for i := range queued {
		if i%2 == 0 {
			p.Go(func() { ran.Add(1) })
		} else {
			tasks = append(tasks, p.Submit(func(context.Context) error { ran.Add(1); return nil }))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := p.Shutdown(ctx)
	var se *crew.ShutdownError
	if !errors.As(err, &se) || se.Dropped != queued || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want ShutdownError with %d dropped", err, queued)
	}
	if ran.Load() != 0 {
		t.Fatalf("%d dropped tasks ran", ran.Load())
	}
	if err := blocker.Wait(); err != context.Canceled {
		t.Fatalf("running task saw %v, want its context cancelled", err)
	}
	for _, task := range tasks {
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("dropped task's Wait = %v", err)
		}
	}
	if s := p.Stats(); s.Dropped != queued || s.Workers != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A running task that waits for a Task that Shutdown dropped sees it
// dropped once its deadline has passed: Shutdown completes the dropped
// Tasks before it waits for the running ones. Completing them only after
// would let a parent waiting for its child hold Shutdown for ever.
func TestShutdownCompletesDroppedTasksBeforeWaitingForRunningOnes(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	started := make(chan struct{})
	childErr := make(chan error, 1)
	parent := p.Submit(func(context.Context) error {
		child := p.Submit(func(context.Context) error { return nil }) // queued behind its parent
		close(started)
		<-child.Done() // holds the only worker (a Wait would lend it), ignoring its own context
		childErr <- child.Wait()
		return nil
	})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- p.Shutdown(ctx) }()
	if err := recvWithin(t, childErr, "the child's Wait"); err != crew.ErrDropped {
		t.Errorf("child's Wait = %v, want ErrDropped", err)
	}
	var se *crew.ShutdownError
	if err := recvWithin(t, shutdown, "Shutdown"); !errors.As(err, &se) || se.Dropped != 1 {
		t.Errorf("Shutdown = %v, want a ShutdownError with 1 dropped", err)
	}
	if err := parent.Wait(); err != nil {
		t.Errorf("parent's Wait = %v", err)
	}
}

// The same with the dropped Task's Submit still returning as Shutdown
// drops: its push done (the task drained) but not yet marked accepted.
// Each trial races a Submit against an expired Shutdown while a running
// task waits for the Task. Such a Task must be completed before the wait
// too, or Shutdown hangs; the window is narrow, so the test repeats
// trials for 3 s.
func TestShutdownCompletesATaskWhoseSubmitIsReturning(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for deadline, trial := time.Now().Add(3*time.Second), 0; time.Now().Before(deadline); trial++ {
		p := crew.New(2)
		submitted := make(chan *crew.Task, 1)
		abort := make(chan struct{})
		running := make(chan struct{})
		p.Go(func() {
			close(running)
			select { // ignores its context
			case <-(<-submitted).Done():
			case <-abort:
			}
		})
		<-running
		start := make(chan struct{})
		shutdown := make(chan error, 1)
		go func() {
			<-start
			submitted <- p.Submit(func(context.Context) error { return nil })
		}()
		go func() {
			<-start
			for range trial % 400 {
				runtime.Gosched()
			}
			shutdown <- p.Shutdown(ctx)
		}()
		close(start)
		select {
		case <-shutdown:
		case <-time.After(schedDeadline):
			close(abort)
			<-shutdown
			t.Fatalf("trial %d: Shutdown hung on a running task waiting for a Task it dropped", trial)
		}
	}
}

// A Stop racing an expired Shutdown returns only once the Tasks that the
// Shutdown dropped are complete: the drain counts them as dropped at once,
// so the pool goes quiet while they are still being completed, and Stop
// must not return on that alone with most dropped Tasks not yet done.
func TestStopRacingShutdownWaitsForTheDroppedTasks(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := crew.New(1)
	release := make(chan struct{})
	running := make(chan struct{})
	p.Go(func() { close(running); <-release })
	<-running
	tasks := make([]*crew.Task, 0, scaled(100_000, 4))
	for range cap(tasks) {
		tasks = append(tasks, p.Submit(func(context.Context) error { return nil }))
	}
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	waitUntil(t, trapDeadline, "Stop to close the pool", func() bool { return !p.TryGo(func() {}) })
	shutdown := make(chan error, 1)
	go func() { shutdown <- p.Shutdown(ctx) }()
	waitUntil(t, trapDeadline, "Shutdown's drain", func() bool { return p.Stats().Queued == 0 })
	close(release)
	recvWithin(t, stopped, "Stop")
	pending := notDone(tasks)
	recvWithin(t, shutdown, "Shutdown")
	if pending > 0 {
		t.Fatalf("Stop returned with %d of %d dropped Tasks not complete", pending, len(tasks))
	}
}

func TestShutdownRunsEverythingWhenThereIsTime(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	var ran atomic.Int64
	for range 1000 {
		p.Go(func() { ran.Add(1) })
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1000 {
		t.Fatalf("ran %d", ran.Load())
	}
	if p.Context().Err() == nil {
		t.Fatal("pool context not cancelled after Shutdown")
	}
}

// Shutdown racing with a flood of producers: every accepted task runs
// exactly once or is counted as dropped.
func TestShutdownAccountsForEveryAcceptedTask(t *testing.T) {
	leak.Check(t)
	for range 20 {
		p := crew.New(4)
		var accepted, ran atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if p.Go(func() { ran.Add(1); runtime.Gosched() }) != nil {
						return
					}
					accepted.Add(1)
				}
			}()
		}
		eventually(t, "a backlog", func() bool { return accepted.Load() > 2000 })
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := p.Shutdown(ctx)
		cancel()
		wg.Wait()
		dropped := 0
		var se *crew.ShutdownError
		if errors.As(err, &se) {
			dropped = se.Dropped
		} else if err != nil {
			t.Fatal(err)
		}
		if got := ran.Load() + int64(dropped); got != accepted.Load() {
			t.Fatalf("accepted %d, ran %d, dropped %d", accepted.Load(), ran.Load(), dropped)
		}
	}
}

func TestPanicsGoToTheHandler(t *testing.T) {
	leak.Check(t)
	got := make(chan *crew.PanicError, 1)
	p := crew.New(1, crew.WithPanicHandler(func(pe *crew.PanicError) { got <- pe }))
	defer p.Stop()
	p.Go(func() { panic("boom") })
	pe := <-got
	if pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("PanicError = %+v", pe)
	}
	// The worker survives and runs the next task.
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	if s := p.Stats(); s.Panicked != 1 {
		t.Fatalf("Panicked = %d", s.Panicked)
	}
}

func TestPanicInSubmitCompletesTheTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithPanicHandler(func(*crew.PanicError) { t.Error("handler called for a Submit task") }))
	defer p.Stop()
	cause := errors.New("cause")
	err := p.Submit(func(context.Context) error { panic(cause) }).Wait()
	var pe *crew.PanicError
	if !errors.As(err, &pe) || !errors.Is(err, cause) {
		t.Fatalf("Wait() = %v, want a PanicError wrapping the cause", err)
	}
}

func TestPanicInEveryWorkerAtOnce(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	const workers = 16
	p := crew.New(workers, crew.WithPanicHandler(func(*crew.PanicError) { panics.Add(1) }))
	var gate sync.WaitGroup
	gate.Add(workers)
	for range workers {
		p.Go(func() { gate.Done(); gate.Wait(); panic("all at once") })
	}
	within(t, 5*time.Second, "Stop after panics", p.Stop)
	if panics.Load() != workers {
		t.Fatalf("%d panics reported, want %d", panics.Load(), workers)
	}
}

func TestGoexitDoesNotWedgeThePool(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	for range 10 {
		p.Go(runtime.Goexit)
	}
	if err := p.Submit(func(context.Context) error { runtime.Goexit(); return nil }).Wait(); err != crew.ErrGoexit {
		t.Fatalf("Submit with Goexit = %v, want ErrGoexit", err)
	}
	var ran atomic.Int64
	for range 100 {
		p.Go(func() { ran.Add(1) })
	}
	within(t, 5*time.Second, "Stop after Goexit", p.Stop)
	if ran.Load() != 100 {
		t.Fatalf("ran %d of 100 after Goexit", ran.Load())
	}
}

// A panic handler that calls runtime.Goexit (t.FailNow in a test's
// handler) ends the worker, but the task still counts as finished and the
// slot passes to a new worker, so Stop does not hang.
func TestPanicHandlerGoexitDoesNotWedgeThePool(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithPanicHandler(func(*crew.PanicError) { runtime.Goexit() }))
	p.Go(func() { panic("boom") })
	var ran atomic.Int64
	for range 10 {
		p.Go(func() { ran.Add(1) })
	}
	within(t, 5*time.Second, "Stop after a panic handler's Goexit", p.Stop)
	if s := p.Stats(); ran.Load() != 10 || s.Completed != 11 || s.Panicked != 1 {
		t.Fatalf("ran %d of 10 after the panic, stats %+v", ran.Load(), s)
	}
}

func TestResize(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	var running atomic.Int64
	release := make(chan struct{})
	for range 10 {
		p.Go(func() { running.Add(1); <-release; running.Add(-1) })
	}
	eventually(t, "one running", func() bool { return running.Load() == 1 })
	if err := p.Resize(4); err != nil {
		t.Fatal(err)
	}
	eventually(t, "four running after growing", func() bool { return running.Load() == 4 })
	if err := p.Resize(2); err != nil {
		t.Fatal(err)
	}
	close(release)
	p.Wait()
	if s := p.Stats(); s.Completed != 10 || s.MaxWorkers != 2 {
		t.Fatalf("stats = %+v", s)
	}
	eventually(t, "workers to shrink to the limit", func() bool { return p.Stats().Workers <= 2 })
}

// Resize during Stop applies (the queue drains faster); once the pool has
// ended it returns ErrStopped and changes nothing, on function pools too.
func TestResizeDuringAndAfterStop(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	var running atomic.Int64
	release := make(chan struct{})
	for range 3 {
		p.Go(func() { running.Add(1); <-release })
	}
	eventually(t, "one running", func() bool { return running.Load() == 1 })
	stopped := make(chan struct{})
	go func() { defer close(stopped); p.Stop() }()
	eventually(t, "Stop to close the pool", func() bool { return p.Go(func() {}) != nil })
	if err := p.Resize(3); err != nil {
		t.Fatalf("Resize during Stop = %v, want nil", err)
	}
	eventually(t, "three running after growing during Stop", func() bool { return running.Load() == 3 })
	close(release)
	recv(t, stopped, "Stop")
	if err := p.Resize(8); !errors.Is(err, crew.ErrStopped) {
		t.Fatalf("Resize after Stop = %v, want ErrStopped", err)
	}
	if s := p.Stats(); s.MaxWorkers != 3 || s.Workers != 0 {
		t.Fatalf("stats after Resize on a stopped pool = %+v, want MaxWorkers 3 and no worker", s)
	}
	fp := crew.NewFunc(1, func(context.Context, int) error { return nil })
	if err := fp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := fp.Resize(2); !errors.Is(err, crew.ErrStopped) {
		t.Fatalf("FuncPool.Resize after Shutdown = %v, want ErrStopped", err)
	}
}

func TestIdleWorkersRetireToTheMinimum(t *testing.T) {
	leak.Check(t)
	p := crew.New(16, crew.WithMinWorkers(2), crew.WithIdleTimeout(20*time.Millisecond))
	defer p.Stop()
	if w := p.Stats().Workers; w != 2 {
		t.Fatalf("%d workers after New, want the minimum 2", w)
	}
	var gate sync.WaitGroup
	gate.Add(16)
	for range 16 {
		p.Go(func() { gate.Done(); gate.Wait() }) // needs all 16 at once
	}
	p.Wait()
	eventually(t, "workers to retire to the minimum", func() bool { return p.Stats().Workers == 2 })
}

func TestConcurrentSubmitResizeAndStop(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	var accepted, ran atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				var err error
				switch j % 3 {
				case 0:
					err = p.Go(func() { ran.Add(1) })
				case 1:
					err = p.Submit(func(context.Context) error { ran.Add(1); return nil }).Wait()
				case 2:
					err = p.GoContext(context.Background(), func() { ran.Add(1) })
				}
				if err == crew.ErrStopped {
					return
				} else if err != nil {
					t.Error(err)
					return
				}
				accepted.Add(1)
				if i == 0 && j%50 == 0 {
					p.Resize(1 + j%7)
				}
			}
		}()
	}
	eventually(t, "some progress", func() bool { return ran.Load() > 5000 })
	var stops sync.WaitGroup
	for range 4 {
		stops.Add(1)
		go func() { defer stops.Done(); p.Stop() }()
	}
	stops.Wait()
	wg.Wait()
	if ran.Load() != accepted.Load() {
		t.Fatalf("accepted %d, ran %d", accepted.Load(), ran.Load())
	}
}

// Two Shutdowns whose deadlines pass together each report the tasks they
// dropped themselves: the drops add up to the queued tasks, not twice
// their number.
func TestConcurrentShutdownsReportEachDropOnce(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	release, started := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release }) // ignores the pool's context
	<-started
	const queued = 10
	for range queued {
		p.Go(func() {})
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- p.Shutdown(expired) }()
	}
	// Both have dropped what they found and wait for the running task. The
	// wait must be the one after the drop: a Shutdown descheduled inside
	// its first Wait, whose context has expired, has dropped nothing yet,
	// and the worker freed by release would run what it leaves queued.
	eventually(t, "both Shutdowns to wait for the running task", func() bool {
		n := 0
		for _, g := range strings.Split(leak.Dump(), "\n\n") {
			if strings.Contains(g, "poolCore[...]).dropQueued") && strings.Contains(g, "notify.(*Cond).Wait") {
				n++
			}
		}
		return n == 2
	})
	close(release)
	total := 0
	for range 2 {
		var se *crew.ShutdownError
		if err := <-errs; !errors.As(err, &se) {
			t.Fatalf("Shutdown = %v, want a *ShutdownError", err)
		} else {
			total += se.Dropped
		}
	}
	if total != queued {
		t.Fatalf("the two Shutdowns report %d dropped in all, want %d", total, queued)
	}
}

// A pool that runs one task at a time runs one goroutine's tasks in the
// order it submitted them, whether they queue up behind a busy worker or
// find it idle.
func TestOneWorkerPoolKeepsSubmissionOrder(t *testing.T) {
	leak.Check(t)
	for round := range 500 {
		p := crew.New(1)
		var mu sync.Mutex
		var order []int
		for i := range 10 {
			p.Go(func() {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
			if round%2 == 0 {
				runtime.Gosched()
			}
		}
		p.Stop()
		for i, got := range order {
			if got != i {
				t.Fatalf("round %d: tasks ran as %v", round, order)
			}
		}
	}
}
