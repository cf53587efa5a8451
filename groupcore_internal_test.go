package crew

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// internalDeadline bounds the waits of these tests: a hang fails, it never
// holds the run.
const internalDeadline = 10 * time.Second

// parked reports whether a goroutine waits in c's await.
func parked[I any](c *core[I]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters > 0
}

// untilHolds yields until cond holds or ctx ends, and reports whether cond
// holds.
func untilHolds(ctx context.Context, cond func() bool) bool {
	for !cond() {
		if ctx.Err() != nil {
			return false
		}
		runtime.Gosched()
	}
	return true
}

// A Wait inside one of two workers of a pool, parked while the group's
// only task runs on the other, must be woken when that task makes a task
// runnable (Go, or SetLimit raising the limit) and then waits for it: the
// new task's step sits in the pool's queue with both workers held, so only
// the waiter, in its own slot, can run it. Had the waiter looked after the
// task was queued it would have run it; parked before, it must be told.
func TestParkedWaitIsWokenForATaskQueuedAfterItLooked(t *testing.T) {
	leak.Check(t)
	for _, c := range []struct {
		name string
		opts []GroupOption
		// queue makes b runnable from inside the group's running task.
		queue func(g *Group, b func(context.Context) error)
	}{
		{"Go", nil, func(g *Group, b func(context.Context) error) { g.Go(b) }},
		{"SetLimit", []GroupOption{WithLimit(1)}, func(g *Group, b func(context.Context) error) {
			g.Go(b) // beyond the limit: no step
			g.SetLimit(2)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			leak.Check(t)
			p := New(2)
			defer p.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), internalDeadline)
			defer cancel()
			waited := make(chan error, 1)
			p.Go(func() { // on one worker
				g := NewGroup(ctx, p, c.opts...)
				aRunning := make(chan struct{})
				g.Go(func(ctx context.Context) error { // on the other
					close(aRunning)
					if !untilHolds(ctx, func() bool { return parked(&g.c) }) {
						return ctx.Err()
					}
					bRan := make(chan struct{})
					c.queue(g, func(context.Context) error { close(bRan); return nil })
					select {
					case <-bRan:
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				})
				<-aRunning
				waited <- g.Wait()
			})
			if err := <-waited; err != nil {
				t.Fatalf("Wait = %v, want nil: the task queued after Wait parked never ran", err)
			}
		})
	}
}

// A task that a running task of a cancelled group queues after the
// cancellation (Done having been called, so that skipQueued has already
// run) must still end, run or skipped, so that Done's channel closes,
// even when its step never runs: here Shutdown's deadline drops it from
// the pool's queue after the running task has counted on it.
func TestDoneClosesWhenAStepQueuedAfterTheCancellationIsDropped(t *testing.T) {
	leak.Check(t)
	p := New(1)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := NewGroup(ctx, p)
	aIn, goB, bQueued, releaseA := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	g.Go(func(context.Context) error {
		close(aIn)
		<-goB
		g.Go(func(context.Context) error { return nil }) // its step is queued behind A
		close(bQueued)
		<-releaseA
		return nil
	})
	<-aIn
	done := g.Done()
	cancel()
	// The group's skipQueued, started by the cancellation, finds nothing.
	if !untilHolds(context.Background(), func() bool { return !strings.Contains(leak.Dump(), "skipQueued") }) {
		t.Fatal("unreachable")
	}
	close(goB)
	<-bQueued
	expired, cancelShutdown := context.WithCancel(context.Background())
	cancelShutdown()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(expired) }()
	<-p.Context().Done() // the pool's queue, B's step with it, is dropped
	close(releaseA)
	select {
	case <-done:
	case <-time.After(internalDeadline):
		t.Error("Done's channel not closed: the task queued after the cancellation was neither run nor skipped")
	}
	<-shut
	if err := g.Wait(); err != context.Canceled {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// Likewise when the step was owed (the pool's queue was full) and the
// owing goroutine gives it up, as the group is cancelled, after the
// running task that queued it has finished.
func TestDoneClosesWhenAnOwedStepQueuedAfterTheCancellationIsDropped(t *testing.T) {
	leak.Check(t)
	p := New(1)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := NewGroup(ctx, p)
	full := make(chan struct{}) // closed: the pool's queue is full for a Try
	g.c.steps.send = func(sctx context.Context, s layerStep, mode pushMode) error {
		select {
		case <-full:
			if mode == pushTry {
				return ErrQueueFull
			}
			// The owing goroutine: let the task that queued the step end first.
			untilHolds(context.Background(), func() bool {
				g.c.mu.Lock()
				defer g.c.mu.Unlock()
				return g.c.running == 0
			})
		default:
		}
		return g.c.steps.sendTo(sctx, s, mode)
	}
	aIn, goB := make(chan struct{}), make(chan struct{})
	g.Go(func(context.Context) error {
		close(aIn)
		<-goB
		g.Go(func(context.Context) error { return nil }) // its step is owed
		return nil
	})
	<-aIn
	done := g.Done()
	cancel()
	if !untilHolds(context.Background(), func() bool { return !strings.Contains(leak.Dump(), "skipQueued") }) {
		t.Fatal("unreachable")
	}
	close(full)
	close(goB)
	select {
	case <-done:
	case <-time.After(internalDeadline):
		t.Error("Done's channel not closed: the task queued after the cancellation was neither run nor skipped")
	}
	if err := g.Wait(); err != context.Canceled {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// A step that takes a task reserves the next step, for the tasks behind
// it, and submits it after it lets go of the group's mutex. When Stop
// begins in between, the group's steps for its queued tasks must not
// count that reservation: the pool may close before it is submitted, and
// the task it was for would then get no worker while the running tasks
// wait for it.
func TestStopBetweenAStepsReservationAndItsSubmissionLeavesNoTaskBehind(t *testing.T) {
	leak.Check(t)
	const n = 3
	p := New(n + 1)
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), internalDeadline) // a guard: the tasks give up
	defer cancel()
	g := NewGroup(ctx, p)
	stopped := make(chan struct{})
	var sends int
	g.c.steps.send = func(sctx context.Context, s layerStep, mode pushMode) error {
		g.c.mu.Lock()
		sends++
		successor := sends == 2 // the first step's, for the second task
		g.c.mu.Unlock()
		if successor {
			go func() { defer close(stopped); p.Stop() }()
			untilHolds(ctx, func() bool { return p.refuses() != nil })
		}
		return g.c.steps.sendTo(sctx, s, mode)
	}
	var started atomic.Int64
	all := make(chan struct{})
	p.Pause()
	for range n {
		g.Go(func(ctx context.Context) error {
			if started.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	p.Resume()
	select {
	case <-all:
	case <-ctx.Done():
		t.Errorf("%d of %d tasks started: a queued task got no step before the pool closed", started.Load(), n)
	}
	select {
	case <-stopped:
	case <-time.After(internalDeadline):
		t.Fatal("Stop did not begin in the step's submission, or did not return")
	}
	if err := g.Wait(); err != nil && !t.Failed() {
		t.Fatalf("Wait = %v, want nil", err)
	}
}
