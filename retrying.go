package crew

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Retrying runs the tasks of its Submit forms on an [Executor] (a
// [Pool], a [RateLimited], a [Subpool], or another Retrying) and calls a
// task that returns an error again, as its [Retry] policy says: up to
// Attempts calls, with a growing, jittered delay between them, each call
// with Timeout's deadline if set. A task is not called again when it
// returns nil or an error wrapped with [Permanent], panics, or is
// cancelled ([Task.Cancel]) while it runs, nor once the pool has begun to
// stop. Its [Task] reports the last call's error (without the Permanent
// wrapper).
//
// A task waiting for its delay holds no worker and no goroutine: a timer
// submits it to the executor again when the delay is over, behind the
// tasks submitted meanwhile. So a failing dependency does not take the
// pool's workers while its callers back off, unlike [Retry.Do] in a task.
//
// The Go forms run a func(), which cannot fail, so there is nothing to
// retry: they are the executor's own (see [Retrying.Go]). A Retrying is an
// Executor, so the layers that take one stack on it, and code that takes
// an Executor with a SubmitContext method gets its retries.
//
// # Cost
//
// A Submit costs a few small allocations beyond the executor's submission,
// and each call a context; each delay costs a timer, made once per task.
//
// A Retrying must be made with [NewRetrying]; its methods are safe for
// concurrent use. Several may share one pool.
type Retrying struct {
	l      layer
	policy Retry

	mu      sync.Mutex
	pending map[*retryTask]struct{} // accepted tasks that are not running: a step is coming for each, or it waits for its delay
	waiting int                     // of those, the ones waiting for their delay
	retried atomic.Uint64
}

// retryTask is a task of a Retrying's Submit forms.
type retryTask struct {
	r    *Retrying
	t    *Task
	fn   func(context.Context) error
	step layerStep // rt.call under r's number, made once

	calls   int         // calls begun; written by the step that runs it
	err     error       // the last call's error; read once the task is accepted again
	timer   *time.Timer // brings it back after its delay; made at its first
	delayed bool        // waits for its delay (in pending); guarded by r.mu
}

// NewRetrying returns a [Retrying] that runs its tasks on ex, calling a
// failing one again as r says. It panics with an error wrapping
// [ErrInvalid] if ex is nil or r is invalid (see [Retry]). It holds no
// goroutine while idle.
func NewRetrying(ex Executor, r Retry) *Retrying {
	if err := r.check(); err != nil {
		panic(fmt.Errorf("crew.NewRetrying: %w", err))
	}
	rt := &Retrying{policy: r, pending: make(map[*retryTask]struct{})}
	rt.l.init(ex, "NewRetrying", rt.abandon)
	return rt
}

// Go is the executor's Go: a func() returns no error, so it is called
// once, as if submitted to the executor itself. Neither [Retrying.Wait] nor
// [Retrying.Stats] counts it. It returns an error wrapping [ErrInvalid]
// for a zero or nil Retrying, and whatever the executor's Go returns.
func (r *Retrying) Go(task func()) error {
	if r.layer().zero() {
		return errZeroLayer
	}
	return r.l.steps.ex.Go(task)
}

// TryGo is the executor's TryGo (see [Retrying.Go]); false for a zero or
// nil Retrying.
func (r *Retrying) TryGo(task func()) bool {
	return !r.layer().zero() && r.l.steps.ex.TryGo(task)
}

// GoContext is the executor's GoContext (see [Retrying.Go]).
func (r *Retrying) GoContext(ctx context.Context, task func()) error {
	if r.layer().zero() {
		return errZeroLayer
	}
	return r.l.steps.ex.GoContext(ctx, task)
}

// Submit submits task to the executor as its Go would (waiting for room
// in a full bounded pool queue, [ErrQueueFull] on a pool built
// [WithNonBlocking]) and returns a [Task] to wait for its result. Each
// call of task receives a context of its own, which ends when the call
// returns, when the pool ends, when [Task.Cancel] is called during the
// call, and at Timeout's deadline if the policy sets one. A call that
// returns an error the policy retries is followed, after its delay, by
// another submission to the executor, which never waits (a step that a
// full pool queue refuses goes into it past its bound, see
// [WithQueueSize]; one that another executor refuses for now is handed
// over later by a goroutine of the Retrying's).
//
// The Task's Wait returns nil once a call succeeds, and otherwise the
// last call's error: the error inside [Permanent], a [*PanicError], or
// the error of the call that used up the attempts, or that was made once
// the pool had begun to stop. A Task that cannot be submitted is already
// done with the reason ([ErrStopped], [ErrNilTask], ...).
//
// [Task.Cancel] keeps the next call from being made: a task waiting for
// its delay ends at once, and Wait returns the last call's error joined
// with [context.Canceled] (context.Canceled alone if it was never
// called); it counts in Stats().Cancelled. When the pool ends ([Pool.Stop]
// once the pool's queue has run, or [Pool.Shutdown]'s deadline), a task
// waiting for its delay, or whose next call cannot be submitted any more,
// is dropped: Wait returns its last call's error joined with
// [ErrDropped], and it counts in Stats().Dropped. Stop and Shutdown never
// wait for a delay. The same holds when the executor under r refuses the
// next call for good: a [Subpool] that was stopped, say.
func (r *Retrying) Submit(task func(ctx context.Context) error) *Task {
	return r.submit(nil, task, pushGo)
}

// TrySubmit is [Retrying.Submit] if the first submission needs no
// waiting: it reports whether task was queued, and if not, the [Task] is
// already done with the reason.
func (r *Retrying) TrySubmit(task func(ctx context.Context) error) (*Task, bool) {
	t := r.submit(nil, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [Retrying.Submit] waiting for room for the first
// submission until ctx ends; it then fails with ctx's error. ctx bounds
// only that wait: the calls do not receive it. It returns an error
// wrapping [ErrInvalid] for a nil ctx.
func (r *Retrying) SubmitContext(ctx context.Context, task func(ctx context.Context) error) *Task {
	return r.submit(ctx, task, pushCtx)
}

// Wait blocks until every task of r's Submit forms has finished, or been
// dropped, those waiting for a delay included. Tasks submitted while it
// waits count too; the Go forms' tasks do not (see [Retrying.Go]).
// Called from inside one of r's tasks, which it would wait for forever,
// Wait panics with an error wrapping [ErrInsideTask], like [Pool.Wait].
func (r *Retrying) Wait() { r.layer().wait("Retrying") }

// Stats returns a snapshot of r's counters ([LayerStats]): Waiting counts
// the tasks waiting for their delay, and Retried the failed calls that
// were followed by a delay.
func (r *Retrying) Stats() LayerStats { return r.layer().stats(r.counts) }

func (r *Retrying) counts(s *LayerStats) {
	r.mu.Lock()
	s.Waiting = r.waiting
	r.mu.Unlock()
	s.Retried = r.retried.Load()
}

// layer returns r's layer, nil if r is nil.
func (r *Retrying) layer() *layer {
	if r == nil {
		return nil
	}
	return &r.l
}

// pool makes a Retrying an Executor.
func (r *Retrying) pool() *Pool {
	if r == nil {
		return nil
	}
	return r.l.p
}

// submit is the Submit forms.
func (r *Retrying) submit(ctx context.Context, task func(context.Context) error, mode pushMode) *Task {
	l := r.layer()
	t := &Task{done: make(chan struct{}), layered: true}
	t.state.Store(accepted)
	if err := l.check(ctx, task == nil, mode); err != nil {
		t.refuse(err)
		return t
	}
	t.p = l.p
	rt := &retryTask{r: r, t: t, fn: task}
	rt.step = l.mark(rt.call, rt)
	t.retry = rt
	r.mu.Lock()
	if err := l.refuses(); err != nil {
		r.mu.Unlock()
		t.refuse(err)
		return t
	}
	r.pending[rt] = struct{}{}
	l.accept()
	r.mu.Unlock()
	if err := l.steps.submit(ctx, rt.step, mode); err != nil {
		r.mu.Lock()
		_, ours := r.pending[rt]
		delete(r.pending, rt)
		r.mu.Unlock()
		if ours { // else the pool ended and abandon dropped it
			l.done(1)
			t.refuse(err)
		}
	}
	return t
}

// call is a task's step: it makes one call, and then finishes the task or
// puts it aside for its delay.
func (rt *retryTask) call() {
	r, t := rt.r, rt.t
	r.mu.Lock()
	_, ours := r.pending[rt]
	delete(r.pending, rt)
	r.mu.Unlock()
	if !ours {
		return // dropped as the pool ended
	}
	ctx, cancel := context.WithCancel(t.p.c.ctx)
	defer cancel()
	t.lazy.Store(&taskCancel{ctx: ctx, cancel: cancel}) // before start: a Cancel that sees it started finds it
	if !t.start() {
		r.l.cancelled.Add(1) // passed over: Task.Cancel finished it
		r.l.done(1)
		return
	}
	rt.calls++
	c := &t.p.c
	returned := false
	defer func() {
		if returned {
			return
		}
		var v any
		if !c.crash {
			v = recover()
		}
		t.unwound(v)
		r.l.done(1)
	}()
	err := r.policy.call(ctx, rt.fn)
	cancel() // the call's context ends with the call
	if err != nil && rt.later(err) {
		returned = true
		return
	}
	t.ended()
	err = unwrapPermanent(err)
	if err != nil && c.onError != nil {
		c.onError(err) // before Wait returns; a panic in it is the task's
	}
	returned = true
	if err != nil {
		c.failed.Add(1)
	}
	t.finish(err)
	r.l.done(1)
}

// later puts the task, whose call returned err, aside for its delay if the
// policy calls it again, the pool takes work and Task.Cancel has not
// interrupted the call, and reports whether it did.
func (rt *retryTask) later(err error) bool {
	r := rt.r
	if !r.policy.again(context.Background(), rt.calls, err) {
		return false
	}
	rt.err = err
	r.mu.Lock()
	defer r.mu.Unlock()
	// Under mu: a Cancel that claims the task from here on finds it
	// delayed (see cancelDelayed), and abandon, which comes after the pool
	// refuses work, finds it pending.
	if r.l.refuses() != nil || !rt.t.state.CompareAndSwap(started, accepted) {
		return false
	}
	r.pending[rt] = struct{}{}
	rt.delayed = true
	r.waiting++
	r.retried.Add(1)
	d := r.policy.Backoff(rt.calls)
	if rt.timer == nil {
		rt.timer = time.AfterFunc(d, rt.wake)
	} else {
		rt.timer.Reset(d)
	}
	return true
}

// wake runs on the timer's goroutine when the delay is over: it submits
// the task's step again, never waiting.
func (rt *retryTask) wake() {
	r := rt.r
	r.mu.Lock()
	if !rt.delayed { // cancelled or dropped meanwhile
		r.mu.Unlock()
		return
	}
	rt.delayed = false
	r.waiting--
	r.mu.Unlock()
	switch err := r.l.steps.submit(nil, rt.step, pushTry); err {
	case nil:
	case ErrQueueFull:
		r.l.steps.owe(rt.step)
	default:
		rt.stepDropped() // the executor refuses for good: its pool, or a Subpool, has stopped
	}
}

// cancelDelayed is Task.Cancel's, once it has claimed the task: it
// finishes it, and counts it out if it waits for its delay (else its step
// passes over it, or it is dropped, and counts it then).
func (rt *retryTask) cancelDelayed() {
	r := rt.r
	r.mu.Lock()
	delayed := rt.delayed
	if delayed {
		rt.delayed = false
		r.waiting--
		delete(r.pending, rt)
		rt.timer.Stop()
	}
	r.mu.Unlock()
	rt.t.finish(joinLast(rt.err, context.Canceled))
	if delayed {
		r.l.cancelled.Add(1)
		r.l.done(1)
	}
}

// stepDropped drops the task, whose step the executor dropped or refused
// as the pool stopped, unless abandon did.
func (rt *retryTask) stepDropped() {
	r := rt.r
	r.mu.Lock()
	_, ours := r.pending[rt]
	delete(r.pending, rt)
	r.l.holdDrop()
	r.mu.Unlock()
	if !ours {
		rt = nil
	}
	r.dropTaken(rt)
}

// abandon drops every task that will not be called again once the pool
// has ended: those waiting for their delay, and those whose step the
// pool's end dropped.
func (r *Retrying) abandon() {
	r.mu.Lock()
	rts := make([]*retryTask, 0, len(r.pending))
	for rt := range r.pending {
		if rt.delayed {
			rt.delayed = false
			rt.timer.Stop() // if it fired, wake finds it not delayed
		}
		rts = append(rts, rt)
	}
	clear(r.pending)
	r.waiting = 0
	r.mu.Unlock()
	r.drop(rts...)
}

// dropTaken drops rt, if not nil, taken from pending under holdDrop,
// then lets Stop return.
func (r *Retrying) dropTaken(rt *retryTask) {
	defer r.l.p.c.end.release() // holdDrop's
	if rt != nil {
		r.drop(rt)
	}
}

// drop counts out tasks that will not be called again: each finishes
// with its last call's error joined with ErrDropped, unless Task.Cancel
// finished it first (it then counts as cancelled).
func (r *Retrying) drop(rts ...*retryTask) {
	var cancelled uint64
	for _, rt := range rts {
		if rt.t.state.CompareAndSwap(accepted, dropped) {
			rt.t.finish(joinLast(rt.err, ErrDropped))
		} else {
			cancelled++
		}
	}
	if n := uint64(len(rts)); n > 0 {
		r.l.cancelled.Add(cancelled)
		r.l.dropped.Add(n - cancelled)
		r.l.done(int64(n))
	}
}

// joinLast returns err joined after last, the error of a task's last
// call, or err if it was never called.
func joinLast(last, err error) error {
	if last == nil {
		return err
	}
	return errors.Join(last, err)
}
