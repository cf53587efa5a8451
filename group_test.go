package crew_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// groupDeadline bounds every wait in these tests: a hang fails, it never
// blocks the run.
const groupDeadline = 10 * time.Second

// waitGroupErr runs g.Wait under the deadline.
func waitGroupErr(t *testing.T, g *crew.Group) error {
	t.Helper()
	var err error
	within(t, groupDeadline, "Group.Wait", func() { err = g.Wait() })
	return err
}

// recv fails the test if ch does not deliver within the deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(groupDeadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestGroupRunsEveryTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := p.Group(context.Background())
	var n atomic.Int64
	for range 5000 {
		if err := g.Go(func(ctx context.Context) error { n.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 5000 {
		t.Fatalf("ran %d tasks, want 5000", n.Load())
	}
	if g.Context().Err() == nil {
		t.Fatal("the group's context is not cancelled after Wait")
	}
}

func TestGroupFirstErrorCancels(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := crew.NewGroup(context.Background(), p)
	boom := errors.New("boom")
	sawCancel := make(chan error, 1)
	started := make(chan struct{})
	g.Go(func(ctx context.Context) error {
		close(started)
		<-ctx.Done() // cancelled by the other task's error
		sawCancel <- context.Cause(ctx)
		return ctx.Err()
	})
	<-started
	g.Go(func(ctx context.Context) error { return boom })
	if err := waitGroupErr(t, g); err != boom {
		t.Fatalf("Wait = %v, want %v", err, boom)
	}
	if cause := recv(t, sawCancel, "cancellation"); cause != boom {
		t.Fatalf("cause seen by the other task = %v, want %v", cause, boom)
	}
}

// TestGroupCancelledSkipsQueuedTasks is errgroup #61611: tasks still queued
// when the group is cancelled do not start, whether the cancellation comes
// from the parent context or from a task's error.
func TestGroupCancelledSkipsQueuedTasks(t *testing.T) {
	leak.Check(t)
	t.Run("parent", func(t *testing.T) {
		p := crew.New(1)
		defer p.Stop()
		block := make(chan struct{})
		running := make(chan struct{})
		p.Go(func() { close(running); <-block }) // the only worker is busy
		<-running
		ctx, cancel := context.WithCancel(context.Background())
		g := p.Group(ctx)
		var started atomic.Int64
		for range 100 {
			if err := g.Go(func(ctx context.Context) error { started.Add(1); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		close(block)
		if err := waitGroupErr(t, g); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		if n := started.Load(); n != 0 {
			t.Fatalf("%d queued tasks started after the group was cancelled", n)
		}
	})
	t.Run("error", func(t *testing.T) {
		p := crew.New(8)
		defer p.Stop()
		g := p.Group(context.Background(), crew.WithLimit(1))
		boom := errors.New("boom")
		gate := make(chan struct{})
		g.Go(func(ctx context.Context) error { <-gate; return boom })
		var started atomic.Int64
		for range 100 {
			g.Go(func(ctx context.Context) error { started.Add(1); return nil })
		}
		var err error
		done := make(chan struct{})
		go func() { err = g.Wait(); close(done) }() // Wait helps, within the limit
		close(gate)
		recv(t, done, "Wait")
		if err != boom {
			t.Fatalf("Wait = %v, want %v", err, boom)
		}
		if n := started.Load(); n != 0 {
			t.Fatalf("%d queued tasks started after the first error", n)
		}
	})
}

func TestGroupLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(16)
	defer p.Stop()
	const limit = 3
	g := p.Group(context.Background(), crew.WithLimit(limit))
	var cur, peak atomic.Int64
	barrier := make(chan struct{})
	var arrived atomic.Int64
	for i := range 200 {
		g.Go(func(ctx context.Context) error {
			n := cur.Add(1)
			defer cur.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			if i < limit { // the first ones must be able to run together
				if arrived.Add(1) == limit {
					close(barrier)
				}
				select {
				case <-barrier:
				case <-time.After(groupDeadline):
					return errors.New("the first tasks never ran together")
				}
			}
			runtime.Gosched()
			return nil
		})
	}
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
	if got := peak.Load(); got != limit {
		t.Fatalf("peak concurrency %d, want %d", got, limit)
	}
}

// A limited group's waiting tasks hold no worker: other work still runs.
func TestGroupLimitHoldsNoWorker(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithLimit(1))
	gate := make(chan struct{})
	for range 20 {
		g.Go(func(ctx context.Context) error { <-gate; return nil })
	}
	// One worker runs the group's one task; the other must be free.
	other := p.Submit(func(ctx context.Context) error { return nil })
	recv(t, other.Done(), "a task beside a limited group")
	close(gate)
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
}

func TestGroupPanicComesBackFromWait(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background())
	g.Go(func(ctx context.Context) error { panic("kaboom") })
	err := waitGroupErr(t, g)
	var pe *crew.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaboom" {
		t.Fatalf("Wait = %v, want a *PanicError with value kaboom", err)
	}
	if !strings.Contains(string(pe.Stack), "group_test.go") {
		t.Fatalf("the stack does not show the panic's origin:\n%s", pe.Stack)
	}
	if got := p.Stats().Panicked; got != 1 {
		t.Fatalf("Stats().Panicked = %d, want 1", got)
	}
	// The pool is unharmed.
	if err := p.Submit(func(ctx context.Context) error { return nil }).Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestGroupRepanic(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithRepanic())
	var others atomic.Int64
	g.Go(func(ctx context.Context) error { panic(errors.New("bad state")) })
	for range 10 {
		g.Go(func(ctx context.Context) error { others.Add(1); return nil })
	}
	var v any
	within(t, groupDeadline, "Wait", func() {
		defer func() { v = recover() }()
		g.Wait()
	})
	pe, ok := v.(*crew.PanicError)
	if !ok || pe.Error() == "" || !strings.Contains(fmt.Sprint(pe.Value), "bad state") {
		t.Fatalf("Wait panicked with %#v, want the task's *PanicError", v)
	}
	if errors.Unwrap(pe) == nil {
		t.Fatal("the *PanicError does not unwrap to the panicked error")
	}
}

// A panic that Wait does not report, because it reports an earlier error
// or re-panics with an earlier panic, reaches the pool's panic handler
// before Wait returns, and only such a panic does; it must not be dropped
// and seen only in Stats().Panicked.
func TestGroupPanicThatWaitDoesNotReportReachesThePanicHandler(t *testing.T) {
	leak.Check(t)
	handler, handled := sentPanics(4)
	p := crew.New(2, handler)
	defer p.Stop()
	plain := errors.New("plain")
	// A running task panics with "second" once another has failed with
	// firstErr (nil: a panic "first"): once the failure has cancelled the
	// group, or WithAllErrors, where the order does not matter, once it
	// is on its way.
	run := func(firstErr error, all bool, opts ...crew.GroupOption) (waitErr error, repanicked any) {
		if all {
			opts = append(opts, crew.WithAllErrors())
		}
		g := p.Group(context.Background(), opts...)
		started, failed := make(chan struct{}), make(chan struct{})
		g.Go(func(ctx context.Context) error {
			close(started)
			if all {
				<-failed
			} else {
				<-ctx.Done()
			}
			panic("second")
		})
		<-started
		g.Go(func(context.Context) error {
			defer close(failed)
			if firstErr == nil {
				panic("first")
			}
			return firstErr
		})
		within(t, groupDeadline, "Wait", func() {
			defer func() { repanicked = recover() }()
			waitErr = g.Wait()
		})
		return waitErr, repanicked
	}
	handledNext := func(want any) { // before Wait returned
		t.Helper()
		select {
		case v := <-handled:
			if v != want {
				t.Fatalf("the panic handler got %v, want %v", v, want)
			}
		default:
			t.Fatalf("Wait returned before the panic handler got %v", want)
		}
	}

	if err, _ := run(plain, false); err != plain {
		t.Fatalf("Wait = %v, want the first error", err)
	}
	handledNext("second")

	if _, v := run(nil, false, crew.WithRepanic()); v == nil || v.(*crew.PanicError).Value != "first" {
		t.Fatalf("Wait re-panicked with %v, want the first panic", v)
	}
	handledNext("second")

	err, _ := run(plain, true)
	var pe *crew.PanicError
	if !errors.Is(err, plain) || !errors.As(err, &pe) || pe.Value != "second" {
		t.Fatalf("Wait = %v, want both errors", err)
	}
	select {
	case v := <-handled:
		t.Fatalf("the panic handler got %v, which Wait reported", v)
	default:
	}
}

// Every panic that Wait does not report reaches the panic handler even if
// the handler panics, and WithRepanic Wait still re-panics with the first
// panic: the first handler panic must neither skip the rest nor escape
// Wait in place of the re-panic.
func TestGroupPanicHandlerThatPanicsGetsEveryUnreportedPanic(t *testing.T) {
	leak.Check(t)
	var calls atomic.Int64
	p := crew.New(4, crew.WithPanicHandler(func(*crew.PanicError) { calls.Add(1); panic("handler broke") }))
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithRepanic())
	var ready sync.WaitGroup
	ready.Add(2)
	for range 2 {
		g.Go(func(ctx context.Context) error { ready.Done(); <-ctx.Done(); panic("later") })
	}
	ready.Wait()
	g.Go(func(context.Context) error { panic("first") })
	var v any
	within(t, groupDeadline, "Wait", func() {
		defer func() { v = recover() }()
		g.Wait()
	})
	if pe, ok := v.(*crew.PanicError); !ok || pe.Value != "first" || calls.Load() != 2 {
		t.Fatalf("Wait panicked with %v after %d handler calls; want the first panic after 2", v, calls.Load())
	}
}

