package crew_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// failing returns a function that fails its first n calls with errFlaky,
// counting its calls.
func failing(n int64, calls *atomic.Int64) func(context.Context) error {
	return func(context.Context) error {
		if calls.Add(1) <= n {
			return errFlaky
		}
		return nil
	}
}

var errFlaky = errors.New("flaky")

func TestRetryDo(t *testing.T) {
	leak.Check(t)
	r := crew.Retry{Attempts: 3, Delay: time.Microsecond, MaxDelay: time.Millisecond}
	var calls atomic.Int64
	if err := r.Do(context.Background(), failing(2, &calls)); err != nil || calls.Load() != 3 {
		t.Fatalf("two failures then success: %v after %d calls", err, calls.Load())
	}
	calls.Store(0)
	if err := r.Do(context.Background(), failing(5, &calls)); err != errFlaky || calls.Load() != 3 {
		t.Fatalf("attempts used up: %v after %d calls, want errFlaky after 3", err, calls.Load())
	}
	calls.Store(0)
	boom := errors.New("boom")
	err := r.Do(context.Background(), func(context.Context) error { calls.Add(1); return crew.Permanent(boom) })
	if err != boom || calls.Load() != 1 {
		t.Fatalf("permanent error: %v after %d calls, want boom after 1", err, calls.Load())
	}
	if crew.Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
	// Each call has the policy's deadline.
	r.Timeout = time.Hour
	r.Do(context.Background(), func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a call with Timeout has no deadline")
		}
		return nil
	})
}

// Do stops waiting when its context ends, and reports both errors.
func TestRetryDoStopsWaitingWithCtx(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan error)
		go func() {
			done <- crew.Retry{Attempts: 5, Delay: time.Hour}.Do(ctx, func(context.Context) error { return errFlaky })
		}()
		synctest.Wait() // waiting for the delay
		cancel()
		err := <-done
		if !errors.Is(err, errFlaky) || !errors.Is(err, context.Canceled) || time.Since(start) != 0 {
			t.Fatalf("Do = %v after %v, want flaky and canceled at once", err, time.Since(start))
		}
	})
}

func TestRetryBadInput(t *testing.T) {
	leak.Check(t)
	ok := func(context.Context) error { t.Error("called with bad input"); return nil }
	for _, r := range []crew.Retry{
		{},
		{Attempts: -1},
		{Attempts: 2, Delay: -1},
		{Attempts: 2, Timeout: -1},
		{Attempts: 2, Delay: time.Second, MaxDelay: time.Millisecond},
	} {
		if err := r.Do(context.Background(), ok); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%+v.Do = %v, want ErrInvalid", r, err)
		}
		p := crew.New(1)
		if err := crew.ForEach(context.Background(), p, []int{1}, func(context.Context, int) error { return nil }, crew.WithRetry(r)); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("ForEach WithRetry(%+v) = %v, want ErrInvalid", r, err)
		}
		p.Stop()
	}
	r := crew.Retry{Attempts: 1}
	if err := r.Do(nil, ok); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // the nil context is the bad input
		t.Errorf("Do(nil ctx) = %v", err)
	}
	if err := r.Do(context.Background(), nil); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Do(nil fn) = %v", err)
	}
}

// A group's failing task is called again, and only its last call counts;
// a permanent error and a panic are not retried.
func TestGroupRetry(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	r := crew.Retry{Attempts: 4, Delay: time.Microsecond, MaxDelay: 100 * time.Microsecond}
	const n = 200
	calls := make([]atomic.Int64, n)
	rg := crew.NewResultGroup[int](context.Background(), p, crew.WithRetry(r), crew.WithLimit(3))
	for i := range n {
		rg.Go(func(ctx context.Context) (int, error) {
			if calls[i].Add(1) <= int64(i%4) {
				return -1, errFlaky
			}
			return i, nil
		})
	}
	out, err := rg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if out[i] != i || calls[i].Load() != int64(i%4)+1 {
			t.Fatalf("task %d: result %d after %d calls", i, out[i], calls[i].Load())
		}
	}

	var permanent, panics atomic.Int64
	g := crew.NewGroup(context.Background(), p, crew.WithRetry(r), crew.WithAllErrors())
	g.Go(func(context.Context) error { permanent.Add(1); return crew.Permanent(errFlaky) })
	g.Go(func(context.Context) error { panics.Add(1); panic("no retry") })
	err = g.Wait()
	var pe *crew.PanicError
	if !errors.Is(err, errFlaky) || !errors.As(err, &pe) || permanent.Load() != 1 || panics.Load() != 1 {
		t.Fatalf("Wait = %v; permanent called %d times, panicking %d", err, permanent.Load(), panics.Load())
	}
}

