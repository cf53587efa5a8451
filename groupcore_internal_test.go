package crew

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// internalDeadline bounds the waits of these tests: a hang fails, it never
// holds the run.
const internalDeadline = 10 * time.Second

// holdWorker runs a task on p that holds one of its workers until the
// returned release, which may be called more than once; it returns once
// the task runs.
func holdWorker(t *testing.T, p *Pool) (release func()) {
	t.Helper()
	in, gate := make(chan struct{}), make(chan struct{})
	if err := p.Go(func() { close(in); <-gate }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in:
	case <-time.After(internalDeadline):
		t.Fatal("the task holding a worker did not start")
	}
	return sync.OnceFunc(func() { close(gate) })
}

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

// A task accepted while the pool's bounded queue is full has its step
// queued past the bound (see stepper.owe), as Group.Go documents: a Stop
// that closes the pool before the task starts runs it, like the rest of
// the pool's queue, and Wait reports success.
func TestGroupTaskAcceptedOnAFullQueueRunsAtStop(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), internalDeadline)
	defer cancel()
	p := New(1, WithQueueSize(1))
	defer p.Stop()
	release := holdWorker(t, p)
	defer release()
	if err := p.Go(func() {}); err != nil { // fills the queue
		t.Fatal(err)
	}
	g := p.Group(context.Background())
	var ran atomic.Bool
	if err := g.Go(func(context.Context) error { ran.Store(true); return nil }); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Queued != 2 {
		t.Fatalf("pool Stats().Queued = %d, want 2: the plain task and the group's step", s.Queued)
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); p.Stop() }()
	if !untilHolds(ctx, p.c.e.Closed) {
		t.Fatal("Stop did not close the pool")
	}
	release()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatalf("Stop did not return; goroutines:\n\n%s", leak.Dump())
	}
	if err := g.Wait(); err != nil || !ran.Load() {
		t.Fatalf("Wait = %v with the task run: %v; want nil, run", err, ran.Load())
	}
}

// A group's step whose worker is one too many after Resize lowered the
// limit queues the step it would have kept past the full queue's bound.
// Should Stop close the pool between the full queue's refusal and that push
// (the hook's ErrStopped stands for it), the step keeps it after all and
// goes on with the next task, as a step on a stopping pool does, rather
// than leave the task without a step for Stop to skip.
func TestGroupStepOverLimitRefusedAsStopClosesGoesOn(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), internalDeadline)
	defer cancel()
	p := New(2, WithQueueSize(0))
	defer p.Stop()
	release := holdWorker(t, p)
	defer release()
	g := NewGroup(context.Background(), p, WithLimit(1))
	var armed, refusedPast atomic.Bool
	g.c.steps.send = func(sctx context.Context, s layerStep, mode pushMode) error {
		if mode == pushPast && armed.Load() && refusedPast.CompareAndSwap(false, true) {
			return ErrStopped
		}
		return g.c.steps.sendTo(sctx, s, mode)
	}
	started, head := make(chan struct{}), make(chan struct{})
	g.Go(func(context.Context) error { close(started); <-head; return nil })
	<-started
	var next atomic.Bool
	g.Go(func(context.Context) error { next.Store(true); return nil })
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	close(head)
	if !untilHolds(ctx, next.Load) {
		t.Fatalf("the group's next task did not run on the step refused as the pool closed (pushed past the bound: %v)", refusedPast.Load())
	}
	release()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