func TestGroupGoexit(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background())
	started := make(chan struct{})
	g.Go(func(ctx context.Context) error { close(started); runtime.Goexit(); return nil })
	// Once it runs on a worker, Wait cannot run it itself (which would end
	// Wait's goroutine, as calling the task directly would).
	<-started
	if err := waitGroupErr(t, g); err != crew.ErrGoexit {
		t.Fatalf("Wait = %v, want ErrGoexit", err)
	}
}

func TestGroupAllErrors(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithAllErrors())
	errs := make([]error, 10)
	var ran atomic.Int64
	for i := range errs {
		errs[i] = fmt.Errorf("task %d", i)
		g.Go(func(ctx context.Context) error {
			ran.Add(1)
			if ctx.Err() != nil {
				return errors.New("cancelled although WithAllErrors")
			}
			return errs[i]
		})
	}
	g.Go(func(ctx context.Context) error { panic("also") })
	err := waitGroupErr(t, g)
	if ran.Load() != 10 {
		t.Fatalf("ran %d tasks, want 10", ran.Load())
	}
	for _, e := range errs {
		if !errors.Is(err, e) {
			t.Fatalf("Wait = %v, lacks %v", err, e)
		}
	}
	var pe *crew.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Wait = %v, lacks the panic", err)
	}
	// Submission order, whatever the completion order.
	want := "task 0\ntask 1\ntask 2"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("errors not in submission order:\n%v", err)
	}
}

