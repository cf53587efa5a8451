package crew_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// conn is a per-worker state that notices being used by two calls at once
// or after it was closed.
type conn struct {
	id     int64
	inUse  atomic.Int32
	closed atomic.Int32
	uses   int // touched only by the worker that owns it
}

type conns struct {
	mu   sync.Mutex
	all  []*conn
	next atomic.Int64
}

func (c *conns) make(context.Context) (*conn, error) {
	s := &conn{id: c.next.Add(1)}
	c.mu.Lock()
	c.all = append(c.all, s)
	c.mu.Unlock()
	return s, nil
}

func (c *conns) close(s *conn) {
	if s.closed.Add(1) != 1 {
		panic(fmt.Sprintf("state %d closed twice", s.id))
	}
}

func (c *conns) list() []*conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*conn(nil), c.all...)
}

// A worker's state is never used by two running calls at once, every call
// gets a live state, and every state is closed exactly once when its
// worker retires (here at Stop).
func TestFuncWithStateStateNeverShared(t *testing.T) {
	leak.Check(t)
	var cs conns
	var shared, usedClosed atomic.Int64
	p := crew.NewFuncWithState(8, cs.make, cs.close, func(ctx context.Context, s *conn, v int) error {
		if s.inUse.Add(1) != 1 {
			shared.Add(1)
		}
		if s.closed.Load() != 0 {
			usedClosed.Add(1)
		}
		s.uses++
		if v%3 == 0 {
			runtime.Gosched() // let another call try to use it
		}
		s.inUse.Add(-1)
		return nil
	})
	n := scaled(40_000, 8)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range n {
				p.Invoke(g*n + i)
			}
		})
	}
	wg.Wait()
	within(t, schedDeadline, "FuncWithState.Stop", p.Stop)
	if shared.Load() != 0 || usedClosed.Load() != 0 {
		t.Fatalf("%d calls shared a state, %d used a closed one", shared.Load(), usedClosed.Load())
	}
	all := cs.list()
	uses := 0
	for _, s := range all {
		if s.closed.Load() != 1 {
			t.Fatalf("state %d closed %d times after Stop", s.id, s.closed.Load())
		}
		uses += s.uses
	}
	if uses != 4*n || len(all) == 0 || len(all) > 8 {
		t.Fatalf("%d states for 8 workers, %d uses for %d values", len(all), uses, 4*n)
	}
}

// A worker that retires after its idle timeout closes its state; the next
// value gets a new one.
func TestFuncWithStateRetiringWorkerClosesState(t *testing.T) {
	leak.Check(t)
	var cs conns
	p := crew.NewFuncWithState(2, cs.make, cs.close, func(context.Context, *conn, int) error { return nil },
		crew.WithIdleTimeout(time.Millisecond))
	defer p.Stop()
	p.Invoke(1)
	p.Wait()
	waitFor(t, "the idle worker to retire and close its state", func() bool {
		all := cs.list()
		return len(all) == 1 && all[0].closed.Load() == 1 && p.Stats().Workers == 0
	})
	p.Invoke(2)
	p.Wait()
	if all := cs.list(); len(all) != 2 {
		t.Fatalf("%d states made, want a new one after retirement", len(all))
	}
}

// waitFor polls cond until it holds, failing the test after schedDeadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(schedDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// A failing constructor fails the value that needed the state, with an
// error wrapping ErrNoState and the constructor's; the worker tries again
// with its next value. ErrDiscardState and panics replace the state.
func TestFuncWithStateStateErrorsAndReplacement(t *testing.T) {
	leak.Check(t)
	errDown := errors.New("database down")
	var made, closed atomic.Int64
	failures := 2
	var panics atomic.Int64
	var errs []error // one worker: the handler is called by one goroutine at a time
	var seen []int64
	p := crew.NewFuncWithState(1,
		func(context.Context) (int64, error) {
			if failures > 0 {
				failures--
				return 0, errDown
			}
			return made.Add(1), nil
		},
		func(int64) { closed.Add(1) },
		func(ctx context.Context, s int64, v string) error {
			seen = append(seen, s)
			switch v {
			case "reset":
				return fmt.Errorf("connection reset: %w", crew.ErrDiscardState)
			case "panic":
				panic("boom")
			}
			return nil
		},
		quietPanics(&panics),
		crew.WithErrorHandler(func(err error) { errs = append(errs, err) }),
	)
	for _, v := range []string{"a", "b", "c", "d", "reset", "e", "panic", "f"} {
		p.Invoke(v)
		p.Wait() // one at a time: the pool's queue is sharded, not strictly FIFO
	}
	within(t, schedDeadline, "FuncWithState.Stop", p.Stop)
	// a, b: no state. c, d, reset: state 1, discarded. e, panic: state 2,
	// replaced after the panic. f: state 3.
	if len(errs) != 3 || !errors.Is(errs[0], crew.ErrNoState) || !errors.Is(errs[0], errDown) ||
		!errors.Is(errs[1], errDown) || !errors.Is(errs[2], crew.ErrDiscardState) {
		t.Fatalf("errors %v; seen %v", errs, seen)
	}
	if fmt.Sprint(seen) != "[1 1 1 2 2 3]" || made.Load() != 3 || closed.Load() != 3 || panics.Load() != 1 {
		t.Fatalf("states seen %v, %d made, %d closed, %d panics", seen, made.Load(), closed.Load(), panics.Load())
	}
	if s := p.Stats(); s.Failed != 4 || s.Panicked != 1 {
		t.Fatalf("Stats = %+v, want 4 failed (2 no state, 1 reset, 1 panic)", s)
	}
}

