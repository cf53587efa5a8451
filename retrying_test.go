package crew_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// A failing task is called again until it succeeds or its attempts are
// used up; a permanent error and a panic end it after one call. Each call
// has its own context, with the policy's deadline, which ends when the
// call returns.
func TestRetryingCalls(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	r := crew.NewRetrying(p, crew.Retry{Attempts: 3, Delay: time.Microsecond, MaxDelay: time.Millisecond, Timeout: time.Hour})
	var calls atomic.Int64
	if err := r.Submit(failing(2, &calls)).Wait(); err != nil || calls.Load() != 3 {
		t.Fatalf("two failures then success: %v after %d calls, want nil after 3", err, calls.Load())
	}
	calls.Store(0)
	if err := r.Submit(failing(5, &calls)).Wait(); err != errFlaky || calls.Load() != 3 {
		t.Fatalf("attempts used up: %v after %d calls, want errFlaky after 3", err, calls.Load())
	}
	calls.Store(0)
	boom := errors.New("boom")
	err := r.Submit(func(context.Context) error { calls.Add(1); return crew.Permanent(boom) }).Wait()
	if err != boom || calls.Load() != 1 {
		t.Fatalf("permanent error: %v after %d calls, want boom after 1", err, calls.Load())
	}
	calls.Store(0)
	var pe *crew.PanicError
	err = r.Submit(func(context.Context) error { calls.Add(1); panic("no retry") }).Wait()
	if !errors.As(err, &pe) || pe.Value != "no retry" || calls.Load() != 1 {
		t.Fatalf("panic: %v after %d calls, want a PanicError after 1", err, calls.Load())
	}
	var first context.Context
	err = r.Submit(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a call with Timeout has no deadline")
		}
		if first == nil {
			first = ctx
			return errFlaky
		}
		if ctx == first || first.Err() == nil {
			t.Error("the second call got the first call's context, or the first call's context lives on")
		}
		return nil
	}).Wait()
	if err != nil {
		t.Fatal(err)
	}
	r.Wait()
	if s := r.Stats(); s.Retried != 5 || s.Unfinished != 0 || s.Waiting != 0 || s.Dropped != 0 || s.Cancelled != 0 {
		t.Fatalf("Stats = %+v, want 5 retried and nothing else", s)
	}
}

// A task waiting for its delay holds no worker: on a one-worker pool
// another task runs meanwhile, without the clock moving; Wait waits for
// the delay.
func TestRetryingHoldsNoWorker(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(1, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		r := crew.NewRetrying(p, crew.Retry{Attempts: 2, Delay: time.Hour})
		start := time.Now()
		var calls, other atomic.Int64
		task := r.Submit(failing(1, &calls))
		synctest.Wait()
		if err := p.Submit(func(context.Context) error { other.Add(1); return nil }).Wait(); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); calls.Load() != 1 || other.Load() != 1 || time.Since(start) != 0 || s.Waiting != 1 || s.Unfinished != 1 {
			t.Fatalf("before the delay: %d calls, other task ran %d times, %v passed, Stats %+v", calls.Load(), other.Load(), time.Since(start), s)
		}
		r.Wait()
		if err := task.Wait(); err != nil || calls.Load() != 2 || time.Since(start) < 30*time.Minute {
			t.Fatalf("Wait = %v after %d calls and %v", err, calls.Load(), time.Since(start))
		}
	})
}

// Task.Cancel ends a task waiting for its delay at once, with its last
// error and context.Canceled; it cancels a running call's context, and
// that call is not retried; it keeps a task that has not started from
// being called.
func TestRetryingCancel(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(1, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		r := crew.NewRetrying(p, crew.Retry{Attempts: 5, Delay: time.Hour})
		var calls atomic.Int64
		task := r.Submit(failing(5, &calls))
		synctest.Wait()
		start := time.Now()
		if !task.Cancel() {
			t.Fatal("Cancel of a task waiting for its delay = false")
		}
		err := task.Wait()
		if !errors.Is(err, errFlaky) || !errors.Is(err, context.Canceled) || calls.Load() != 1 {
			t.Fatalf("cancelled in its delay: Wait = %v after %d calls, want flaky and canceled after 1", err, calls.Load())
		}
		r.Wait()
		if s := r.Stats(); time.Since(start) != 0 || s.Cancelled != 1 || s.Unfinished != 0 || s.Waiting != 0 {
			t.Fatalf("after Cancel: %v passed, Stats %+v", time.Since(start), s)
		}
		if task.Cancel() {
			t.Fatal("a second Cancel = true")
		}

		calls.Store(0)
		running := make(chan struct{})
		task = r.Submit(func(ctx context.Context) error {
			calls.Add(1)
			close(running)
			<-ctx.Done()
			return ctx.Err()
		})
		<-running
		if task.Cancel() {
			t.Fatal("Cancel of a running task = true")
		}
		if err := task.Wait(); err != context.Canceled || calls.Load() != 1 {
			t.Fatalf("cancelled while running: Wait = %v after %d calls", err, calls.Load())
		}

		release := make(chan struct{})
		p.Go(func() { <-release })
		calls.Store(0)
		task = r.Submit(failing(0, &calls))
		if !task.Cancel() {
			t.Fatal("Cancel of a queued task = false")
		}
		close(release)
		r.Wait()
		if err := task.Wait(); err != context.Canceled || calls.Load() != 0 {
			t.Fatalf("cancelled before it started: Wait = %v after %d calls", err, calls.Load())
		}
		if s := r.Stats(); s.Cancelled != 2 || s.Unfinished != 0 {
			t.Fatalf("Stats %+v, want 2 cancelled", s)
		}
	})
}