func TestGroupTaskTimeout(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithTaskTimeout(20*time.Millisecond))
	hadDeadline := make(chan bool, 1)
	g.Go(func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		hadDeadline <- ok
		<-ctx.Done()
		return ctx.Err()
	})
	if err := waitGroupErr(t, g); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
	if !<-hadDeadline {
		t.Fatal("the task's context had no deadline")
	}
}

func TestGroupGoAfterWait(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background())
	g.Go(func(ctx context.Context) error { return nil })
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := g.Go(func(ctx context.Context) error { ran = true; return nil }); err != crew.ErrGroupDone {
		t.Fatalf("Go after Wait = %v, want ErrGroupDone", err)
	}
	if err := waitGroupErr(t, g); err != nil {
		t.Fatalf("second Wait = %v", err)
	}
	if ran {
		t.Fatal("a task refused with ErrGroupDone ran")
	}
}

// Go racing with Wait (conc #103): every Go either is accepted and its task
// runs before Wait returns, or returns ErrGroupDone and its task never
// runs. Nothing panics.
func TestGroupGoRacingWait(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	for range 50 {
		g := p.Group(context.Background())
		var accepted, ran atomic.Int64
		var afterWait atomic.Bool
		var late atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					err := g.Go(func(ctx context.Context) error {
						ran.Add(1)
						if afterWait.Load() {
							late.Add(1)
						}
						return nil
					})
					switch err {
					case nil:
						accepted.Add(1)
					case crew.ErrGroupDone:
					default:
						t.Errorf("Go = %v", err)
					}
				}
			}()
		}
		if err := waitGroupErr(t, g); err != nil {
			t.Fatal(err)
		}
		afterWait.Store(true)
		wg.Wait()
		if late.Load() != 0 {
			t.Fatalf("%d tasks ran after Wait returned", late.Load())
		}
		if accepted.Load() != ran.Load() {
			t.Fatalf("accepted %d tasks, ran %d", accepted.Load(), ran.Load())
		}
	}
}

