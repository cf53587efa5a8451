package crew

import (
	"context"
	"sync"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/engine"
)

// A Pool runs tasks on a bounded set of reusable worker goroutines.
//
// Workers start lazily, up to the limit given to [New], and retire after an
// idle timeout. Tasks wait in a queue, unbounded unless [WithQueueSize] says
// otherwise. All methods are safe for concurrent use.
//
// A pool made with a limit below 16 keeps its queue in one piece (Resize
// does not change how New split it), and workers take tasks from it in
// the order they were queued: on a pool of one worker, a goroutine's tasks
// run in the order it submitted them. A larger pool splits its queue into
// up to twice GOMAXPROCS shards (rounded up to a power of two), at most
// one per eight workers, so that producers and workers seldom meet; a
// goroutine fills the shards in turn and workers empty them in the same
// turn, so a task is taken after at most a few of its goroutine's later
// tasks per shard. In both, a goroutine descheduled in the middle of a
// submission holds back the tasks queued behind its own in that shard
// until it runs again; in a sharded pool the other shards' tasks pass them
// meanwhile. Tasks running on several workers at once may of course
// finish, and start, in any order.
//
// Work is submitted in three forms, the same on every type of crew that
// accepts work: the plain call ([Pool.Go], [Pool.Submit]) waits for room
// in a full bounded queue; the Try form ([Pool.TryGo], [Pool.TrySubmit])
// never waits; the Context form ([Pool.GoContext], [Pool.SubmitContext])
// waits until its context ends. Go takes a func() and returns only whether
// it was queued; Submit takes a func([context.Context]) error and returns
// a [Task] to wait on.
//
// A Pool must be made with New. The methods of a zero Pool report an
// error wrapping [ErrInvalid] where they return one (Submit through its
// Task), and otherwise do nothing: TryGo reports false, Stats zeros and
// Context [context.Background].
type Pool struct {
	c poolCore[func()]

	mu             sync.Mutex
	queued         taskList // Submit tasks accepted and not started (see dropListed)
	cancelsDrained uint64   // places of cancelled tasks that Shutdowns drained (see settleDrops)
}

// New returns a pool that runs at most maxWorkers tasks at a time.
//
// New panics if maxWorkers is less than 1 or an option is invalid (the
// panic value is an error wrapping [ErrInvalid]). Like make with a negative
// size, these are mistakes in the program rather than conditions to handle
// at run time, and a pool that failed to build has no sensible zero value
// to return.
func New(maxWorkers int, opts ...Option) *Pool {
	cfg := configure("crew.New", maxWorkers, opts)
	p := new(Pool)
	p.c.listed = p
	p.c.start(cfg, maxWorkers, engine.Config[func()]{Run: call}, stampFunc)
	return p
}

// call runs a task of a Pool's queue.
func call(task func()) { task() }

// stampFunc is a Pool's stamp: the task goes into a closure that carries
// its submission time and observes it as it runs.
func stampFunc(o *observer, task func(), t *Task) func() {
	enq := clock.Now()
	return func() { runObserved(o, callTask, task, t, enq) }
}

// callTask is call for runObserved: a Pool's task returns no error (a
// Submit task's is in its Task).
func callTask(task func()) error {
	task()
	return nil
}

// Go queues task to run on a worker and returns without waiting for it to
// run. It allocates nothing.
//
// If the pool's queue is bounded and full, Go waits for room, or returns
// [ErrQueueFull] on a pool built [WithNonBlocking]. Called from inside one
// of the pool's own tasks it waits too, since another worker may free room,
// unless every worker is a task waiting like it: then no room can ever
// come, and Go returns an error wrapping ErrQueueFull. Go returns
// [ErrStopped] once [Pool.Stop] or [Pool.Shutdown] has begun and
// [ErrNilTask] for a nil task. A panic in task goes to the pool's panic
// handler (see [WithPanicHandler]).
func (p *Pool) Go(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	return p.core().push(task, nil)
}