// A call that ends its goroutine with runtime.Goexit takes its state with
// it: the state is closed, and the replacement worker makes a new one. A
// panicking closer goes to the panic handler.
func TestFuncWithStateGoexitAndPanickingCloser(t *testing.T) {
	leak.Check(t)
	var made, closed atomic.Int64
	var panics atomic.Int64
	p := crew.NewFuncWithState(1,
		func(context.Context) (int64, error) { return made.Add(1), nil },
		func(s int64) {
			closed.Add(1)
			if s == 2 {
				panic("close failed")
			}
		},
		func(ctx context.Context, s int64, v int) error {
			if v == 0 {
				runtime.Goexit()
			}
			return nil
		},
		quietPanics(&panics),
	)
	p.Invoke(0)
	p.Wait()
	p.Invoke(1)
	within(t, schedDeadline, "FuncWithState.Stop", p.Stop)
	if made.Load() != 2 || closed.Load() != 2 || panics.Load() != 1 {
		t.Fatalf("%d made, %d closed, %d panics; want 2, 2, 1", made.Load(), closed.Load(), panics.Load())
	}
}

// A state is closed as soon as the call that panicked with it ends, not
// when its worker takes the next value; a closer that panics then loses
// neither that next value nor an ErrDiscardState error. A close that
// waited for the next value would run inside its call, where a panicking
// closer would consume the value; with ErrDiscardState, a close run before
// the error is reported would lose the error when it panics.
func TestFuncWithStateClosesAStateAsItsCallPanics(t *testing.T) {
	leak.Check(t)
	var made, closed, ran, panics atomic.Int64
	var errs []error // one worker: the handler is called by one goroutine at a time
	p := crew.NewFuncWithState(1,
		func(context.Context) (int64, error) { return made.Add(1), nil },
		func(int64) { closed.Add(1); panic("close failed") },
		func(_ context.Context, _ int64, v string) error {
			ran.Add(1)
			switch v {
			case "panic":
				panic("half-updated")
			case "reset":
				return fmt.Errorf("reset: %w", crew.ErrDiscardState)
			}
			return nil
		},
		crew.WithMinWorkers(1), quietPanics(&panics),
		crew.WithErrorHandler(func(err error) { errs = append(errs, err) }),
	)
	p.Invoke("panic")
	p.Wait()
	if made.Load() != 1 || closed.Load() != 1 {
		t.Fatalf("after the call that panicked: %d states made, %d closed", made.Load(), closed.Load())
	}
	for _, v := range []string{"next", "reset"} {
		p.Invoke(v)
		p.Wait()
	}
	within(t, schedDeadline, "FuncWithState.Stop", p.Stop)
	if ran.Load() != 3 || len(errs) != 1 || !errors.Is(errs[0], crew.ErrDiscardState) {
		t.Fatalf("the function ran %d times for 3 values; errors %v", ran.Load(), errs)
	}
	if made.Load() != 2 || closed.Load() != 2 || panics.Load() != 3 {
		t.Fatalf("%d made, %d closed, %d panics; want 2, 2, 3 (the call's and both closers')", made.Load(), closed.Load(), panics.Load())
	}
}