// Tasks may call Go on their own group, even a limited one: Go never blocks.
func TestGroupGoFromTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithLimit(2))
	var n atomic.Int64
	var spawn func(depth int) func(ctx context.Context) error
	spawn = func(depth int) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			n.Add(1)
			if depth < 8 {
				g.Go(spawn(depth + 1))
				g.Go(spawn(depth + 1))
			}
			return nil
		}
	}
	g.Go(spawn(0))
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 511 {
		t.Fatalf("ran %d tasks, want 511", n.Load())
	}
}

// Groups waited on inside every worker of a saturated pool do not deadlock:
// Wait runs its own group's queued tasks.
func TestGroupNestedOnSaturatedPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	outer := p.Group(context.Background())
	var inner atomic.Int64
	for range 6 {
		outer.Go(func(ctx context.Context) error {
			g := p.Group(ctx)
			for range 20 {
				g.Go(func(ctx context.Context) error { inner.Add(1); return nil })
			}
			return g.Wait()
		})
	}
	if err := waitGroupErr(t, outer); err != nil {
		t.Fatal(err)
	}
	if inner.Load() != 120 {
		t.Fatalf("ran %d inner tasks, want 120", inner.Load())
	}
}

func TestGroupMisuse(t *testing.T) {
	leak.Check(t)
	t.Run("nil task", func(t *testing.T) {
		p := crew.New(1)
		defer p.Stop()
		g := p.Group(context.Background())
		if err := g.Go(nil); err != crew.ErrNilTask {
			t.Fatalf("Go(nil) = %v", err)
		}
		if err := waitGroupErr(t, g); err != crew.ErrNilTask {
			t.Fatalf("Wait = %v, want ErrNilTask recorded", err)
		}
	})
	t.Run("stopped pool", func(t *testing.T) {
		p := crew.New(1)
		p.Stop()
		g := p.Group(context.Background())
		if err := g.Go(func(ctx context.Context) error { return nil }); err != crew.ErrStopped {
			t.Fatalf("Go = %v, want ErrStopped", err)
		}
		if err := waitGroupErr(t, g); err != crew.ErrStopped {
			t.Fatalf("Wait = %v, want ErrStopped", err)
		}
	})
	t.Run("nil pool", func(t *testing.T) {
		g := crew.NewGroup(context.Background(), nil)
		if err := g.Go(func(ctx context.Context) error { return nil }); !errors.Is(err, crew.ErrInvalid) {
			t.Fatalf("Go = %v, want ErrInvalid", err)
		}
		if err := waitGroupErr(t, g); !errors.Is(err, crew.ErrInvalid) {
			t.Fatalf("Wait = %v, want ErrInvalid", err)
		}
	})
	t.Run("bad options", func(t *testing.T) {
		p := crew.New(1)
		defer p.Stop()
		ctx := context.Background()
		for name, f := range map[string]func(){
			"limit":   func() { crew.NewGroup(ctx, p, crew.WithLimit(0)) },
			"timeout": func() { crew.NewResultGroup[int](ctx, p, crew.WithTaskTimeout(0)) },
			"nil":     func() { crew.NewStream(ctx, p, nil) },
			"ctx":     func() { crew.NewGroup(nil, p) }, //nolint:staticcheck // testing nil
		} {
			func() {
				defer func() {
					err, _ := recover().(error)
					if !errors.Is(err, crew.ErrInvalid) {
						t.Errorf("%s: panic %v, want ErrInvalid", name, err)
					}
				}()
				f()
			}()
		}
		// The functions that return an error report them instead.
		fn := func(context.Context, int) (int, error) { return 0, nil }
		if _, err := crew.MapErr(ctx, p, []int{1}, fn, crew.WithLimit(-1)); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("MapErr with WithLimit(-1) = %v, want ErrInvalid", err)
		}
		if err := crew.ForEach(nil, p, []int{1}, func(context.Context, int) error { return nil }); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // testing nil
			t.Errorf("ForEach with a nil context = %v, want ErrInvalid", err)
		}
	})
}

