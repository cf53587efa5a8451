package crew

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/notify"
	"github.com/gocrew/crew/internal/queue"
)

// This file holds what Keyed, Priority and RateLimited share. Each is a
// layer in front of an Executor: it keeps its tasks in a queue of its own
// and submits a step, a func made once, that runs the task the layer's
// order says comes next. The pool itself is untouched: its Go path pays
// nothing for layers it does not have, every task still runs on one of
// its workers under its limit, and several layers (and plain tasks) can
// share one pool.
//
// A layer counts its unfinished tasks for Wait. From its first task on, it
// holds its pool's end (see end): when the pool ends (the end of Stop, or
// Shutdown's deadline), the layer drops the tasks whose steps can no
// longer run, so that no Wait and no Task waits for them forever, and the
// pool's Stop returns only once it has. The layer's Wait lets the end go
// when the layer is idle, so a layer made for one job and waited for is
// not kept alive by its pool.
//
// A layer's Wait cannot work from inside one of its own tasks, which it
// would wait for forever: like Pool.Wait, it panics with an error wrapping
// ErrInsideTask instead. The pool's own check does not serve: a layer's
// task is one of the pool's, but so is a plain task, which may wait for a
// layer. So each layer has a number of its own, and its steps run under it
// (engine.RunAs); Wait looks for it on the caller's stack (engine.CallerIs)
// only when it is about to block.

// An Executor starts tasks on a pool's workers: a [*Pool], a
// [*RateLimited], which starts them at a bounded rate on its own executor,
// a [*Subpool], which runs them under a limit of its own, or a
// [*Retrying], whose Submit forms call a failing task again. [Keyed],
// [Priority], RateLimited, Subpool and Retrying take any Executor, so
// layers stack:
// a Keyed on a RateLimited runs each key in order and all keys together at
// the rate. Its methods are the submission forms every crew type shares
// (see [Pool.Go], [Pool.TryGo] and [Pool.GoContext]). Only crew's types
// implement it.
type Executor interface {
	Go(task func()) error
	TryGo(task func()) bool
	GoContext(ctx context.Context, task func()) error

	// pool returns the pool that runs the tasks in the end, nil for a nil
	// *Pool, *RateLimited or *Subpool.
	pool() *Pool
}

// A layerStep is what a group or a layer submits to its executor: the
// step, made once, and what to do if the step is accepted and later
// dropped unrun, or owed and never submitted (see stepper). An executor
// drops accepted steps only as its pool stops: a RateLimited those that
// wait for a token, a pool its queue when Shutdown's deadline passes
// (which every layer learns of through the end instead).
type layerStep struct {
	run   func()
	owner stepOwner // told if the step is dropped; nil: nobody
}

// A stepOwner is the group or layer whose step it is, told when the step
// is dropped unrun.
type stepOwner interface {
	stepDropped()
}

// A stepper hands the steps of one group or layer to its executor: at
// once, waiting for room as the submission that needs the step does
// (submit), or, when a full queue refused the step and the caller must not
// wait, as an owed step (owe). A pool takes an owed step at once, past its
// queue's bound: the step stands for a task the pool's user submitted
// already, and a step queued before Stop closes the pool runs like any
// queued task. Any other executor gets it later from a goroutine of the
// stepper's own that waits for room; that goroutine exists only while
// steps are owed. A step that cannot be submitted (the pool stopped, or
// ctx ended) is dropped: its owner is told.
type stepper struct {
	ex Executor
	// send, if set, submits in sendTo's place; tests set it.
	send func(ctx context.Context, s layerStep, mode pushMode) error

	mu    sync.Mutex
	owed  queue.FIFO[layerStep]
	owing bool // the owing goroutine runs
}

func (st *stepper) init(ex Executor) { st.ex = ex }

// submit hands s to the executor as mode says (ctx for pushCtx). It
// returns ErrQueueFull when pushTry finds the pool's queue full, and the
// executor's refusal otherwise.
func (st *stepper) submit(ctx context.Context, s layerStep, mode pushMode) error {
	if st.send != nil {
		return st.send(ctx, s, mode)
	}
	return st.sendTo(ctx, s, mode)
}