// TryGo queues task if that needs no waiting, and reports whether it did.
// It returns false when a bounded queue is full, once [Pool.Stop] or
// [Pool.Shutdown] has begun, and for a nil task.
func (p *Pool) TryGo(task func()) bool {
	return task != nil && p.core().tryPush(task, nil) == nil
}

// GoContext queues task, waiting while a bounded queue is full until ctx
// ends; it waits even on a pool built [WithNonBlocking]. It returns ctx's
// error if ctx ends first (or has ended), [ErrStopped] once [Pool.Stop] or
// [Pool.Shutdown] has begun, [ErrNilTask] for a nil task and an error
// wrapping [ErrInvalid] for a nil ctx. ctx bounds only the wait for room:
// a queued task runs whatever becomes of ctx.
func (p *Pool) GoContext(ctx context.Context, task func()) error {
	if task == nil {
		return ErrNilTask
	}
	return p.core().pushContext(ctx, task, nil)
}

// Submit queues task like [Pool.Go] and returns a [Task] to wait for its
// result, or to cancel it with [Task.Cancel]. For a typed result, see the
// function [Submit].
//
// task receives a context of its own, derived from the pool's (see
// [Pool.Context], which [Pool.Shutdown] cancels when its deadline
// passes): it carries the pool's values and deadline and is cancelled
// when the pool's is, when Task.Cancel is called while task runs, and
// once task has returned. It costs nothing until task calls its Done
// method (so does deriving a context from it); then it costs a
// [context.WithCancel] of the pool's context and one small allocation.
//
// Submit never fails silently: when task cannot be queued ([ErrStopped],
// [ErrQueueFull] on a pool built [WithNonBlocking], [ErrNilTask], or an
// error wrapping [ErrInvalid] for a nil or zero Pool) the returned Task is
// already done with that error, and a queued task that Shutdown drops
// completes with [ErrDropped]. A panic in task completes the Task with a
// [*PanicError] (unless the pool was built [WithCrashOnPanic]). Submit
// costs three small allocations: the Task, its channel and its run method.
func (p *Pool) Submit(task func(ctx context.Context) error) *Task {
	return p.submit(nil, task, pushGo)
}

