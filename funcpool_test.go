package crew_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

func TestFuncPoolRunsEveryValue(t *testing.T) {
	leak.Check(t)
	var sum atomic.Int64
	p := crew.NewFunc(4, func(ctx context.Context, v int) error {
		sum.Add(int64(v))
		return nil
	})
	n := scaled(100_000, 10)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 1; i <= n; i++ {
				if err := p.Invoke(i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "FuncPool.Wait", p.Wait)
	if want := int64(4 * n * (n + 1) / 2); sum.Load() != want {
		t.Fatalf("sum %d, want %d", sum.Load(), want)
	}
	within(t, schedDeadline, "FuncPool.Stop", p.Stop)
	if s := p.Stats(); s.Completed != uint64(4*n) || s.Workers != 0 || s.Failed != 0 {
		t.Fatalf("Stats after Stop = %+v", s)
	}
	if err := p.Invoke(1); err != crew.ErrStopped {
		t.Fatalf("Invoke after Stop = %v", err)
	}
}

// Invoke queues the value itself: no allocation per call.
func TestFuncPoolInvokeAllocatesNothing(t *testing.T) {
	if schedRace {
		t.Skip("the race detector allocates")
	}
	leak.Check(t)
	var n atomic.Int64
	p := crew.NewFunc(2, func(_ context.Context, v int) error { n.Add(int64(v)); return nil })
	defer p.Stop()
	for range 1000 { // warm up: workers and queue chunks
		p.Invoke(1)
	}
	p.Wait()
	if a := testing.AllocsPerRun(10_000, func() { p.Invoke(1) }); a != 0 {
		t.Fatalf("Invoke allocates %v times per call", a)
	}
}

// The function's errors go to the error handler and are counted; panics go
// to the panic handler; runtime.Goexit is counted too.
func TestFuncPoolErrorsPanicsAndGoexit(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	errs := make(chan error, 10)
	p := crew.NewFunc(2, func(ctx context.Context, v string) error {
		switch v {
		case "error":
			return errors.New("bad value")
		case "panic":
			panic("boom")
		}
		return nil
	}, quietPanics(&panics), crew.WithErrorHandler(func(err error) { errs <- err }))
	for _, v := range []string{"ok", "error", "panic", "ok", "error"} {
		p.Invoke(v)
	}
	within(t, schedDeadline, "FuncPool.Stop", p.Stop)
	if len(errs) != 2 || panics.Load() != 1 {
		t.Fatalf("%d errors and %d panics handled, want 2 and 1", len(errs), panics.Load())
	}
	if s := p.Stats(); s.Failed != 3 || s.Panicked != 1 || s.Completed != 5 {
		t.Fatalf("Stats = %+v, want 3 failed, 1 panicked, 5 completed", s)
	}

	exited := make(chan struct{})
	g := crew.NewFunc(1, func(ctx context.Context, v int) error {
		if v == 0 {
			defer close(exited)
			runtime.Goexit()
		}
		return nil
	})
	g.Invoke(0)
	g.Wait()
	g.Invoke(1)
	recvWithin(t, exited, "the Goexit call")
	within(t, schedDeadline, "FuncPool.Stop", g.Stop)
	if s := g.Stats(); s.Failed != 1 || s.Completed != 2 {
		t.Fatalf("Stats after Goexit = %+v", s)
	}
}

// Shutdown drops the values still queued when its deadline passes and
// cancels the function's context; TryInvoke, InvokeCtx and the
// non-blocking mode behave like the Pool's.
// A call that fails counts once in Failed, also when the error handler
// panics (the engine then counts it, as a panic).
func TestFuncPoolErrorHandlerPanicCountsOnce(t *testing.T) {
	leak.Check(t)
	p := crew.NewFunc(1, func(context.Context, int) error { return errors.New("x") },
		crew.WithErrorHandler(func(error) { panic("handler") }),
		crew.WithPanicHandler(func(*crew.PanicError) {}))
	p.Invoke(1)
	p.Stop()
	if s := p.Stats(); s.Failed != 1 || s.Completed != 1 || s.Panicked != 1 {
		t.Fatalf("one failed call: Failed %d, Completed %d, Panicked %d; want 1 each", s.Failed, s.Completed, s.Panicked)
	}
}

func TestFuncPoolShutdownAndSubmissionModes(t *testing.T) {
	leak.Check(t)
	started := make(chan struct{}, 1)
	p := crew.NewFunc(1, func(ctx context.Context, v int) error {
		if v == 0 {
			started <- struct{}{}
			<-ctx.Done()
		}
		return nil
	}, crew.WithQueueSize(3))
	p.Invoke(0)
	recvWithin(t, started, "the blocking value")
	for i := 1; i <= 3; i++ {
		if !p.TryInvoke(i) {
			t.Fatalf("TryInvoke(%d) failed with room in the queue", i)
		}
	}
	if p.TryInvoke(4) {
		t.Fatal("TryInvoke succeeded on a full queue")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	if err := p.InvokeCtx(ctx, 5); err != context.DeadlineExceeded {
		t.Fatalf("InvokeCtx on a full queue = %v", err)
	}
	cancel()
	if err := p.InvokeCtx(nil, 5); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // testing the check
		t.Fatalf("InvokeCtx(nil) = %v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer scancel()
	var se *crew.ShutdownError
	within(t, schedDeadline, "FuncPool.Shutdown", func() {
		if err := p.Shutdown(sctx); !errors.As(err, &se) || se.Dropped != 3 {
			t.Errorf("Shutdown = %v, want 3 dropped", err)
		}
	})
	if p.Context().Err() == nil {
		t.Fatal("the context is not cancelled after Shutdown")
	}

	nb := crew.NewFunc(1, func(ctx context.Context, v int) error { <-ctx.Done(); return nil },
		crew.WithQueueSize(0), crew.WithNonBlocking())
	nb.Invoke(1) // taken by the worker, or refused: either way the next one is refused
	deadline := time.Now().Add(schedDeadline)
	for nb.Stats().Running != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first value never ran")
		}
		nb.Invoke(1)
		time.Sleep(100 * time.Microsecond)
	}
	if err := nb.Invoke(2); err != crew.ErrQueueFull {
		t.Fatalf("Invoke on a full non-blocking pool = %v", err)
	}
	if err := nb.Shutdown(sctx); err != nil && !errors.As(err, &se) {
		t.Fatal(err)
	}
}

func TestFuncPoolBadInput(t *testing.T) {
	leak.Check(t)
	fn := func(context.Context, int) error { return nil }
	for name, f := range map[string]func(){
		"zero workers":     func() { crew.NewFunc(0, fn) },
		"nil function":     func() { crew.NewFunc[int](1, nil) },
		"nil option":       func() { crew.NewFunc(1, fn, nil) },
		"nil Option":       func() { crew.NewFunc(1, fn, crew.Option(nil)) },
		"nil handler":      func() { crew.WithErrorHandler(nil) },
		"min above max":    func() { crew.NewFunc(1, fn, crew.WithMinWorkers(2)) },
		"unbounded nb":     func() { crew.NewFunc(1, fn, crew.WithNonBlocking()) },
		"worker nil state": func() { crew.NewWorkerPool[int, int](1, nil, nil, nil) },
		"observability":    func() { crew.NewFunc(1, fn, crew.WithName("x")) },
	} {
		if err, ok := recoverErr(f); !ok || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: panic %v, want an error wrapping ErrInvalid", name, err)
		}
	}
	var zero crew.FuncPool[int]
	var nilPool *crew.FuncPool[int]
	for _, p := range []*crew.FuncPool[int]{&zero, nilPool} {
		if err := p.Invoke(1); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("zero FuncPool: Invoke = %v", err)
		}
		if p.TryInvoke(1) || p.Resize(2) == nil || p.Shutdown(context.Background()) == nil {
			t.Error("zero FuncPool accepted work")
		}
		if err := p.InvokeCtx(context.Background(), 1); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("zero FuncPool: InvokeCtx = %v", err)
		}
		p.Wait()
		p.Stop()
		_ = p.Stats()
		_ = p.Context()
	}
	p := crew.NewFunc(1, fn)
	defer p.Stop()
	if err := p.Resize(0); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("Resize(0) = %v", err)
	}
	if err := p.Resize(3); err != nil || p.Stats().MaxWorkers != 3 {
		t.Fatalf("Resize(3) = %v, limit %d", err, p.Stats().MaxWorkers)
	}
}
