package crew

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// A Task is the handle of a function submitted with one of the Submit
// forms of a [Pool], [Keyed], [Priority], [RateLimited], [Subpool],
// [Weighted] or [Retrying]: [Task.Wait] returns its error.
type Task struct {
	p        *Pool
	fn       func(context.Context) error
	done     chan struct{}
	err      error        // set before done is closed
	finished atomic.Bool  // the first finish wins
	state    atomic.Int32 // pushing, accepted, started, dropped or passed: settles Submit and workers racing Shutdown

	prev, next *Task // in p.queued until the task starts, guarded by p.mu
	listed     bool
	panicked   bool       // run recovered a panic: err is its *PanicError, not one fn returned
	refused    bool       // never queued: err says why
	layered    bool       // queued in a Keyed, Priority or RateLimited, not in p.queued
	retry      *retryTask // a Retrying's task: Cancel tells it

	// The cancellable context the task received, made when it is first
	// needed (see taskContext); nil until then.
	lazy atomic.Pointer[taskCancel]
}

// Wait blocks until the task has finished and returns its error: the
// function's own, a [*PanicError] if it panicked, [ErrGoexit], or the error
// that kept it from running ([ErrStopped], [ErrQueueFull], [ErrDropped],
// [context.Canceled] after [Task.Cancel], [ErrNilTask], a context's error
// from a [Pool.SubmitContext], or an error wrapping [ErrInvalid] for a nil
// or zero pool or layer).
//
// Called from inside a task of the same pool, Wait lends that task's slot
// while it waits, so that the task waited for can run even when every
// worker is a task waiting so; the pool still runs no more tasks at once
// than its limit, as the waiting one runs none. (A task that waits on
// [Task.Done] in a select holds its slot.)
func (t *Task) Wait() error {
	if t == nil || t.done == nil {
		return errZeroTask
	}
	select {
	case <-t.done:
	default:
		t.p.lendIfInside(func() { <-t.done })
	}
	return t.err
}

// Done returns a channel that is closed when the task has finished, for use
// in a select; Wait then returns at once.
// A Task not returned by a Submit form reports an error from Wait, and its
// Done channel is closed.
func (t *Task) Done() <-chan struct{} {
	if t == nil || t.done == nil {
		return closedChan
	}
	return t.done
}

var errZeroTask = invalidf("a Task must come from a Submit method")

// Cancel keeps the task from starting if no worker has begun it, and
// reports whether it did: the function will never run, and Wait returns
// [context.Canceled]. Cancel of a task that is running cancels the
// context the function received and returns false; Wait then returns
// what the function returns. Cancel of a task that has finished, was
// cancelled or dropped already or was never queued does nothing and
// returns false, as does Cancel of a nil Task or one not returned by a
// Submit form. Once [Pool.Shutdown]'s deadline has passed, Cancel no
// longer keeps a Pool's queued task from starting: Shutdown drops it
// ([ErrDropped]), or a worker begins it as Shutdown drains the queue and
// it sees the pool's context cancelled once the drain is done.
//
// A Pool's task cancelled before it started counts in [Stats].Cancelled,
// and the worker that reaches its place in the queue passes over it. A
// task of a [Keyed], [Priority], [RateLimited] or [Subpool] keeps its place
// in the layer's order (a Subpool's holds its slots once admitted) until
// the layer reaches it and passes over it: it counts among
// [LayerStats].Unfinished until then (the layer's Wait waits for it), and
// in LayerStats.Cancelled from then on; a RateLimited, or a
// Keyed with a per-key rate, spends a token on it. A [Retrying]'s task
// waiting for the delay before its next call ends at once, and Wait
// returns its last call's error joined with context.Canceled (see
// [Retrying.Submit]). Cancel does not wait for the task, and allocates
// nothing.
func (t *Task) Cancel() bool {
	if t == nil || t.done == nil || t.finished.Load() {
		return false
	}
	for {
		if t.layered && t.state.CompareAndSwap(accepted, cancelled) || !t.layered && t.p.cancelQueued(t) {
			if t.retry != nil {
				t.retry.cancelDelayed() // finishes t
			} else {
				t.finish(context.Canceled)
			}
			return true
		}
		// Begun, or about to be: cancel its context.
		if t.state.CompareAndSwap(started, interrupted) {
			if l := t.lazy.Load(); l != nil {
				l.cancel()
			}
			return false
		}
		// A Retrying's call that failed may have put t back to accepted,
		// for its delay, between the two looks: look again.
		if t.retry == nil || t.state.Load() != accepted {
			return false
		}
	}
}

// cancelQueued claims t, a Submit task of p, for Cancel if no worker has
// begun it and the pool has not ended, and counts it. Shutdown marks the
// end under p.mu too (see markEnd), so no task is cancelled once the
// drain may have counted its place in the queue as dropped.
func (p *Pool) cancelQueued(t *Task) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.over() || !t.state.CompareAndSwap(accepted, cancelled) {
		return false
	}
	p.c.cancels.Add(1)
	p.unlistLocked(t)
	return true
}

