package crew_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Starts seen by the tasks themselves respect the rate: a task's clock
// reading comes after its token, so over n starts the first and last are at
// least (n-Burst)×Per/Limit apart. (ratelimit_internal_test.go checks the
// token times exactly.)
func TestRateLimitedStartsAtTheRate(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	r := crew.Rate{Limit: 2, Per: 4 * time.Millisecond, Burst: 3} // one per 2ms
	rl := crew.NewRateLimited(p, r)
	var mu sync.Mutex
	var starts []time.Time
	begin := time.Now()
	for range 25 {
		if err := rl.Go(func() { mu.Lock(); starts = append(starts, time.Now()); mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
	}
	within(t, schedDeadline, "RateLimited.Wait", rl.Wait)
	if len(starts) != 25 {
		t.Fatalf("%d of 25 started", len(starts))
	}
	if d := starts[len(starts)-1].Sub(begin); d < 22*2*time.Millisecond {
		t.Fatalf("25 starts with a burst of 3 took %v: want at least 44ms", d)
	}
	if s := rl.Stats(); s.Unfinished != 0 || s.Waiting != 0 || s.Dropped != 0 {
		t.Fatalf("Stats after Wait = %+v", s)
	}
}

// Tasks waiting for a token hold no worker: a one-worker pool runs other
// work meanwhile.
func TestRateLimitedHoldsNoWorker(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: time.Hour})
	var ran atomic.Int64
	for range 3 {
		rl.Go(func() { ran.Add(1) })
	}
	// The pool's queue is not FIFO across its shards: wait for the task
	// that had a token before looking for the worker it must not hold.
	waitUntil(t, trapDeadline, "the task with a token to run", func() bool { return ran.Load() == 1 })
	done := make(chan struct{})
	p.Go(func() { close(done) })
	recvWithin(t, done, "a plain task while rate-limited ones wait")
	if s := rl.Stats(); ran.Load() != 1 || s.Waiting != 2 {
		t.Fatalf("%d ran, Stats %+v: want 1 ran and 2 waiting", ran.Load(), s)
	}
	// Stop does not wait an hour: the waiting tasks are dropped.
	task := rl.Submit(func(context.Context) error { return nil })
	within(t, schedDeadline, "Pool.Stop", p.Stop)
	within(t, schedDeadline, "RateLimited.Wait", rl.Wait)
	if err := task.Wait(); err != crew.ErrDropped {
		t.Fatalf("a Task still waiting at Stop reports %v", err)
	}
	if s := rl.Stats(); s.Dropped != 3 || s.Unfinished != 0 {
		t.Fatalf("Stats after Stop = %+v, want 3 dropped", s)
	}
	if err := rl.Go(func() {}); err != crew.ErrStopped {
		t.Fatalf("Go after Stop = %v", err)
	}
}

func TestRateLimitedErrorsAndPanics(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	p := crew.New(2, quietPanics(&panics))
	defer p.Stop()
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1000, Per: time.Second, Burst: 10})
	errX := errors.New("x")
	if err := rl.Submit(func(context.Context) error { return errX }).Wait(); err != errX {
		t.Fatalf("Submit = %v", err)
	}
	rl.Go(func() { panic("boom") })
	rl.Go(func() {})
	within(t, schedDeadline, "RateLimited.Wait", rl.Wait)
	if panics.Load() != 1 {
		t.Fatalf("%d panics handled", panics.Load())
	}
	if err := rl.Go(nil); err != crew.ErrNilTask {
		t.Fatalf("Go(nil) = %v", err)
	}
	if err := rl.Submit(nil).Wait(); err != crew.ErrNilTask {
		t.Fatalf("Submit(nil) = %v", err)
	}
	var zero crew.RateLimited
	if err := zero.Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("zero RateLimited: Go = %v", err)
	}
	zero.Wait()
	for _, r := range []crew.Rate{{}, {Limit: 1}, {Per: 1}, {Limit: 1, Per: 1, Burst: -1}, {Limit: 1, Per: time.Hour, Burst: 1 << 40}} {
		if err, ok := recoverErr(func() { crew.NewRateLimited(p, r) }); !ok || !errors.Is(err, crew.ErrInvalid) {
			t.Fatalf("NewRateLimited(%+v): %v", r, err)
		}
	}
	if err, ok := recoverErr(func() { crew.NewRateLimited(nil, crew.Rate{Limit: 1, Per: 1}) }); !ok || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("NewRateLimited(nil): %v", err)
	}
}

// On a bounded non-blocking pool, a RateLimited never fails with
// ErrQueueFull: its own queue holds the tasks, and the steps the pool
// refuses are offered again.
func TestRateLimitedOnFullNonBlockingPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(1), crew.WithNonBlocking())
	defer p.Stop()
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: time.Microsecond, Burst: 50})
	release := gate(t, p)
	var ran atomic.Int64
	for range 50 {
		if err := rl.Go(func() { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	release()
	within(t, schedDeadline, "RateLimited.Wait", rl.Wait)
	if ran.Load() != 50 {
		t.Fatalf("%d of 50 ran", ran.Load())
	}
}

// Every valid Rate works, the fastest included: Per/Limit rounds up to one
// token a nanosecond instead of dividing by zero; an invalid one is
// rejected with ErrInvalid, by NewRateLimited and by WithKeyRate alike.
func TestRateExtremes(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	for _, r := range []crew.Rate{
		{Limit: math.MaxInt, Per: time.Second},
		{Limit: math.MaxInt, Per: math.MaxInt64},
		{Limit: 1, Per: 1},
		{Limit: 3, Per: 10, Burst: math.MaxInt / 64},
	} {
		rl := crew.NewRateLimited(p, r)
		k := crew.NewKeyed[int](p, crew.WithKeyRate(r))
		if err := rl.Submit(func(context.Context) error { return nil }).Wait(); err != nil {
			t.Errorf("%+v: RateLimited task = %v", r, err)
		}
		if err := k.Submit(1, func(context.Context) error { return nil }).Wait(); err != nil {
			t.Errorf("%+v: keyed task = %v", r, err)
		}
	}
	for _, r := range []crew.Rate{
		{Limit: 0, Per: time.Second},
		{Limit: 1, Per: 0},
		{Limit: 1, Per: time.Second, Burst: -1},
		{Limit: 1, Per: math.MaxInt64, Burst: 5},
	} {
		if err, ok := recoverErr(func() { crew.NewRateLimited(p, r) }); !ok || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("NewRateLimited(%+v): panic %v, want ErrInvalid", r, err)
		}
		if err, ok := recoverErr(func() { crew.NewKeyed[int](p, crew.WithKeyRate(r)) }); !ok || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("WithKeyRate(%+v): panic %v, want ErrInvalid", r, err)
		}
	}
}