// Stop and Shutdown never wait for a delay: the tasks waiting for theirs
// are dropped at once, each with its last error and ErrDropped, and
// counted; one cancelled before counts as cancelled.
func TestRetryingStopDropsDelayed(t *testing.T) {
	leak.Check(t)
	for _, shutdown := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := crew.New(2, crew.WithIdleTimeout(time.Minute))
			r := crew.NewRetrying(p, crew.Retry{Attempts: 5, Delay: time.Hour})
			var calls atomic.Int64
			tasks := make([]*crew.Task, 4)
			for i := range tasks {
				tasks[i] = r.Submit(func(context.Context) error { calls.Add(1); return errFlaky })
			}
			synctest.Wait()
			tasks[3].Cancel()
			start := time.Now()
			if shutdown {
				if err := p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else {
				p.Stop()
			}
			for i, task := range tasks[:3] {
				if err := task.Wait(); !errors.Is(err, crew.ErrDropped) || !errors.Is(err, errFlaky) {
					t.Fatalf("task %d waiting for its delay at Stop: %v, want flaky and dropped", i, err)
				}
			}
			r.Wait()
			if s := r.Stats(); time.Since(start) != 0 || calls.Load() != 4 || s.Dropped != 3 || s.Cancelled != 1 || s.Unfinished != 0 || s.Waiting != 0 {
				t.Fatalf("shutdown %v: %v passed, %d calls, Stats %+v; want 3 dropped, 1 cancelled", shutdown, time.Since(start), calls.Load(), s)
			}
			if err := r.Submit(failing(0, &calls)).Wait(); err != crew.ErrStopped {
				t.Fatalf("Submit after Stop = %v", err)
			}
		})
	}
}

// A task that fails while the pool stops is not called again: its error
// is its result. A Stop that races the delays of many tasks never hangs,
// and every task is accounted for.
func TestRetryingStopRacesDelays(t *testing.T) {
	leak.Check(t)
	for i := range 100 {
		p := crew.New(2)
		r := crew.NewRetrying(p, crew.Retry{Attempts: 4, Delay: time.Duration(i%10) * 20 * time.Microsecond})
		tasks := make([]*crew.Task, 20)
		for j := range tasks {
			tasks[j] = r.Submit(failing(int64(j%5), new(atomic.Int64)))
		}
		within(t, 10*time.Second, "Stop with tasks in their delays", func() {
			if i%2 == 0 {
				p.Stop()
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Microsecond)
				p.Shutdown(ctx)
				cancel()
			}
			r.Wait()
		})
		var dropped int
		for _, task := range tasks {
			switch err := task.Wait(); {
			case err == nil:
			case errors.Is(err, crew.ErrDropped):
				dropped++
			case err != errFlaky:
				t.Fatalf("unexpected error %v", err)
			}
		}
		if s := r.Stats(); s.Dropped != uint64(dropped) || s.Unfinished != 0 || s.Waiting != 0 {
			t.Fatalf("Stats %+v, %d tasks reported ErrDropped", s, dropped)
		}
	}
}

