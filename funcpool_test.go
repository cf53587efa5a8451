package crew_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
// cancels the function's context; TryInvoke, InvokeContext and the
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
	if err := p.InvokeContext(ctx, 5); err != context.DeadlineExceeded {
		t.Fatalf("InvokeContext on a full queue = %v", err)
	}
	cancel()
	if err := p.InvokeContext(nil, 5); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // testing the check
		t.Fatalf("InvokeContext(nil) = %v", err)
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
		"nil handler":      func() { crew.NewFunc(1, fn, crew.WithErrorHandler(nil)) },
		"min above max":    func() { crew.NewFunc(1, fn, crew.WithMinWorkers(2)) },
		"unbounded nb":     func() { crew.NewFunc(1, fn, crew.WithNonBlocking()) },
		"worker nil state": func() { crew.NewFuncWithState[int, int](1, nil, nil, nil) },
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
		if err := p.InvokeContext(context.Background(), 1); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("zero FuncPool: InvokeContext = %v", err)
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

// The observability options work on function pools as on a Pool: hooks
// see each call with the function's error, the histograms count them,
// the logger gets panics and the summary, and the pool has its name.
func TestFuncPoolObservability(t *testing.T) {
	leak.Check(t)
	boom := errors.New("boom")
	for _, stateful := range []bool{false, true} {
		var mu sync.Mutex
		var buf bytes.Buffer
		var starts, finishes, panics, workers, retired atomic.Int64
		var errs []error
		hooks := crew.Hooks{
			TaskStart: func(crew.TaskEvent) { starts.Add(1) },
			TaskFinish: func(ev crew.TaskEvent) {
				finishes.Add(1)
				if ev.Err != nil {
					mu.Lock()
					errs = append(errs, ev.Err)
					mu.Unlock()
				}
			},
			Panic:        func(crew.TaskEvent) { panics.Add(1) },
			WorkerStart:  func(crew.WorkerEvent) { workers.Add(1) },
			WorkerRetire: func(crew.WorkerEvent) { retired.Add(1) },
		}
		opts := []crew.Option{crew.WithName("fp"), crew.WithHooks(hooks), crew.WithLatency(),
			crew.WithLogger(slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))),
			crew.WithPanicHandler(func(*crew.PanicError) {})}
		fn := func(_ context.Context, v int) error {
			switch v {
			case 1:
				return boom
			case 2:
				panic("fp")
			}
			return nil
		}
		var p *crew.FuncPool[int]
		if stateful {
			p = crew.NewFuncWithState(2, func(context.Context) (int, error) { return 0, nil }, nil,
				func(ctx context.Context, _ int, v int) error { return fn(ctx, v) }, opts...)
		} else {
			p = crew.NewFunc(2, fn, opts...)
		}
		for v := range 10 {
			if err := p.Invoke(v); err != nil {
				t.Fatal(err)
			}
		}
		p.Wait()
		lat, ok := p.Latency()
		p.Stop()
		if !ok || lat.Run.Count != 10 || lat.Wait.Count != 10 {
			t.Fatalf("stateful %v: latency %v, %+v; want 10 waits and runs", stateful, ok, lat)
		}
		mu.Lock()
		recs := logRecords(t, &buf)
		var booms, panicErrs int
		for _, err := range errs {
			var pe *crew.PanicError
			switch {
			case err == boom:
				booms++
			case errors.As(err, &pe):
				panicErrs++
			}
		}
		mu.Unlock()
		if starts.Load() != 10 || finishes.Load() != 10 || panics.Load() != 1 || booms != 1 || panicErrs != 1 {
			t.Errorf("stateful %v: %d starts, %d finishes, %d panics, errors %d boom and %d panics; want 10, 10, 1, 1 and 1",
				stateful, starts.Load(), finishes.Load(), panics.Load(), booms, panicErrs)
		}
		if workers.Load() == 0 || retired.Load() != workers.Load() {
			t.Errorf("stateful %v: %d workers started, %d retired", stateful, workers.Load(), retired.Load())
		}
		if p.Name() != "fp" || len(recs) != 2 || recs[1]["msg"] != "crew: pool stopped" || recs[1]["failed"] != 2.0 {
			t.Errorf("stateful %v: name %q, log %v", stateful, p.Name(), recs)
		}
	}
}