// markEnd is Shutdown's end.mark, under the lock Cancel claims tasks with.
func (p *Pool) markEnd() {
	p.mu.Lock()
	p.c.end.mark()
	p.mu.Unlock()
}

// taskContext is the context a Submit task receives: the pool's, which
// the task's Cancel (state interrupted) and its return (returned) cancel
// too. It is the Task itself, seen through another set of methods, so it
// costs nothing until Done is called; Done then makes a context.WithCancel
// of the pool's context (lazy), which the cancellations cancel, and Value
// looks through it, so that a context derived from this one registers
// with it as with any cancelCtx.
type taskContext Task

// taskCancel is a taskContext's lazily made context.
type taskCancel struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (c *taskContext) parent() context.Context { return c.p.c.ctx }

func (c *taskContext) Deadline() (time.Time, bool) { return c.parent().Deadline() }

func (c *taskContext) Done() <-chan struct{} {
	if l := c.lazy.Load(); l != nil {
		return l.ctx.Done()
	}
	if c.state.Load() == returned {
		return closedChan
	}
	ctx, cancel := context.WithCancel(c.parent())
	if !c.lazy.CompareAndSwap(nil, &taskCancel{ctx: ctx, cancel: cancel}) {
		cancel()
		return c.lazy.Load().ctx.Done()
	}
	// Cancel and ended change the state, then cancel what they find in
	// lazy: one of us sees the other's write.
	if c.state.Load() != started {
		cancel()
	}
	return ctx.Done()
}

func (c *taskContext) Err() error {
	if l := c.lazy.Load(); l != nil {
		return l.ctx.Err()
	}
	if err := c.parent().Err(); err != nil {
		return err
	}
	if s := c.state.Load(); s == interrupted || s == returned {
		return context.Canceled
	}
	return nil
}

func (c *taskContext) Value(key any) any {
	if l := c.lazy.Load(); l != nil {
		return l.ctx.Value(key)
	}
	return c.parent().Value(key)
}

// String keeps fmt from printing the Task's fields.
func (c *taskContext) String() string { return "crew.Task context" }

// ended cancels the context of t, which has returned, panicked or called
// runtime.Goexit.
func (t *Task) ended() {
	t.state.Store(returned)
	if l := t.lazy.Load(); l != nil {
		l.cancel()
	}
}

// refuse completes t, which was never queued, with err.
func (t *Task) refuse(err error) {
	t.refused = true
	t.finish(err)
}

func (t *Task) finish(err error) {
	if !t.finished.CompareAndSwap(false, true) {
		return // completed already, as dropped by a racing Shutdown
	}
	t.err = err
	t.fn = nil
	close(t.done)
}

// abort completes t with err when its run method never began: a
// TaskStart hook panicked before it. (The observer has claimed t.)
func (t *Task) abort(err error) {
	t.ended()
	t.p.unlist(t)
	t.p.c.failed.Add(1)
	t.finish(err)
}

// run is what the queue holds for a Submit task. Unlike Go tasks, whose
// panics the worker loop recovers, a Task recovers its own so that the
// panic reaches its Wait; it pays for a deferred call that Go tasks do not.
func (t *Task) run() { t.exec() }

// exec is run, and reports whether t ran: false when it was cancelled, or
// dropped, before the worker could begin it (see passedOver). A task that
// panicked ran too.
func (t *Task) exec() (ran bool) {
	p := t.p
	c := &p.c
	if !t.start() {
		t.passedOver()
		return false
	}
	if !t.layered {
		p.unlist(t)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		ran = true // a recovered panic returns from exec too
		var v any
		if !c.crash {
			v = recover()
		}
		t.unwound(v)
	}()
	err := t.fn((*taskContext)(t))
	t.ended()
	if err != nil && c.onError != nil {
		c.onError(err) // before Wait returns; a panic in it is the task's
	}
	returned = true
	if err != nil {
		c.failed.Add(1)
	}
	t.finish(err)
	return true
}

// unwound finishes t, whose function did not return: it panicked with v
// (recovered by the caller's deferred func), or called runtime.Goexit, or
// its panic is about to crash the program (v nil).
func (t *Task) unwound(v any) {
	c := &t.p.c
	t.ended()
	c.failed.Add(1)
	if v != nil {
		c.panicked.Add(1)
		t.panicked = true
		t.finish(&PanicError{Value: v, Stack: debug.Stack()})
		return
	}
	t.finish(ErrGoexit)
}

// passedOver counts a Submit task of a Pool that a worker found cancelled
// or dropped as it was about to begin it. (A layer counts its own.)
func (t *Task) passedOver() {
	p := t.p
	switch {
	case t.layered:
	case t.state.Load() == cancelled:
		p.mu.Lock() // held by the Cancel that counted it: the skip counts after it (see poolCore.stats)
		p.c.cancelSkips.Add(1)
		p.mu.Unlock()
	default:
		p.c.droppedLate()
	}
}