// With a full bounded queue and WithNonBlocking, tasks wait in the group
// until the pool has room for their steps: none is lost, and Wait, called
// from outside the pool, runs none of them itself (the pool's one worker
// is busy, and the group must not run beside it).
func TestGroupFullNonBlockingPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(1), crew.WithNonBlocking())
	defer p.Stop()
	block := make(chan struct{})
	running := make(chan struct{})
	p.Go(func() { close(running); <-block })
	<-running
	p.Go(func() {}) // the queue is full now
	g := p.Group(context.Background())
	var n atomic.Int64
	for range 50 {
		if err := g.Go(func(ctx context.Context) error { n.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- g.Wait() }()
	eventually(t, "Wait to block", func() bool { return strings.Contains(leak.Dump(), "crew.(*core[...]).await") })
	if n.Load() != 0 {
		t.Fatalf("%d tasks ran beside the pool's busy worker", n.Load())
	}
	close(block)
	if err := recv(t, waited, "Wait"); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 50 {
		t.Fatalf("ran %d tasks, want 50", n.Load())
	}
}

// Shutdown's deadline cancels running group tasks and drops their queued
// steps; Wait still returns and no queued task starts. The group's queued
// tasks are skipped, never started, whether the running task returns when
// the group's context ends or as soon as the pool's does: in the second
// case the group must know of the pool's end by the time the task returns,
// not learn of it later on another goroutine.
func TestGroupShutdown(t *testing.T) {
	leak.Check(t)
	for _, c := range []struct {
		name    string
		workers int
		opts    []crew.GroupOption
		waitFor func(p *crew.Pool, ctx context.Context) <-chan struct{}
	}{
		{"group's context", 1, nil,
			func(_ *crew.Pool, ctx context.Context) <-chan struct{} { return ctx.Done() }},
		{"pool's context, limit 1", 2, []crew.GroupOption{crew.WithLimit(1)},
			func(p *crew.Pool, _ context.Context) <-chan struct{} { return p.Context().Done() }},
	} {
		p := crew.New(c.workers)
		g := p.Group(context.Background(), c.opts...)
		running := make(chan struct{})
		g.Go(func(ctx context.Context) error {
			close(running)
			<-c.waitFor(p, ctx)
			return nil
		})
		var started atomic.Int64
		for range 10 {
			g.Go(func(ctx context.Context) error { started.Add(1); return nil })
		}
		<-running
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		var serr *crew.ShutdownError
		if err := p.Shutdown(ctx); !errors.As(err, &serr) {
			t.Fatalf("%s: Shutdown = %v, want a *ShutdownError", c.name, err)
		}
		cancel()
		n := started.Load()
		if err := waitGroupErr(t, g); !errors.Is(err, crew.ErrStopped) {
			t.Fatalf("%s: Wait = %v, want ErrStopped", c.name, err)
		}
		if n != 0 {
			t.Fatalf("%s: %d queued tasks started after Shutdown", c.name, n)
		}
	}
}

// Nor does a group's step that finishes its task while Shutdown drops the
// pool's queue, before it cancels the pool's context, start the group's
// next task itself. The Drop hook, which the drop calls, holds that
// moment open.
func TestGroupShutdownDropsWhatADrainingStepLeaves(t *testing.T) {
	leak.Check(t)
	releaseA, aStarted, bStarted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	p := poolHeldInDrain(releaseA, bStarted)
	g := p.Group(context.Background(), crew.WithLimit(1)) // B waits for A's slot, stepless
	g.Go(func(context.Context) error { close(aStarted); <-releaseA; return nil })
	<-aStarted
	var ranB atomic.Bool
	g.Go(func(context.Context) error { ranB.Store(true); close(bStarted); return nil })
	if err := p.Go(func() {}); err != nil { // queued behind A, for the drop
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	var serr *crew.ShutdownError
	if err := p.Shutdown(ctx); !errors.As(err, &serr) {
		t.Fatalf("Shutdown = %v, want a *ShutdownError", err)
	}
	if err := waitGroupErr(t, g); !errors.Is(err, crew.ErrStopped) {
		t.Fatalf("Wait = %v, want ErrStopped", err)
	}
	if ranB.Load() {
		t.Fatal("B started after Shutdown's deadline had passed")
	}
}

// fullQueue returns a pool of workers workers with a queue of one, every
// worker held by a task and the queue full, and the function that lets
// them all finish.
func fullQueue(t *testing.T, workers int) (*crew.Pool, func()) {
	t.Helper()
	p, release := holdWorkers(t, workers, crew.WithQueueSize(1))
	if err := p.Go(func() {}); err != nil {
		t.Fatal(err)
	}
	return p, release
}

// A task accepted while the pool's queue is full starts once the queue has
// room, without waiting for Wait: it must not sit in the group's queue
// until a task of the group finishes or Wait runs it.
func TestGroupTaskStartsOnceAFullQueueHasRoom(t *testing.T) {
	leak.Check(t)
	p, release := fullQueue(t, 1)
	defer p.Stop()
	g := p.Group(context.Background())
	started := make(chan struct{})
	if err := g.Go(func(context.Context) error { close(started); return nil }); err != nil {
		t.Fatal(err)
	}
	release()
	recv(t, started, "the group's task, with Wait not called")
	if err := waitGroupErr(t, g); err != nil {
		t.Fatal(err)
	}
}

// A producer and its consumer in one group, both accepted while the pool's
// queue is full, run at the same time once it has room: Wait, which runs
// one of them itself, does not wait for ever for the other.
func TestGroupProducerAndConsumerOnAFullQueue(t *testing.T) {
	leak.Check(t)
	p, release := fullQueue(t, 2)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := p.Group(ctx)
	ch := make(chan int)
	g.Go(func(ctx context.Context) error {
		defer close(ch)
		for i := range 3 {
			select {
			case ch <- i:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	var got atomic.Int64
	g.Go(func(context.Context) error {
		for range ch {
			got.Add(1)
		}
		return nil
	})
	release()
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if err != nil || got.Load() != 3 {
			t.Fatalf("Wait = %v with %d values consumed, want nil and 3", err, got.Load())
		}
	case <-time.After(groupDeadline):
		cancel() // lets the producer give up, and Wait return
		t.Fatalf("Wait still waits; Wait after cancelling: %v", <-done)
	}
}

func TestGroupConcurrentWaiters(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	g := p.Group(context.Background())
	gate := make(chan struct{})
	boom := errors.New("boom")
	g.Go(func(ctx context.Context) error { <-gate; return boom })
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- g.Wait() }()
	}
	close(gate)
	for range 4 {
		if err := recv(t, errs, "a waiter"); err != boom {
			t.Fatalf("Wait = %v, want %v", err, boom)
		}
	}
}

func TestGroupZeroValues(t *testing.T) {
	leak.Check(t)
	var g crew.Group
	if err := g.Go(func(ctx context.Context) error { return nil }); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Group: Go = %v", err)
	}
	if err := g.Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Group: Wait = %v", err)
	}
	var rg crew.ResultGroup[int]
	if _, err := rg.Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero ResultGroup: Wait = %v", err)
	}
	var s crew.Stream
	if err := s.Go(func(ctx context.Context) func() { return nil }); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Stream: Go = %v", err)
	}
	var f crew.Future[int]
	<-f.Done()
	if _, err := f.Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero Future: Wait = %v", err)
	}
	var nf *crew.Future[int]
	<-nf.Done()
	if _, err := nf.Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("nil Future: Wait = %v", err)
	}
}

