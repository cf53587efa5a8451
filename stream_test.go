package crew_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

func waitStream(t *testing.T, s *crew.Stream) error {
	t.Helper()
	var err error
	within(t, groupDeadline, "Stream.Wait", func() { err = s.Wait() })
	return err
}

// Tasks finish in a random order; callbacks run in submission order, one
// at a time.
func TestStreamOrderedCallbacks(t *testing.T) {
	leak.Check(t)
	const n = 40
	p := crew.New(n)
	defer p.Stop()
	order := rand.Perm(n)
	fo := finishInOrder(order)
	s := crew.NewStream(context.Background(), p)
	var got []int // touched by callbacks only: no lock needed
	var inCallback, overlap atomic.Int64
	for i := range n {
		if err := s.Go(func(ctx context.Context) func() {
			fo.turn(i)
			return func() {
				if inCallback.Add(1) > 1 {
					overlap.Add(1)
				}
				got = append(got, i)
				inCallback.Add(-1)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitStream(t, s); err != nil {
		t.Fatal(err)
	}
	fo.check(t, order)
	if overlap.Load() != 0 {
		t.Fatal("callbacks overlapped")
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("callbacks ran in order %v", got)
	}
}

// Go blocks while window tasks are between Go and the end of their
// callback.
func TestStreamWindow(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	const window = 3
	s := crew.NewStream(context.Background(), p, crew.WithLimit(window))
	var accepted, called, worst atomic.Int64
	within(t, groupDeadline, "producing", func() {
		for i := range 500 {
			if err := s.Go(func(ctx context.Context) func() {
				return func() { called.Add(1) }
			}); err != nil {
				t.Error(err)
				return
			}
			if ahead := accepted.Add(1) - called.Load(); ahead > worst.Load() {
				worst.Store(ahead)
			}
			if i%7 == 0 { // tasks without a callback take room too
				s.Go(func(ctx context.Context) func() { return nil })
			}
		}
	})
	if err := waitStream(t, s); err != nil {
		t.Fatal(err)
	}
	if worst.Load() > window {
		t.Fatalf("%d tasks in flight, window %d", worst.Load(), window)
	}
	if called.Load() != 500 {
		t.Fatalf("%d callbacks ran, want 500", called.Load())
	}
}

// A panicking task: the callbacks before it run, none after it, and Wait
// returns the panic.
func TestStreamPanicStopsCallbacks(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	// Task 5 waits for task 6, so the window must hold all seven: with a
	// full window, Go(6) would wait (or run task 5 itself) and task 6
	// would never be submitted.
	s := crew.NewStream(context.Background(), p, crew.WithLimit(7))
	var got []int
	gate := make(chan struct{})
	fiveDone := make(chan struct{})
	for i := range 5 {
		s.Go(func(ctx context.Context) func() {
			return func() {
				got = append(got, i)
				if i == 4 {
					close(fiveDone)
				}
			}
		})
	}
	s.Go(func(ctx context.Context) func() {
		<-fiveDone // the callbacks before the panic have run
		<-gate
		panic("task 5")
	})
	s.Go(func(ctx context.Context) func() {
		close(gate) // task 6 finishes before task 5 panics
		return func() { got = append(got, 6) }
	})
	err := waitStream(t, s)
	var pe *crew.PanicError
	if !errors.As(err, &pe) || pe.Value != "task 5" {
		t.Fatalf("Wait = %v, want the panic", err)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("callbacks %v, want 0..4 and none after the panic", got)
	}
}

func TestStreamCallbackPanic(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(1))
	var got []int
	for i := range 5 {
		s.Go(func(ctx context.Context) func() {
			return func() {
				if i == 2 {
					panic("callback 2")
				}
				got = append(got, i)
			}
		})
	}
	err := waitStream(t, s)
	var pe *crew.PanicError
	if !errors.As(err, &pe) || pe.Value != "callback 2" {
		t.Fatalf("Wait = %v, want the callback's panic", err)
	}
	if !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("callbacks %v, want 0 1", got)
	}
}

func TestStreamMisuse(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p)
	s.Go(func(ctx context.Context) func() { return nil })
	if err := waitStream(t, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Go(func(ctx context.Context) func() { return nil }); err != crew.ErrGroupDone {
		t.Fatalf("Go after Wait = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s = crew.NewStream(ctx, p)
	cancel()
	if err := s.Go(func(ctx context.Context) func() { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Go on a cancelled stream = %v", err)
	}
	if err := s.Go(nil); err != crew.ErrNilTask {
		t.Fatalf("Go(nil) = %v", err)
	}
	if err := waitStream(t, s); err != crew.ErrNilTask {
		t.Fatalf("Wait = %v, want ErrNilTask", err)
	}
}

// A producer blocked on a full window returns when the stream is cancelled.
func TestStreamCancelWhileBlocked(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	s := crew.NewStream(ctx, p, crew.WithLimit(1))
	gate := make(chan struct{})
	started := make(chan struct{})
	s.Go(func(ctx context.Context) func() { close(started); <-gate; return nil })
	<-started // so that it is not skipped by the cancellation
	errc := make(chan error, 1)
	go func() { errc <- s.Go(func(ctx context.Context) func() { return nil }) }()
	cancel()
	if err := recv(t, errc, "the blocked Go"); !errors.Is(err, context.Canceled) {
		t.Fatalf("blocked Go = %v", err)
	}
	close(gate)
	if err := waitStream(t, s); err != nil {
		t.Fatalf("Wait = %v (no task was skipped)", err)
	}
}

// A callback that calls runtime.Goexit ends its goroutine (a worker here);
// the stream fails with ErrGoexit, no later callback runs and nothing
// hangs.
func TestStreamCallbackGoexit(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	// A window wide enough that Go never runs a task itself.
	s := crew.NewStream(context.Background(), p, crew.WithLimit(8))
	cbStarted := make(chan struct{})
	s.Go(func(ctx context.Context) func() {
		return func() { close(cbStarted); runtime.Goexit() }
	})
	var later atomic.Bool
	for range 3 {
		s.Go(func(ctx context.Context) func() { return func() { later.Store(true) } })
	}
	recv(t, cbStarted, "the first callback")
	if err := waitStream(t, s); err != crew.ErrGoexit {
		t.Fatalf("Wait = %v, want ErrGoexit", err)
	}
	if later.Load() {
		t.Fatal("a callback ran after the one that called Goexit")
	}
}

// On a pool that crashes on panics, a callback's runtime.Goexit still
// frees its task's place in the window: the next Go does not wait for ever.
func TestStreamCallbackGoexitOnCrashingPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithCrashOnPanic())
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(1), crew.WithAllErrors())
	exited := make(chan struct{})
	s.Go(func(ctx context.Context) func() {
		return func() { defer close(exited); runtime.Goexit() }
	})
	recv(t, exited, "the callback's Goexit")
	var err error
	within(t, groupDeadline, "Go after the callback's Goexit", func() {
		err = s.Go(func(ctx context.Context) func() { return nil })
	})
	if err != nil {
		t.Fatalf("Go = %v", err)
	}
	if err := waitStream(t, s); err != crew.ErrGoexit {
		t.Fatalf("Wait = %v, want ErrGoexit", err)
	}
}

// WithAllErrors keeps every error, but a callback's Goexit is one error.
func TestStreamCallbackGoexitCountsOnce(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithAllErrors())
	exited := make(chan struct{})
	s.Go(func(ctx context.Context) func() {
		return func() { defer close(exited); runtime.Goexit() }
	})
	recv(t, exited, "the callback's Goexit")
	if err := waitStream(t, s); err != crew.ErrGoexit {
		t.Fatalf("Wait = %v, want ErrGoexit once", err)
	}
}

// WithAllErrors joins errors in submission order, a callback's panic under
// its own task's place: task 0's callback panics after task 1 has.
func TestStreamAllErrorsInSubmissionOrder(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithAllErrors(), crew.WithLimit(4))
	release, panicked1 := make(chan struct{}), make(chan struct{})
	s.Go(func(ctx context.Context) func() {
		<-release
		return func() { panic("callback 0") }
	})
	s.Go(func(ctx context.Context) func() { defer close(panicked1); panic("task 1") })
	recv(t, panicked1, "task 1's panic")
	close(release)
	var joined interface{ Unwrap() []error }
	if err := waitStream(t, s); !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("Wait = %v, want two joined errors", err)
	}
	var values []any
	for _, err := range joined.Unwrap() {
		var pe *crew.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("joined error %v is not a *PanicError", err)
		}
		values = append(values, pe.Value)
	}
	if values[0] != "callback 0" || values[1] != "task 1" {
		t.Fatalf("joined panics %v, want callback 0 then task 1", values)
	}
}

