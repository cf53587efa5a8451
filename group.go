package crew

import (
	"context"
	"sync"
)

// A Group runs tasks on a pool as one unit of work, with the semantics of
// [golang.org/x/sync/errgroup]: [Group.Wait] waits for all of them and
// returns the first error, and the first error cancels the group's
// context, which every task receives. Unlike errgroup, a Group
//
//   - runs its tasks on the pool's reusable workers, bounded by the pool
//     (and by [WithLimit]), instead of one new goroutine per task;
//   - does not start a task that is still queued when the group is
//     cancelled (by an error, the parent context or the pool's
//     [Pool.Shutdown]): such a task is skipped, and if no task failed Wait
//     returns the context's cause;
//   - returns panics from Wait as a [*PanicError] (or re-panics there
//     [WithRepanic]) instead of crashing the program from another goroutine;
//   - never makes [Group.Go] block: Go queues the task in the group and
//     returns, so a task may call Go on its own group without deadlock;
//   - reports misuse as errors: Go after Wait returned gives
//     [ErrGroupDone], a nil task [ErrNilTask], a stopped pool [ErrStopped].
//
// [WithAllErrors] collects every error instead of the first, WithLimit
// bounds the group's concurrency below the pool's and [WithTaskTimeout]
// gives each task a deadline. A Group must be made with [NewGroup] or
// [Pool.Group] and is safe for concurrent use; the methods of a zero or
// nil Group return an error wrapping [ErrInvalid] (and Context a nil
// context). Wait must be called once the tasks are submitted: it releases
// the group's context.
//
// Tasks that block until other tasks run (a producer and its consumer)
// need room to run at once: a group hands its queued tasks to the pool as
// its earlier tasks start, so a task waiting for a later task of its group
// waits for ever if every worker of the pool is held by such waiting tasks:
// give the pool a limit that lets the tasks that wait for each other run
// at once.
type Group struct {
	c core[func(context.Context) error]
}

// groupFIFOs are the queues that finished Groups hand on to new ones.
var groupFIFOs sync.Pool

// NewGroup returns a group of tasks that run on p. The group's context is
// derived from ctx; it is cancelled when a task fails (unless
// [WithAllErrors]), when ctx is, when p's context is ([Pool.Shutdown]'s
// deadline, see [Pool.Context]) and when [Group.Wait] returns. A group
// costs a few small allocations whatever the number of its tasks. NewGroup
// panics with an error wrapping [ErrInvalid] if ctx is nil or an option is
// nil or invalid.
func NewGroup(ctx context.Context, p *Pool, opts ...GroupOption) *Group {
	g := new(Group)
	g.c.exec = runGroupTask
	g.c.mustInit(ctx, p, opts, &groupFIFOs)
	return g
}

// Group returns [NewGroup](ctx, p, opts...).
func (p *Pool) Group(ctx context.Context, opts ...GroupOption) *Group {
	return NewGroup(ctx, p, opts...)
}

func runGroupTask(ctx context.Context, _ int, task func(context.Context) error) error {
	return task(ctx)
}

// Go submits task to run on the pool with the group's context (or, with
// [WithTaskTimeout], a child of it with a deadline). It never blocks: the
// task waits in the group's queue until the pool and the group's limit let
// it start; when thousands wait, Go yields the processor now and then so
// that they catch up. Go allocates nothing beyond the task's own closure
// (the group's queue grows in recycled chunks).
//
// Go returns an error, and the task never runs, only when the group cannot
// accept it: [ErrGroupDone] after [Group.Wait] has returned, [ErrNilTask]
// for a nil task, [ErrStopped] once the pool has begun to stop (and an
// error wrapping [ErrInvalid] for a zero pool). The last three are also
// recorded as the group's error, so that Wait reports them even if Go's
// result is ignored.
// An accepted task is skipped, not run, if the group is cancelled before it
// starts. Go may be called while Wait waits, including from a task of the
// group; Wait then waits for the new task too.
//
// If the pool's queue is bounded and full, Go still does not wait: the
// step that will run the task goes into the pool's queue past its bound
// (see [WithQueueSize]), and a Stop that begins before the task starts
// runs it like the rest of the queue.
func (g *Group) Go(task func(ctx context.Context) error) error {
	return g.core().accept(task, task == nil, false)
}

// TryGo is [Group.Go] for a task that must start at once: it accepts task
// only if the group's limit ([WithLimit]) leaves room for it to start now,
// as errgroup's TryGo does, and reports whether it did. Without a limit it
// is Go. It returns false, and records nothing, when the limit is reached;
// for the reasons Go returns an error it returns false and records them as
// Go does.
func (g *Group) TryGo(task func(ctx context.Context) error) bool {
	return g.core().accept(task, task == nil, true) == nil
}

// SetLimit changes the group's limit ([WithLimit]) to n, at any time, tasks
// running or not: a higher limit starts queued tasks at once, up to it; a
// lower one lets the running tasks finish and starts none until fewer
// than n run. A negative n removes the limit (the pool's still holds).
// SetLimit returns an error wrapping [ErrInvalid] for n == 0, which would
// leave queued tasks with no way to start, and for a nil or zero Group.
func (g *Group) SetLimit(n int) error { return g.core().setLimit(n) }

// Wait blocks until every task submitted with [Group.Go] has finished or
// been skipped, and returns the first error ([WithAllErrors]: all of them,
// joined in submission order). A panic comes back as a [*PanicError], with
// the panic's stack; [WithRepanic] makes Wait panic with it instead, after
// every task has finished. A panic that Wait does not report, as it
// reports an earlier error (WithRepanic: an earlier panic), Wait passes to
// the pool's panic handler (see [WithPanicHandler]) before it returns
// (when several goroutines wait, the Wait that ends the group does): no
// panic goes unseen. If tasks were skipped because the group's context was
// cancelled and no task failed, Wait returns the context's cause.
//
// While it waits, Wait runs queued tasks of the group on the calling
// goroutine when the group's limit allows, in a slot of the pool's: from
// outside the pool, a slot it borrows while the pool is not paused and has
// fewer live workers than its limit or a parked worker to lend one; from
// inside one of the pool's own tasks, that task's own, so a group waited
// on inside a task of the same pool cannot deadlock for want of workers.
// Either way the pool never runs more tasks at once than its limit. Such
// a task runs as if called by Wait: if it calls [runtime.Goexit]
// (t.FailNow, say), the goroutine that called Wait exits. A
// task must not call Wait on its own group: it would wait for itself.
//
// When Wait returns, the group's context is cancelled and later Go calls
// return [ErrGroupDone]; later Wait calls return the same result at once.
func (g *Group) Wait() error { return g.core().wait() }

// Done marks the group complete once its tasks are, and returns a
// channel that is closed then: as soon as no task of the group is left
// unfinished (queued, running or waiting to be retried). Call it after the
// last Go, to wait for the group in a select; tasks of the group may still
// Go more tasks until the last one finishes. Once the channel is closed,
// Go returns [ErrGroupDone] and [Group.Wait] returns the outcome at once;
// call Wait still, since it reports the errors and releases the group's
// context. Done on a nil or zero Group returns a closed channel.
func (g *Group) Done() <-chan struct{} { return g.core().doneChan() }

// Context returns the group's context: the one its tasks receive (without
// [WithTaskTimeout]'s deadline), cancelled by the first error and when
// [Group.Wait] returns.
func (g *Group) Context() context.Context { return g.core().context() }

// core returns g's core, nil for a nil Group.
func (g *Group) core() *core[func(context.Context) error] {
	if g == nil {
		return nil
	}
	return &g.c
}