// start claims t for the worker about to run it, and reports whether it
// did (or had: an observed pool claims t before its TaskStart hook, then
// runs it). It reports false if Shutdown dropped t first: once the queue
// is drained, Shutdown drops the listed tasks that no worker has begun,
// and a worker may have been taking t from the queue as it was drained,
// or found it behind a cell that a producer was still filling, which
// Drain leaves (see dropListed).
func (t *Task) start() bool {
	for {
		switch s := t.state.Load(); s {
		case started, interrupted:
			return true
		case pushing, accepted:
			if t.state.CompareAndSwap(s, started) {
				return true
			}
		default:
			return false
		}
	}
}

// taskList is a doubly linked list of queued Submit tasks.
type taskList struct{ head *Task }

func (p *Pool) list(t *Task) {
	p.mu.Lock()
	t.next = p.queued.head
	if t.next != nil {
		t.next.prev = t
	}
	p.queued.head = t
	t.listed = true
	p.mu.Unlock()
}

func (p *Pool) unlist(t *Task) {
	p.mu.Lock()
	p.unlistLocked(t)
	p.mu.Unlock()
}

// unlistLocked is unlist with p.mu held.
func (p *Pool) unlistLocked(t *Task) {
	if t.listed {
		if t.prev != nil {
			t.prev.next = t.next
		} else {
			p.queued.head = t.next
		}
		if t.next != nil {
			t.next.prev = t.prev
		}
		t.prev, t.next, t.listed = nil, nil, false
	}
}

// dropListed completes the listed Submit tasks that no worker has begun
// with ErrDropped. Shutdown calls it once its drain is done, so that
// running tasks that wait for a dropped one (a parent waiting for its
// child) see it dropped rather than hold Shutdown for ever, and again,
// final, once no worker is left, with the number of tasks its drain
// removed: it returns how many tasks the call dropped in all (see
// settleDrops).
//
// A listed task whose Submit is still pushing it is passed over: if the
// push fails (the pool is closed) Submit reports that error; if it had
// succeeded, Submit sees the mark and reports ErrDropped at once (it may
// have been drained already, and a running task may wait for it), and a
// worker that takes it finds it dropped. So each Task reports what
// happened to it, and ErrDropped tasks are exactly the ones Shutdown
// counts.
func (p *Pool) dropListed(final bool, drained int) (n int) {
	if !final {
		defer p.c.end.release() // the hold of Shutdown's end.mark
	}
	var out []*Task
	p.mu.Lock()
	for t := p.queued.head; t != nil; {
		next := t.next
		switch t.dropUnstarted() {
		case dropped:
			p.unlistLocked(t)
			out = append(out, t)
		case passed:
			p.unlistLocked(t)
		}
		t = next
	}
	p.mu.Unlock()
	for _, t := range out {
		t.finish(ErrDropped)
	}
	if final {
		n = p.settleDrops(drained)
	}
	return n
}

// dropUnstarted marks t, a listed task that no worker has begun, as dropped
// (accepted: its Submit has returned or is returning it) or passed (its
// Submit is still pushing it), and returns the state it set, or the state
// it found if t had started or ended. Submit's own move from pushing to
// accepted may come between a look and a mark, so the look is repeated
// until a mark holds: a task found pushing and then accepted must still
// be dropped, or a running task waiting for it holds Shutdown for ever.
func (t *Task) dropUnstarted() int32 {
	for {
		s := t.state.Load()
		var to int32
		switch s {
		case accepted:
			to = dropped
		case pushing:
			to = passed
		default:
			return s
		}
		if t.state.CompareAndSwap(s, to) {
			return to
		}
	}
}

// settleDrops returns the number of tasks that a Shutdown dropped, given
// the number of places its drain removed from the engine's queue: those,
// plus the tasks that workers found dropped as they began them (which the
// engine counts among the completed, not the dropped), less the drained
// places of cancelled tasks (which count as cancelled). It is called once
// no worker is left, when every place of a cancelled task has been passed
// over by a worker or drained; of concurrent Shutdowns, the ones that
// settle first take what they can of that count, and the last the rest.
func (p *Pool) settleDrops(drained int) int {
	c := &p.c
	p.mu.Lock()
	defer p.mu.Unlock()
	n := uint64(drained) + c.lateUnreported.Swap(0)
	x := min(c.cancels.Load()-c.cancelSkips.Load()-p.cancelsDrained, n)
	p.cancelsDrained += x
	return int(n - x)
}

// States of Task.state.
const (
	pushing     = iota // Submit has listed the task and is pushing it
	accepted           // the push succeeded
	started            // a worker began it
	dropped            // Shutdown (or a layer, as the pool stopped) dropped it before a worker began it
	passed             // dropListed found it still pushing
	cancelled          // Cancel kept it from starting
	interrupted        // Cancel cancelled its context while it ran
	returned           // it has returned, panicked or called runtime.Goexit: its context is cancelled
)