// A stream's task accepted while the pool's queue is full runs, and its
// callback with it, once the queue has room, without waiting for Wait.
func TestStreamTaskStartsOnceAFullQueueHasRoom(t *testing.T) {
	leak.Check(t)
	p, release := fullQueue(t, 1)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(4))
	called := make(chan struct{})
	if err := s.Go(func(context.Context) func() { return func() { close(called) } }); err != nil {
		t.Fatal(err)
	}
	release()
	recv(t, called, "the callback, with Wait not called")
	if err := waitStream(t, s); err != nil {
		t.Fatal(err)
	}
}

// A task that a producer leaves in the stream's queue because the pool
// was full is not lost: its step waits for room, and the producers waiting
// for the window, outside the pool, run nothing beside the pool's limit.
// Here two producers wait behind a window of one while the pool stays full;
// once the pool has room, both tasks run and both producers return.
func TestStreamGoRunsATaskThePoolTookNoStepFor(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithQueueSize(0))
	defer p.Stop()
	release := gate(t, p)
	defer release()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(1))
	started, head := make(chan struct{}), make(chan struct{})
	if err := s.Go(func(context.Context) func() { close(started); <-head; return nil }); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, "the first task")
	// Once the first task's step ends, the gate alone fills the pool.
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	returned := make(chan error, 2)
	for range 2 {
		go func() {
			returned <- s.Go(func(context.Context) func() { ran.Add(1); return nil })
		}()
	}
	waitUntil(t, schedDeadline, "both producers to wait for room", func() bool {
		return strings.Count(leak.Dump(), "crew.(*Stream).Go(") == 2
	})
	close(head)
	// One producer's task is queued now, its step owed to a full pool.
	waitUntil(t, schedDeadline, "one producer to return", func() bool { return len(returned) == 1 })
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tasks ran beside the gate, in a pool limited to one", n)
	}
	release()
	for range 2 {
		if err := recvWithin(t, returned, "a producer"); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitStream(t, s); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 2 {
		t.Fatalf("%d of the 2 waiting producers' tasks ran", n)
	}
}

// Under GODEBUG=panicnil=1 a callback's panic(nil) fails the stream like
// any panic. Taken for runtime.Goexit, it would make the task leave the
// window twice, letting one task too many in, record no error and leave
// Wait to return nil.
func TestStreamCallbackPanicNilUnderGODEBUG(t *testing.T) {
	underPanicNil(t, func(t *testing.T) {
		leak.Check(t)
		p := crew.New(4)
		defer p.Stop()
		s := crew.NewStream(context.Background(), p, crew.WithLimit(2))
		if err := s.Go(func(context.Context) func() {
			return func() { panic(nil) } //nolint:govet // the point of the test
		}); err != nil {
			t.Fatal(err)
		}
		var pe *crew.PanicError
		if err := waitStream(t, s); !errors.As(err, &pe) || pe.Value != nil {
			t.Errorf("Wait = %v, want the callback's panic(nil) as a *PanicError", err)
		}
		if n := p.Stats().Panicked; n != 1 {
			t.Errorf("Stats().Panicked = %d, want 1", n)
		}
	})
}