// TrySubmit is [Pool.Submit] without waiting: it queues task if that needs
// no waiting and reports whether it did. When it did not, the [Task] is
// already done with the reason: [ErrQueueFull], [ErrStopped], [ErrNilTask],
// or an error wrapping [ErrInvalid].
func (p *Pool) TrySubmit(task func(ctx context.Context) error) (*Task, bool) {
	t := p.submit(nil, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [Pool.Submit] with [Pool.GoContext]'s wait: while a
// bounded queue is full it waits for room until ctx ends, and then returns
// a [Task] already done with ctx's error. ctx bounds only the wait for
// room; the task receives a context of its own, as with Submit.
func (p *Pool) SubmitContext(ctx context.Context, task func(ctx context.Context) error) *Task {
	if ctx == nil {
		t := &Task{p: p, done: make(chan struct{})}
		t.refuse(invalidf("SubmitContext: nil context"))
		return t
	}
	return p.submit(ctx, task, pushCtx)
}

// submit is the Submit forms.
func (p *Pool) submit(ctx context.Context, task func(context.Context) error, mode pushMode) *Task {
	t := &Task{p: p, fn: task, done: make(chan struct{})}
	switch {
	case task == nil:
		t.refuse(ErrNilTask)
	case !p.core().usable():
		t.refuse(errZeroPool)
	case ctx != nil && ctx.Err() != nil:
		t.refuse(ctx.Err())
	default:
		p.list(t)
		if err := p.pushTask(ctx, t, mode); err != nil {
			p.unlist(t)
			t.refuse(err)
		} else if !t.state.CompareAndSwap(pushing, accepted) && t.state.Load() == passed {
			// Shutdown's dropListed passed this task over while we were
			// pushing it: it was accepted, then dropped unstarted. (Or a
			// worker has begun it already: started.)
			t.finish(ErrDropped)
		}
	}
	return t
}

// pushTask queues a Submit task's run method as mode says.
func (p *Pool) pushTask(ctx context.Context, t *Task, mode pushMode) error {
	c := &p.c
	if mode == pushGo && !c.slow {
		return c.e.Push(nil, t.run)
	}
	return c.pushAs(ctx, t.run, t, mode)
}

// Context returns the context that [Pool.Submit] tasks receive. It is
// cancelled when [Pool.Shutdown]'s deadline passes, when [Pool.Stop] or
// Shutdown returns (a call from inside one of the pool's own tasks, which
// returns at once, leaves it to a later call from outside), and when the
// parent given [WithContext] is cancelled.
func (p *Pool) Context() context.Context { return p.core().context() }

// Done returns a channel that is closed once the pool will start none of
// the tasks it has queued: when [Pool.Stop] has run them all and is
// returning, or when [Pool.Shutdown]'s deadline has passed (or it found
// the pool paused) and it has dropped them. Unlike [Pool.Context], it is not closed by the end of
// [WithContext]'s parent. A zero Pool's channel is closed.
func (p *Pool) Done() <-chan struct{} { return p.core().done() }

// Wait blocks until no task is queued or running, without stopping the
// pool. It returns at once when the pool is idle. Tasks submitted while
// Wait waits also count, so under a steady stream of submissions it
// returns only at a moment when the pool is idle. Wait panics with an
// error wrapping [ErrInsideTask] when called from inside one of the pool's
// own tasks: it would wait for itself forever.
func (p *Pool) Wait() { p.core().wait() }

// Pause stops the pool's workers from starting queued tasks until
// [Pool.Resume]. Running tasks finish; new tasks still queue, and a
// bounded queue fills as usual (the plain forms then wait, the Try forms
// fail). A worker that was taking a task as Pause returned may still start
// it. While the pool is paused with tasks queued, [Pool.Wait] waits until
// Resume or Stop, and a group's Wait from outside the pool starts none of
// the group's tasks; a task of the pool that waits for a group still runs
// the group's tasks in its own slot, as running tasks go on. [Pool.Stop]
// resumes a paused pool and runs its queue; [Pool.Shutdown] drops the
// queue at once, as if its context had ended. Pause is idempotent, and
// does nothing once Stop or Shutdown has begun, or on a zero pool. It
// costs the workers one atomic load per task, paused or not.
func (p *Pool) Pause() { p.core().pause() }

// Resume lets a paused pool's workers start queued tasks again. It does
// nothing on a pool that is not paused.
func (p *Pool) Resume() { p.core().resume() }

// Paused reports whether the pool is paused: [Pool.Pause] was called, and
// neither [Pool.Resume], [Pool.Stop] nor a [Pool.Shutdown] from outside the
// pool's tasks since.
func (p *Pool) Paused() bool { return p.core().paused() }

// Stop stops the pool: it refuses new work ([ErrStopped]), runs every task
// already queued, and returns when they have finished and every worker
// goroutine has exited. Stop resumes a paused pool. It is idempotent and
// safe to call from several goroutines; each call returns once the pool
// has stopped.
//
// Called from inside one of the pool's own tasks, which could not finish
// while Stop waited, Stop closes the pool and returns at once; the queued
// tasks still run, the workers exit as they find the queue empty, and a
// Stop from outside the pool waits for them.
func (p *Pool) Stop() { p.core().stop() }

// Shutdown stops the pool like [Pool.Stop], but gives up waiting for
// queued tasks when ctx ends. Then it cancels the pool's context (see
// [Pool.Context]), removes every task that has not started, waits for the
// running ones to return, and reports a [*ShutdownError] with the exact
// number of tasks it dropped. Dropped [Pool.Submit] tasks complete with
// [ErrDropped]. Shutdown returns nil when every task had returned before
// ctx ended; when ctx ends while tasks still run (and see their context
// cancelled), Dropped may be 0. No worker goroutine outlives it, so a
// running task that ignores its context delays it. A nil ctx never ends:
// Shutdown(nil) waits like Stop.
//
// On a paused pool (see [Pool.Pause]) Shutdown does not wait for ctx: it
// drops the queue at once, cancels the pool's context, waits for the
// running tasks and returns a [*ShutdownError] that unwraps to
// [ErrPaused], even when nothing was queued.
//
// Called from inside one of the pool's own tasks, Shutdown closes the pool
// and returns an error wrapping [ErrInsideTask] at once, as Stop does, but
// does not resume a paused pool: its queued tasks run once it is resumed.
func (p *Pool) Shutdown(ctx context.Context) error { return p.core().shutdown(ctx) }

// Resize changes the worker limit to n. When n grows, workers start at once
// for queued tasks; when it shrinks, workers beyond n retire as they finish
// their current task, and idle ones ([Stats].Idle) as they are woken or
// reach their idle timeout. A worker that was looking for a task as Resize
// returned may still start one. No task is lost or run twice. A bounded
// queue keeps its size, and the queue its shards, as New split it for the
// first limit. While Stop or Shutdown runs the queue, Resize still
// applies; once the pool has ended (Stop has returned, or Shutdown's
// deadline has passed) it changes nothing and returns [ErrStopped]. It
// returns an error wrapping [ErrInvalid] if n < 1.
func (p *Pool) Resize(n int) error { return p.core().resize(n) }

// Stats returns a snapshot of the pool's counters. It takes no lock that
// tasks wait for; its cost grows with the live workers, whose counts it
// sums.
func (p *Pool) Stats() Stats { return p.core().stats() }

// Name returns the name given [WithName], or "".
func (p *Pool) Name() string { return p.core().poolName() }

// Latency returns the queue-wait and run-time histograms of a pool built
// [WithLatency], and false for any other pool. Each call takes a fresh
// snapshot.
func (p *Pool) Latency() (LatencySnapshot, bool) { return p.core().latency() }

// core returns p's core, nil for a nil Pool.
func (p *Pool) core() *poolCore[func()] {
	if p == nil {
		return nil
	}
	return &p.c
}

// pool makes a Pool an Executor.
func (p *Pool) pool() *Pool { return p }

// crashes reports whether p was built WithCrashOnPanic: group and layer
// tasks then let panics crash the program, like the pool's own tasks.
func (p *Pool) crashes() bool { return p != nil && p.c.crash }

// notePanic counts a panic recovered from a group or layer task in
// Stats().Panicked.
func (p *Pool) notePanic() { p.c.panicked.Add(1) }

// refuses reports why p takes no new work, or nil when it does.
func (p *Pool) refuses() error { return p.core().refuses() }

// stopping reports whether Stop or Shutdown has begun on p (see
// poolCore.stopGroups).
func (p *Pool) stopping() bool { c := p.core(); return c.usable() && c.stopping.Load() }

// over reports whether p has ended: it will start nothing more of what it
// queued (see end).
func (p *Pool) over() bool { return p.c.end.over() }

// lendIfInside runs wait, a wait for other work of p's. Called from inside
// one of p's tasks while p is saturated, it lends the task's slot
// meanwhile (see engine.Lend), so that the work waited for can run even
// when every worker is a task waiting so; otherwise it just waits (a
// worker is free for that work, and whichever task blocks last finds p
// saturated). Recognising the caller reads its stack, which it does only
// when p is saturated: call it only on a path about to block.
func (p *Pool) lendIfInside(wait func()) {
	if c := p.core(); c.usable() && c.e.Saturated() && c.e.InWorker() {
		c.e.Lend(wait)
		return
	}
	wait()
}

// maxWorkers returns p's worker limit, 1 for a zero pool.
func (p *Pool) maxWorkers() int { return max(1, p.Stats().MaxWorkers) }