func (st *stepper) sendTo(ctx context.Context, s layerStep, mode pushMode) error {
	switch ex := direct(st.ex).(type) {
	case *RateLimited:
		return ex.push(ctx, struct{}{}, layerEntry{fn: s.run, owner: s.owner}, mode)
	case *Subpool:
		return ex.push(ctx, 1, layerEntry{fn: s.run, owner: s.owner}, mode)
	case *Pool:
		c := ex.core()
		switch mode {
		case pushTry:
			return c.tryPush(s.run, nil)
		case pushCtx:
			return c.pushContext(ctx, s.run, nil)
		case pushPast:
			return c.pushPast(s.run)
		}
		return c.push(s.run, nil)
	}
	return errZeroLayer
}

// direct returns the executor that takes the steps submitted to ex: ex
// itself, or, for a Retrying, whose Go forms are its executor's, the first
// executor under it that is not a Retrying.
func direct(ex Executor) Executor {
	for {
		r, ok := ex.(*Retrying)
		if !ok || r.layer().zero() {
			return ex
		}
		ex = r.l.steps.ex
	}
}

// owe submits s, which a full queue refused, without waiting: to a pool
// past its queue's bound, to any other executor through the owing
// goroutine, started if need be. Call it with no lock held: a refused s is
// dropped, and its owner told, before owe returns.
func (st *stepper) owe(s layerStep) {
	if _, ok := direct(st.ex).(*Pool); ok {
		if st.submit(nil, s, pushPast) != nil && s.owner != nil {
			s.owner.stepDropped()
		}
		return
	}
	st.mu.Lock()
	st.owed.Push(s)
	start := !st.owing
	st.owing = true
	st.mu.Unlock()
	if start {
		go st.payOwed()
	}
}

// payOwed submits the owed steps one by one, each waiting for room. Once a
// submission fails, the executor will take none: it drops the rest.
func (st *stepper) payOwed() {
	ctx := context.Background()
	failed := false
	for {
		st.mu.Lock()
		if st.owed.Len() == 0 {
			st.owing = false
			st.mu.Unlock()
			return
		}
		s := st.owed.Take()
		st.mu.Unlock()
		if !failed && st.submit(ctx, s, pushCtx) == nil {
			continue
		}
		failed = true
		if s.owner != nil {
			s.owner.stepDropped()
		}
	}
}

// inline reports whether a step whose successor the executor refused with
// err may run the successor's work itself, on the worker it holds: a pool
// whose queue is full lets it, unless the step's worker is one too many
// (see overLimit: the successor is then owed), and so does a pool that is
// stopping but has not ended (Stop runs everything queued and waits for
// the running step); once it has ended, the rest is dropped instead. A
// RateLimited never lets it: that would start a task without a token.
func (st *stepper) inline(err error) bool {
	p, ok := direct(st.ex).(*Pool)
	return ok && (err == ErrQueueFull && !st.overLimit() || err == ErrStopped && !p.over())
}

// overLimit reports whether the executor is a pool that takes work and has
// more workers than its limit, as after Resize lowered it: a step on one
// of them must not run more than its own task, or the pool would run more
// tasks at once than its limit. The work it leaves gets a step, owed.
func (st *stepper) overLimit() bool {
	p, ok := direct(st.ex).(*Pool)
	return ok && p.refuses() == nil && p.c.e.OverLimit()
}

// layerEntry is a task queued in a layer: a func from a Go form, or a Task
// from a Submit form, or the step of a layer above (with what tells that
// layer when the step is dropped).
type layerEntry struct {
	fn    func()
	t     *Task
	owner stepOwner // of a step: told if the entry is dropped
}