// A nil *Group, *ResultGroup or *Stream (a struct field never set) reports
// ErrInvalid like the zero value, as a nil *Pool does, rather than
// panicking with a nil dereference.
func TestGroupNilPointers(t *testing.T) {
	leak.Check(t)
	var g *crew.Group
	var rg *crew.ResultGroup[int]
	var s *crew.Stream
	calls := []struct {
		name string
		call func() error
	}{
		{"Group.Go", func() error { return g.Go(func(context.Context) error { return nil }) }},
		{"Group.Wait", g.Wait},
		{"ResultGroup.Go", func() error { return rg.Go(func(context.Context) (int, error) { return 0, nil }) }},
		{"ResultGroup.Wait", func() error { _, err := rg.Wait(); return err }},
		{"Stream.Go", func() error { return s.Go(func(context.Context) func() { return nil }) }},
		{"Stream.Wait", s.Wait},
	}
	for _, c := range calls {
		if err, panicked := newPanic(func() {
			if err := c.call(); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("nil: %s = %v, want ErrInvalid", c.name, err)
			}
		}); panicked {
			t.Errorf("nil: %s panicked: %v", c.name, err)
		}
	}
	if g.Context() != nil || rg.Context() != nil || s.Context() != nil {
		t.Error("nil: Context is not nil")
	}
}