// SubmitContext with an ended context submits nothing; the Try form
// reports a refusal; bad input is reported with ErrInvalid or ErrNilTask.
func TestRetryingForms(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(0))
	defer p.Stop()
	r := crew.NewRetrying(p, crew.Retry{Attempts: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := func(context.Context) error { t.Error("called"); return nil }
	if err := r.SubmitContext(ctx, never).Wait(); err != context.Canceled {
		t.Fatalf("SubmitContext with an ended context = %v", err)
	}
	if err := r.SubmitContext(nil, never).Wait(); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // the nil context is the bad input
		t.Fatalf("SubmitContext(nil) = %v", err)
	}
	if err := r.Submit(nil).Wait(); err != crew.ErrNilTask {
		t.Fatalf("Submit(nil) = %v", err)
	}
	release := gate(t, p)
	if task, ok := r.TrySubmit(never); ok || task.Wait() != crew.ErrQueueFull {
		t.Fatalf("TrySubmit on a full pool = %v, %v", ok, task.Wait())
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	if err := r.SubmitContext(short, never).Wait(); err != context.DeadlineExceeded {
		t.Fatalf("SubmitContext on a full pool = %v", err)
	}
	release()
	p.Wait()
	var calls atomic.Int64
	if task, ok := r.TrySubmit(failing(1, &calls)); !ok || task.Wait() != nil || calls.Load() != 2 {
		t.Fatalf("TrySubmit = %v, %v after %d calls", ok, task.Wait(), calls.Load())
	}
	r.Wait() // a task may count as unfinished a moment after its Wait returns
	if s := r.Stats(); s.Unfinished != 0 || s.Retried != 1 {
		t.Fatalf("Stats %+v", s)
	}

	// The Go forms are the executor's: called once, not counted.
	ran := make(chan struct{}, 3)
	if err := r.Go(func() { ran <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if !r.TryGo(func() { ran <- struct{}{} }) {
		t.Fatal("TryGo refused a task on an idle pool")
	}
	p.Wait()
	if err := r.GoContext(context.Background(), func() { ran <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if len(ran) != 3 || r.Stats().Unfinished != 0 {
		t.Fatalf("%d Go tasks ran", len(ran))
	}

	for name, f := range map[string]func(){
		"nil executor":   func() { crew.NewRetrying(nil, crew.Retry{Attempts: 1}) },
		"zero Retry":     func() { crew.NewRetrying(p, crew.Retry{}) },
		"negative delay": func() { crew.NewRetrying(p, crew.Retry{Attempts: 2, Delay: -1}) },
	} {
		if err, panicked := recoverErr(f); !panicked || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("NewRetrying with %s: panic %v, want an error wrapping ErrInvalid", name, err)
		}
	}
	var zero crew.Retrying
	var nilR *crew.Retrying
	for name, r := range map[string]*crew.Retrying{"zero": &zero, "nil": nilR} {
		if err := r.Submit(never).Wait(); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s Retrying: Submit = %v", name, err)
		}
		if err := r.Go(func() {}); !errors.Is(err, crew.ErrInvalid) || r.TryGo(func() {}) {
			t.Errorf("%s Retrying: Go = %v", name, err)
		}
		if err := crew.NewKeyed[int](r).Go(1, func() {}); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Keyed on a %s Retrying: Go = %v", name, err)
		}
		r.Wait()
		if r.Stats() != (crew.LayerStats{}) {
			t.Errorf("%s Retrying: Stats = %+v", name, r.Stats())
		}
	}
}

// Layers stack on a Retrying, and a Retrying on layers: a Keyed on one
// runs each key in order; a Retrying on a Subpool retries under its limit.
func TestRetryingStacks(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	pol := crew.Retry{Attempts: 3, Delay: time.Microsecond}
	k := crew.NewKeyed[int](crew.NewRetrying(p, pol))
	var got []int
	for i := range 50 {
		if err := k.Go(1, func() { got = append(got, i) }); err != nil {
			t.Fatalf("Keyed on a Retrying: Go = %v", err)
		}
	}
	k.Wait()
	if len(got) != 50 {
		t.Fatalf("Keyed on a Retrying ran %d of 50 tasks", len(got))
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("Keyed on a Retrying ran key 1 out of order: %v", got)
		}
	}

	r := crew.NewRetrying(crew.NewSubpool(p, 1), pol)
	var running, most atomic.Int64
	tasks := make([]*crew.Task, 20)
	for i := range tasks {
		calls := new(atomic.Int64)
		tasks[i] = r.Submit(func(context.Context) error {
			raisePeak(&most, running.Add(1))
			defer running.Add(-1)
			if calls.Add(1) <= int64(i%3) {
				return errFlaky
			}
			return nil
		})
	}
	r.Wait()
	for i, task := range tasks {
		if err := task.Wait(); err != nil {
			t.Fatalf("task %d = %v", i, err)
		}
	}
	if most.Load() != 1 {
		t.Fatalf("a Retrying on a Subpool of 1 ran %d calls at once", most.Load())
	}
}

// Wait from inside one of the Retrying's own tasks panics rather than
// waiting for itself.
func TestRetryingWaitInside(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	r := crew.NewRetrying(p, crew.Retry{Attempts: 2})
	err := r.Submit(func(context.Context) error { r.Wait(); return nil }).Wait()
	var pe *crew.PanicError
	if !errors.As(err, &pe) || !errors.Is(pe, crew.ErrInsideTask) {
		t.Fatalf("Wait inside = %v, want a panic wrapping ErrInsideTask", err)
	}
}