// runEntry runs e. A panic in a Go task is recovered here and passed to
// the pool's panic handler, as the worker would (unless the pool was built
// WithCrashOnPanic), so that the layer's step goes on and its accounting
// follows the handler; a Task recovers its own. Only runtime.Goexit, or a
// panic about to crash the program, unwinds into the caller.
func (l *layer) runEntry(e layerEntry) {
	if e.t != nil {
		if !e.t.exec() {
			l.cancelled.Add(1) // passed over: Task.Cancel finished it
		}
		return
	}
	p := l.p
	if p.crashes() {
		e.fn()
		return
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			p.notePanic()
			p.c.onPanic(&PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	e.fn()
	returned = true
}

// refuse completes an entry that was not queued, whose submitter gets
// err: a Task finishes with it.
func (e layerEntry) refuse(err error) {
	if e.t != nil {
		e.t.refuse(err)
	}
}

// dropEntries counts out entries that were accepted and will not run: a
// Task finishes with ErrDropped (unless Task.Cancel finished it: then it
// counts as cancelled), and a step tells its layer. It returns how many it
// counted as dropped.
func (l *layer) dropEntries(es ...layerEntry) int {
	var cancelled uint64
	for _, e := range es {
		switch {
		case e.t != nil && e.t.state.CompareAndSwap(accepted, dropped):
			e.t.finish(ErrDropped)
		case e.t != nil:
			cancelled++
		case e.owner != nil:
			e.owner.stepDropped()
		}
	}
	if n := int64(len(es)); n > 0 {
		l.cancelled.Add(cancelled)
		l.dropped.Add(uint64(n) - cancelled)
		l.done(n)
	}
	return len(es) - int(cancelled)
}

// holdDrop keeps Stop and Shutdown from returning (see end) until
// dropTaken has dropped the entries that the caller took off its queue
// under its lock: the layer's abandon, which takes the same lock, finds
// them gone. Call it under that lock.
func (l *layer) holdDrop() {
	if l.p != nil {
		l.p.c.end.hold()
	}
}

// dropTaken drops entries taken under holdDrop, then lets Stop return. It
// returns how many it counted as dropped (see dropEntries).
func (l *layer) dropTaken(es []layerEntry) int {
	defer func() {
		if l.p != nil {
			l.p.c.end.release()
		}
	}()
	return l.dropEntries(es...)
}

// layer is the accounting a layer shares with the others: its executor and
// stepper, its unfinished tasks for Wait, and its hold on the pool's end.
type layer struct {
	steps stepper
	p     *Pool
	id    uint64 // its steps run under it (see mark)

	unfinished atomic.Int64
	dropped    atomic.Uint64
	cancelled  atomic.Uint64 // tasks passed over, or dropped, after Task.Cancel
	idle       notify.Cond

	isLinked atomic.Bool // read by accept without linkMu
	linkMu   sync.Mutex
	unlink   func() bool
	abandon  func() // drops what can no longer run; set by the layer
}

// init sets up l on ex for the constructor named what; it panics with an
// error wrapping ErrInvalid if ex is nil. A zero pool is accepted: the
// layer's methods then return the pool's error, like a Group's.
func (l *layer) init(ex Executor, what string, abandon func()) {
	if ex == nil {
		panic(invalidf("crew.%s: nil Executor", what))
	}
	l.steps.init(ex)
	l.p = ex.pool()
	l.id = engine.NewID()
	l.abandon = abandon
}

// mark returns the step that runs run under l's number, so that wait
// recognises a call from inside it, and tells owner if it is dropped
// unrun. Call it once per step, not per submission: the func it makes is
// allocated once.
func (l *layer) mark(run func(), owner stepOwner) layerStep {
	return layerStep{run: func() { engine.RunAs(l.id, engine.Func(run)) }, owner: owner}
}

// refuses reports why the layer's pool takes no new work, or nil; l is
// nil for a nil Keyed, Priority or RateLimited.
func (l *layer) refuses() error {
	if l.zero() {
		return errZeroLayer
	}
	return l.p.refuses()
}

// A layer's submission forms: the plain call, Try and Context, each for a
// func() (Go) or a func(ctx) error (Submit). submitGo and submitTask check
// the arguments and pass the entry to push, the layer's own, with the
// argument the layer orders by (a key, a priority, nothing).

// submitGo is a Go form.
func submitGo[A any](l *layer, push func(context.Context, A, layerEntry, pushMode) error, ctx context.Context, a A, task func(), mode pushMode) error {
	if err := l.check(ctx, task == nil, mode); err != nil {
		return err
	}
	return push(ctx, a, layerEntry{fn: task}, mode)
}

// submitTask is a Submit form: the Task it returns is done with the error
// if the task was not queued.
func submitTask[A any](l *layer, push func(context.Context, A, layerEntry, pushMode) error, ctx context.Context, a A, task func(context.Context) error, mode pushMode) *Task {
	t := &Task{fn: task, done: make(chan struct{}), layered: true}
	t.state.Store(accepted) // once queued, until a step begins it (see Task.Cancel)
	if !l.zero() {
		t.p = l.p
	}
	if err := l.check(ctx, task == nil, mode); err != nil {
		t.refuse(err)
		return t
	}
	push(ctx, a, layerEntry{t: t}, mode)
	return t
}

// check returns why a submission cannot be accepted before the layer's own
// checks: a zero layer, a nil task, a nil or ended context.
func (l *layer) check(ctx context.Context, nilTask bool, mode pushMode) error {
	switch {
	case l.zero():
		return errZeroLayer
	case nilTask:
		return ErrNilTask
	case mode != pushCtx:
		return nil
	case ctx == nil:
		return invalidf("nil context")
	}
	return ctx.Err()
}

// accept counts a task in. Called by whoever queues it, before the task
// can run.
func (l *layer) accept() {
	l.unfinished.Add(1)
	if !l.isLinked.Load() {
		l.link()
	}
}

// done counts n tasks out, run or dropped, and wakes Wait when none is left.
func (l *layer) done(n int64) {
	if l.unfinished.Add(-n) == 0 {
		l.idle.Broadcast()
	}
}

// link holds the pool's end, so that the layer drops what it holds when
// the pool ends.
func (l *layer) link() {
	p := l.p
	if !p.core().usable() {
		return
	}
	l.linkMu.Lock()
	if !l.isLinked.Load() {
		p.c.end.hold()
		l.unlink = context.AfterFunc(p.c.end.done(), l.poolEnded)
		l.isLinked.Store(true)
	}
	l.linkMu.Unlock()
}

// poolEnded runs when the pool has ended, on a goroutine of its own; Stop
// and Shutdown return only once it has.
func (l *layer) poolEnded() {
	defer l.p.c.end.release()
	l.linkMu.Lock()
	l.isLinked.Store(false)
	l.unlink = nil
	l.linkMu.Unlock()
	l.abandon()
}

// wait blocks until the layer has no unfinished task, then lets the pool's
// end go if the layer is still idle. Called from inside one of the layer's
// own steps, it panics with an error wrapping ErrInsideTask that names what
// (the layer's type) instead of waiting for itself; from inside another
// task of the pool, it lends that task's slot while it waits (see
// Pool.lendIfInside).
func (l *layer) wait(what string) {
	if l.zero() {
		return
	}
	idle := func() bool { return l.unfinished.Load() <= 0 }
	if !idle() {
		if engine.CallerIs(l.id) {
			panic(fmt.Errorf("%w: %s.Wait would wait for the task that called it, one of the %s's own", ErrInsideTask, what, what))
		}
		l.p.lendIfInside(func() { l.idle.Wait(nil, idle) })
	}
	l.linkMu.Lock()
	if l.isLinked.Load() {
		// Clear the flag before looking at the count: an accept that
		// counts its task after our look then sees the flag clear and
		// links again (both are sequentially consistent atomics).
		l.isLinked.Store(false)
		if l.unfinished.Load() == 0 {
			if l.unlink() { // poolEnded will not run
				l.p.c.end.release()
			}
			l.unlink = nil
		} else {
			l.isLinked.Store(true)
		}
	}
	l.linkMu.Unlock()
}

// stats is a layer's Stats: the counters every layer has, and those that
// more adds; zeros for a zero layer.
func (l *layer) stats(more func(*LayerStats)) LayerStats {
	if l.zero() {
		return LayerStats{}
	}
	s := LayerStats{Unfinished: int(max(0, l.unfinished.Load())), Dropped: l.dropped.Load(), Cancelled: l.cancelled.Load()}
	more(&s)
	return s
}

// zero reports whether l is the layer of a zero, or nil, Keyed, Priority
// or RateLimited.
func (l *layer) zero() bool { return l == nil || l.steps.ex == nil }

// over reports whether the layer's pool has ended.
func (l *layer) over() bool { return l.p.over() }

// errZeroLayer is returned by the methods of a Keyed, Priority,
// RateLimited, Subpool or Retrying not made by its constructor.
var errZeroLayer = invalidf("Keyed, Priority, RateLimited, Subpool and Retrying must be made with their New functions")

// LayerStats is a snapshot of a [Keyed], [Priority], [RateLimited],
// [Subpool] or [Retrying] layer's counters. Like [Stats], its fields are read one at a time while
// tasks run. A task may still count as Unfinished for a moment after its
// [Task.Wait] returns; after the layer's Wait returns, it no longer does.
type LayerStats struct {
	Unfinished int    // tasks accepted that have neither finished nor been dropped
	Waiting    int    // of those, tasks not yet handed to a worker
	Keys       int    // Keyed only: keys that hold memory (busy, paused, or refilling a per-key bucket)
	Dropped    uint64 // tasks accepted and dropped because the pool stopped before they could start
	Retried    uint64 // Retrying only: failed calls followed by a delay before another
	// Cancelled counts the tasks that Task.Cancel kept from starting, once
	// the layer has reached them in its order and passed over them (or
	// let them go as the pool stopped); until then they are Unfinished.
	Cancelled uint64
}

// maxKeptQueue is the largest chunk that a layer's drained queue keeps: a
// burst's bigger ones go back to the garbage collector.
const maxKeptQueue = 64