// With WithCrashOnPanic a panic in a group task crashes the program, as the
// pool's policy says, instead of coming back from Wait. The crash happens in
// a child process.
func TestGroupCrashOnPanic(t *testing.T) {
	leak.Check(t)
	crashes(t, func() {
		p := crew.New(2, crew.WithCrashOnPanic())
		g := p.Group(context.Background())
		started := make(chan struct{})
		g.Go(func(ctx context.Context) error { close(started); panic("crash me") })
		<-started
		g.Wait()
	})
}

// WithAllErrors and WithCancelOnError together: the first error cancels
// the group, so queued tasks are skipped, and Wait joins the errors of
// every task that ran, the first once.
func TestGroupAllErrorsWithCancelOnError(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithLimit(2), crew.WithAllErrors(), crew.WithCancelOnError())
	errA, errB := errors.New("a"), errors.New("b")
	both := make(chan struct{})
	var started, skippedRan atomic.Int64
	for _, err := range []error{errA, errB} {
		g.Go(func(context.Context) error {
			if started.Add(1) == 2 {
				close(both)
			}
			<-both // both run before either fails
			return err
		})
	}
	for range 10 {
		g.Go(func(context.Context) error { skippedRan.Add(1); return nil })
	}
	err := g.Wait()
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("Wait = %v, want both errors", err)
	}
	if err.Error() != "a\nb" {
		t.Errorf("Wait = %q, want %q: each error once, in submission order", err, "a\nb")
	}
	if n := skippedRan.Load(); n != 0 {
		t.Errorf("%d queued tasks ran after the first error", n)
	}
	if cause := context.Cause(g.Context()); cause != errA && cause != errB {
		t.Errorf("the group's cause is %v, want the first error", cause)
	}
}
