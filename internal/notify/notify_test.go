package notify

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// waitAll starts n waiters on c for flag, with ctx, and returns a channel
// that gets each one's result.
func waitAll(c *Cond, ctx context.Context, flag *atomic.Bool, n int) <-chan error {
	done := make(chan error, n)
	for range n {
		go func() { done <- c.Wait(ctx, flag.Load) }()
	}
	return done
}

// waiting polls until n goroutines wait on c.
func waiting(t *testing.T, c *Cond, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.waiters.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", c.waiters.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBroadcastWakesWaitersWithAndWithoutContext(t *testing.T) {
	leak.Check(t)
	var c Cond
	var flag atomic.Bool
	plain := waitAll(&c, nil, &flag, 3)
	withCtx := waitAll(&c, context.Background(), &flag, 3)
	waiting(t, &c, 6)
	c.Broadcast() // the condition is still false: nobody returns
	flag.Store(true)
	c.Broadcast()
	for range 3 {
		for _, done := range []<-chan error{plain, withCtx} {
			if err := result(t, done); err != nil {
				t.Errorf("Wait: %v", err)
			}
		}
	}
}

// result returns the next result from done, failing t if none comes.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not return")
		return nil
	}
}

func TestWaitReturnsWhenItsContextEnds(t *testing.T) {
	leak.Check(t)
	var c Cond
	var flag atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := waitAll(&c, ctx, &flag, 1)
	waiting(t, &c, 1)
	cancel()
	if err := result(t, done); err != context.Canceled {
		t.Errorf("Wait: %v, want context.Canceled", err)
	}
}

func TestBroadcastIfLeavesWaitersAloneWhileFalse(t *testing.T) {
	leak.Check(t)
	var c Cond
	var flag atomic.Bool
	done := waitAll(&c, context.Background(), &flag, 1)
	// The waiter makes its channel before it tests its condition.
	channel := func() chan struct{} {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ch
	}
	deadline := time.Now().Add(10 * time.Second)
	for channel() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the waiter made no channel")
		}
		time.Sleep(time.Millisecond)
	}
	ch := channel()
	c.BroadcastIf(flag.Load)
	if channel() != ch {
		t.Error("BroadcastIf closed the waiters' channel for a false condition")
	}
	flag.Store(true)
	c.BroadcastIf(flag.Load)
	if err := result(t, done); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

func TestWaitWithoutContextAllocatesNothing(t *testing.T) {
	leak.Check(t)
	var c Cond
	var round atomic.Int64
	kick := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// For each kick, end a round once the waiter waits for it.
		for range kick {
			for c.waiters.Load() == 0 {
				runtime.Gosched()
			}
			round.Add(1)
			c.Broadcast()
		}
	})
	defer wg.Wait()
	defer close(kick)
	allocs := testing.AllocsPerRun(100, func() {
		want := round.Load() + 1
		kick <- struct{}{}
		c.Wait(nil, func() bool { return round.Load() >= want })
	})
	if allocs != 0 {
		t.Errorf("Wait(nil, cond): %v allocations, want 0", allocs)
	}
}