// A state discarded with ErrDiscardState is closed even if the error
// handler panics: closing it only after the handler returns would leave
// it in use.
func TestFuncWithStateDiscardsAStateWhenTheErrorHandlerPanics(t *testing.T) {
	leak.Check(t)
	var made, closed, panics atomic.Int64
	var seen []int64 // one worker
	p := crew.NewFuncWithState(1,
		func(context.Context) (int64, error) { return made.Add(1), nil },
		func(int64) { closed.Add(1) },
		func(_ context.Context, s int64, v string) error {
			seen = append(seen, s)
			if v == "reset" {
				return fmt.Errorf("reset: %w", crew.ErrDiscardState)
			}
			return nil
		},
		crew.WithMinWorkers(1), quietPanics(&panics),
		crew.WithErrorHandler(func(err error) { panic(err) }),
	)
	for _, v := range []string{"reset", "next"} {
		p.Invoke(v)
		p.Wait()
	}
	within(t, schedDeadline, "FuncWithState.Stop", p.Stop)
	if fmt.Sprint(seen) != "[1 2]" || made.Load() != 2 || closed.Load() != 2 || panics.Load() != 1 {
		t.Fatalf("states seen %v, want [1 2]; %d made, %d closed, %d panics", seen, made.Load(), closed.Load(), panics.Load())
	}
}

// Shutdown closes every state, also when its deadline drops values.
func TestFuncWithStateShutdownClosesStates(t *testing.T) {
	leak.Check(t)
	var cs conns
	started := make(chan struct{}, 2)
	p := crew.NewFuncWithState(2, cs.make, cs.close, func(ctx context.Context, s *conn, v int) error {
		started <- struct{}{}
		<-ctx.Done()
		return nil
	})
	for i := range 10 {
		p.Invoke(i)
	}
	recvWithin(t, started, "the first value")
	recvWithin(t, started, "the second value")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	var se *crew.ShutdownError
	if err := p.Shutdown(ctx); !errors.As(err, &se) || se.Dropped != 8 {
		t.Fatalf("Shutdown = %v, want 8 dropped", err)
	}
	for _, s := range cs.list() {
		if s.closed.Load() != 1 {
			t.Fatalf("state %d closed %d times after Shutdown", s.id, s.closed.Load())
		}
	}
	var zero crew.FuncPool[int]
	if err := zero.Invoke(1); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero FuncWithState: Invoke = %v", err)
	}
}

// Stop or Shutdown called from closeState, which runs on the retiring
// worker, returns at once as from inside a task instead of waiting for
// that worker to exit: as an idle worker retires, and as Stop retires the
// workers. Waiting for it would hang Stop for ever, and Shutdown past its
// deadline.
func TestFuncWithStateStopFromCloseStateReturns(t *testing.T) {
	leak.Check(t)
	t.Run("idle retirement", func(t *testing.T) {
		var p *crew.FuncPool[int]
		returned := make(chan error, 1)
		p = crew.NewFuncWithState(1,
			func(context.Context) (int, error) { return 1, nil },
			func(int) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				returned <- p.Shutdown(ctx)
			},
			func(context.Context, int, int) error { return nil },
			crew.WithIdleTimeout(time.Millisecond))
		if err := p.Invoke(1); err != nil {
			t.Fatal(err)
		}
		if err := recvWithin(t, returned, "Shutdown from closeState"); !errors.Is(err, crew.ErrInsideTask) {
			t.Errorf("Shutdown from closeState = %v, want ErrInsideTask", err)
		}
		within(t, schedDeadline, "Stop from outside", p.Stop)
	})
	t.Run("during Stop", func(t *testing.T) {
		var p *crew.FuncPool[int]
		p = crew.NewFuncWithState(1,
			func(context.Context) (int, error) { return 1, nil },
			func(int) { p.Stop() },
			func(context.Context, int, int) error { return nil })
		if err := p.Invoke(1); err != nil {
			t.Fatal(err)
		}
		within(t, schedDeadline, "Stop, whose closeState calls Stop", p.Stop)
	})
}

// Under GODEBUG=panicnil=1, a panic(nil) in closeState as the worker
// retires reaches the panic handler, as one inside a call does, rather
// than being recovered and dropped.
func TestFuncWithStateCloseStatePanicNilUnderGODEBUG(t *testing.T) {
	underPanicNil(t, func(t *testing.T) {
		leak.Check(t)
		var handled atomic.Int64
		p := crew.NewFuncWithState(1,
			func(context.Context) (int, error) { return 1, nil },
			func(int) { panic(nil) }, //nolint:govet // the point of the test
			func(context.Context, int, int) error { return nil },
			crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1) }))
		if err := p.Invoke(1); err != nil {
			t.Fatal(err)
		}
		p.Stop() // the worker retires and closes its state
		if n := handled.Load(); n != 1 {
			t.Errorf("the panic handler saw %d panics, want closeState's 1", n)
		}
	})
}
