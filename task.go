package crew

import (
	"context"
	"runtime/debug"
	"sync/atomic"
)

// A Task is the handle of a function submitted with one of the Submit
// forms of a [Pool], [Keyed], [Priority], [RateLimited], [Subpool] or
// [Weighted]: [Task.Wait]
// returns its error.
type Task struct {
	p        *Pool
	fn       func(context.Context) error
	done     chan struct{}
	err      error        // set before done is closed
	finished atomic.Bool  // the first finish wins
	state    atomic.Int32 // pushing, accepted, started, dropped or passed: settles Submit and workers racing Shutdown

	prev, next *Task // in p.queued until the task starts, guarded by p.mu
	listed     bool
	panicked   bool // run recovered a panic: err is its *PanicError, not one fn returned
	refused    bool // never queued: err says why
}

// Wait blocks until the task has finished and returns its error: the
// function's own, a [*PanicError] if it panicked, [ErrGoexit], or the error
// that kept it from running ([ErrStopped], [ErrQueueFull], [ErrDropped],
// [ErrNilTask], a context's error from a [Pool.SubmitContext], or an error
// wrapping [ErrInvalid] for a nil or zero pool or layer).
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
	t.p.unlist(t)
	t.p.c.failed.Add(1)
	t.finish(err)
}

// run is what the queue holds for a Submit task. Unlike Go tasks, whose
// panics the worker loop recovers, a Task recovers its own so that the
// panic reaches its Wait; it pays for a deferred call that Go tasks do not.
func (t *Task) run() {
	p := t.p
	c := &p.c
	if !t.start() {
		c.droppedLate()
		return
	}
	p.unlist(t)
	returned := false
	defer func() {
		if returned {
			return
		}
		c.failed.Add(1)
		var v any
		if !c.crash {
			v = recover()
		}
		if v != nil {
			c.panicked.Add(1)
			t.panicked = true
			t.finish(&PanicError{Value: v, Stack: debug.Stack()})
			return
		}
		t.finish(ErrGoexit) // or a panic about to crash the program
	}()
	err := t.fn(c.ctx)
	if err != nil && c.onError != nil {
		c.onError(err) // before Wait returns; a panic in it is the task's
	}
	returned = true
	if err != nil {
		c.failed.Add(1)
	}
	t.finish(err)
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
		case started:
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
// with ErrDropped, and reports how many tasks workers found dropped as
// they began them (which the engine counts among the completed, not the
// dropped). Shutdown calls it once its drain is done, so that running
// tasks that wait for a dropped one (a parent waiting for its child) see
// it dropped rather than hold Shutdown for ever, and again, final, once no
// worker is left, for that count.
//
// A listed task whose Submit is still pushing it is passed over: if the
// push fails (the pool is closed) Submit reports that error; if it had
// succeeded, Submit sees the mark and reports ErrDropped at once (it may
// have been drained already, and a running task may wait for it), and a
// worker that takes it finds it dropped. So each Task reports what
// happened to it, and ErrDropped tasks are exactly the ones Shutdown
// counts.
func (p *Pool) dropListed(final bool) (late int) {
	if !final {
		defer p.c.end.release() // the hold of Shutdown's end.mark
	}
	var out []*Task
	p.mu.Lock()
	for t := p.queued.head; t != nil; {
		next := t.next
		switch {
		case t.state.CompareAndSwap(accepted, dropped):
			p.unlistLocked(t)
			out = append(out, t)
		case t.state.CompareAndSwap(pushing, passed):
			p.unlistLocked(t)
		}
		t = next
	}
	p.mu.Unlock()
	for _, t := range out {
		t.finish(ErrDropped)
	}
	if final {
		late = int(p.c.lateUnreported.Swap(0))
	}
	return late
}

// States of Task.state.
const (
	pushing  = iota // Submit has listed the task and is pushing it
	accepted        // the push succeeded
	started         // a worker began it
	dropped         // Shutdown dropped it before a worker began it
	passed          // dropListed found it still pushing
)
