package crew_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

func waitFuture[T any](t *testing.T, f *crew.Future[T]) (T, error) {
	t.Helper()
	var v T
	var err error
	within(t, groupDeadline, "Future.Wait", func() { v, err = f.Wait() })
	return v, err
}

func TestFutureValue(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	gate := make(chan struct{})
	f := crew.Submit(p, func(ctx context.Context) (string, error) {
		<-gate
		return "hello", nil
	})
	select {
	case <-f.Done():
		t.Fatal("Done before the function returned")
	default:
	}
	close(gate)
	recv(t, f.Done(), "Future.Done")
	if v, err := waitFuture(t, f); v != "hello" || err != nil {
		t.Fatalf("Wait = %q, %v", v, err)
	}
	if v, err := f.Wait(); v != "hello" || err != nil { // again
		t.Fatalf("second Wait = %q, %v", v, err)
	}
}

func TestFutureErrors(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	boom := errors.New("boom")
	if v, err := waitFuture(t, crew.Submit(p, func(ctx context.Context) (int, error) { return 7, boom })); v != 7 || err != boom {
		t.Fatalf("Wait = %d, %v; want 7, boom", v, err)
	}
	_, err := waitFuture(t, crew.Submit(p, func(ctx context.Context) (int, error) { panic("oops") }))
	var pe *crew.PanicError
	if !errors.As(err, &pe) || pe.Value != "oops" {
		t.Fatalf("Wait = %v, want a *PanicError", err)
	}
	if _, err := waitFuture(t, crew.Submit[int](p, nil)); err != crew.ErrNilTask {
		t.Fatalf("Submit(nil) = %v", err)
	}
	if _, err := waitFuture(t, crew.Submit(nil, func(ctx context.Context) (int, error) { return 1, nil })); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("Submit on a nil pool = %v", err)
	}
	stopped := crew.New(1)
	stopped.Stop()
	if _, err := waitFuture(t, crew.Submit(stopped, func(ctx context.Context) (int, error) { return 1, nil })); err != crew.ErrStopped {
		t.Fatalf("Submit on a stopped pool = %v", err)
	}
}

// A Future's function receives the pool's context: cancelled by Shutdown's
// deadline, like a Submit task's.
func TestFutureGetsThePoolContext(t *testing.T) {
	leak.Check(t)
	parent, cancel := context.WithCancel(context.Background())
	p := crew.New(2, crew.WithContext(parent))
	defer p.Stop()
	f := crew.Submit(p, func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		return true, context.Cause(ctx)
	})
	cancel()
	if ok, err := waitFuture(t, f); !ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, %v; want true, context.Canceled", ok, err)
	}
}

// Shutdown drops a queued future: it completes with ErrDropped rather than
// never.
func TestFutureDroppedByShutdown(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	running := make(chan struct{})
	blocker := crew.Submit(p, func(ctx context.Context) (int, error) {
		close(running)
		<-ctx.Done() // Shutdown drains the queue before it cancels ctx
		return 0, ctx.Err()
	})
	<-running
	queued := crew.Submit(p, func(ctx context.Context) (int, error) { return 1, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	p.Shutdown(ctx)
	if _, err := waitFuture(t, queued); err != crew.ErrDropped {
		t.Fatalf("queued future = %v, want ErrDropped", err)
	}
	if _, err := waitFuture(t, blocker); !errors.Is(err, context.Canceled) {
		t.Fatalf("running future = %v, want context.Canceled", err)
	}
}