// A task waiting for its delay holds no worker: on a one-worker pool the
// next task runs meanwhile. Cancelling the group ends a waiting task at
// once with its last error, without waiting for the delay.
func TestGroupRetryHoldsNoWorker(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(1, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		start := time.Now()
		var calls, other atomic.Int64
		g := crew.NewGroup(context.Background(), p, crew.WithRetry(crew.Retry{Attempts: 2, Delay: time.Hour}))
		g.Go(failing(1, &calls))
		synctest.Wait()
		g.Go(func(context.Context) error { other.Add(1); return nil })
		synctest.Wait()
		if calls.Load() != 1 || other.Load() != 1 || time.Since(start) != 0 {
			t.Fatalf("before the delay: %d calls, other task ran %d times, %v passed", calls.Load(), other.Load(), time.Since(start))
		}
		if err := g.Wait(); err != nil || calls.Load() != 2 || time.Since(start) < 30*time.Minute {
			t.Fatalf("Wait = %v after %d calls and %v", err, calls.Load(), time.Since(start))
		}

		ctx, cancel := context.WithCancel(context.Background())
		g = crew.NewGroup(ctx, p, crew.WithRetry(crew.Retry{Attempts: 5, Delay: time.Hour}))
		calls.Store(0)
		g.Go(failing(5, &calls))
		synctest.Wait()
		start = time.Now()
		cancel()
		if err := g.Wait(); err != errFlaky || calls.Load() != 1 || time.Since(start) != 0 {
			t.Fatalf("cancelled: Wait = %v after %d calls and %v, want flaky at once", err, calls.Load(), time.Since(start))
		}
	})
}

// A group built WithRetry whose pool stops or shuts down, or whose context
// ends, while its tasks fail and wait for their delays still ends: its
// Done channel closes without a Wait, and no task is left queued behind a
// pool that refuses steps.
func TestGroupRetryEndsWhenThePoolStops(t *testing.T) {
	leak.Check(t)
	for i := range 300 {
		p := crew.New(2)
		ctx, cancel := context.WithCancel(context.Background())
		g := crew.NewGroup(ctx, p, crew.WithLimit(3),
			crew.WithRetry(crew.Retry{Attempts: 4, Delay: time.Duration(rand.N(300)) * time.Microsecond}))
		for range 8 {
			g.Go(func(ctx context.Context) error {
				if rand.N(3) == 0 {
					return nil
				}
				return errFlaky
			})
		}
		done := g.Done()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			switch i % 3 {
			case 0:
				sctx, c := context.WithTimeout(context.Background(), time.Duration(rand.N(200))*time.Microsecond)
				p.Shutdown(sctx)
				c()
			case 1:
				p.Stop()
			case 2:
				cancel()
			}
		}()
		recv(t, done, "the end of a retrying group whose pool stops")
		g.Wait()
		<-stopped
		cancel()
		p.Stop()
	}
}

// Backoff never panics, even for an invalid policy.
func TestRetryBackoffOfAnInvalidPolicy(t *testing.T) {
	leak.Check(t)
	for _, r := range []crew.Retry{{Attempts: 3, Delay: -10 * time.Millisecond}, {Attempts: 3, Delay: time.Second, MaxDelay: -time.Second}} {
		if d := r.Backoff(1); d < 0 || d > time.Second {
			t.Errorf("%+v.Backoff(1) = %v", r, d)
		}
	}
}

// With WithRetry only the last call counts: a task whose last call panics
// after an earlier call failed with a value leaves the zero value in its
// result slot (ResultGroup, MapErr, MapErrSeq), as one that panicked at
// once does.
func TestGroupRetryLastCallPanicLeavesZero(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	opt := crew.WithRetry(crew.Retry{Attempts: 2})
	fn := func(calls *atomic.Int64) func(context.Context, int) (int, error) {
		return func(context.Context, int) (int, error) {
			if calls.Add(1) == 1 {
				return 42, errFlaky
			}
			panic("second call")
		}
	}
	check := func(what string, out []int, err error, calls *atomic.Int64) {
		t.Helper()
		var pe *crew.PanicError
		if !errors.As(err, &pe) || calls.Load() != 2 {
			t.Fatalf("%s: err %v after %d calls, want a *PanicError after 2", what, err, calls.Load())
		}
		if len(out) != 1 || out[0] != 0 {
			t.Errorf("%s: results %v, want [0]: the last call panicked", what, out)
		}
	}

	var calls atomic.Int64
	rg := crew.NewResultGroup[int](context.Background(), p, opt)
	f := fn(&calls)
	rg.Go(func(ctx context.Context) (int, error) { return f(ctx, 0) })
	out, err := rg.Wait()
	check("ResultGroup", out, err, &calls)

	calls.Store(0)
	out, err = crew.MapErr(context.Background(), p, []int{0}, fn(&calls), opt)
	check("MapErr", out, err, &calls)

	calls.Store(0)
	out, err = crew.MapErrSeq(context.Background(), p, func(yield func(int) bool) { yield(0) }, fn(&calls), opt)
	check("MapErrSeq", out, err, &calls)
}
