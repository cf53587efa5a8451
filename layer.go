package crew

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/bridge"
	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/notify"
)

// This file holds what Keyed, Priority and RateLimited share. Each is a
// layer in front of a pool: it keeps its tasks in a queue of its own and
// submits to the pool a step, a func made once, that takes the task the
// layer's order says comes next. The pool itself is untouched: its Go path
// pays nothing for layers it does not have, every task still runs on one of
// its workers under its limit, and several layers (and plain tasks) can
// share one pool.
//
// A layer counts its unfinished tasks for Wait. From its first task on, it
// is linked to the pool's context: when that context ends because the pool
// has stopped (the end of Stop, or Shutdown's deadline), the layer drops
// the tasks whose steps can no longer run (steps that Shutdown removed from
// the pool's queue, tasks waiting for a rate limiter's token) so that no
// Wait and no Task waits for them forever. A RateLimited drops what waits
// for a token earlier, as soon as it finds the pool stopping; a layer
// built on it learns of each dropped step through the step's dropped func. The link costs one registration
// on the pool's context, made at the first task; the layer's Wait undoes it
// when it returns, so a layer made for one job and waited for is not kept
// alive by its pool.
//
// A layer's Wait cannot work from inside one of its own tasks, which it
// would wait for forever: like Pool.Wait, it panics with an error wrapping
// ErrInsideTask instead. The pool's own check does not serve: a layer's
// task is one of the pool's, but so is a plain task, which may wait for a
// layer. So each layer has a number of its own, and its steps run under it
// (engine.RunAs, a few calls per step); Wait looks for it on the caller's
// stack (engine.CallerIs, microseconds) only when it is about to block.

// An Executor is what Keyed and Priority run their tasks on: a *Pool, or a
// *RateLimited, which starts them on its pool at a bounded rate. Only crew's
// types implement it.
type Executor interface {
	// Go submits task to run once. See Pool.Go and RateLimited.Go.
	Go(task func()) error

	// layerPool returns the pool that runs the tasks in the end (nil for
	// a nil *Pool).
	layerPool() *Pool
	// layerSubmit queues a layer's step, waiting for room as how says.
	layerSubmit(s layerStep, how submitMode) error
	// layerInline reports whether a step whose successor layerSubmit
	// refused with err may run the successor's work itself, on the
	// worker it holds.
	layerInline(err error) bool
}

// submitMode tells layerSubmit whether it may wait for room.
type submitMode uint8

const (
	submitGo   submitMode = iota // like Pool.Go: wait for room unless WithNonBlocking
	submitTry                    // never wait: ErrQueueFull when full
	submitWait                   // wait for room even WithNonBlocking
)

func (p *Pool) layerPool() *Pool { return p }

// A layerStep is what a layer submits to its executor: the step, made
// once, and what to do if the executor accepts it and later drops it
// unrun. Only a RateLimited does that, with steps waiting for a token when
// the pool stops; a pool drops its queued steps only when it gives up,
// which every layer learns of through its own link (see abandon).
type layerStep struct {
	run     func()
	dropped func()
}

// layerSubmit goes through the Pool's own entry points, so that a step is
// observed (WithHooks, WithLatency) like any other task.
func (p *Pool) layerSubmit(s layerStep, how submitMode) error {
	task := s.run
	switch {
	case p == nil || p.e == nil:
		return errZeroPool
	case how == submitTry:
		if p.TrySubmit(task) {
			return nil
		}
		if err := p.refuses(); err != nil {
			return err
		}
		return ErrQueueFull
	case how == submitWait:
		return p.SubmitCtx(context.Background(), task)
	}
	return p.Go(task)
}

// layerInline: a full queue leaves the step free to go on, and so does
// Stop, which runs everything queued and waits for the running step; once
// Shutdown's deadline has passed, the rest is dropped instead.
func (p *Pool) layerInline(err error) bool {
	return err == ErrQueueFull || err == ErrStopped && !p.gaveUp.Load()
}

// givingUp marks the pool as running nothing more (see gaveUp), before
// Shutdown drops its queue once the deadline has passed: a layer's step
// that finishes its task meanwhile must drop the layer's next task, not
// run it itself as it would during Stop (layerInline). It also holds
// giveUp until dropListed has completed the Tasks of that drop: the drain
// counts them as dropped at once, and a Stop (or a Shutdown in time)
// racing this one must not return before they are done.
func (p *Pool) givingUp() {
	p.gaveUp.Store(true)
	p.holds.Add(1)
}

// giveUp marks the pool as running nothing more and cancels its context
// (see gaveUp), then waits until its layers have dropped what they hold.
// Stop and Shutdown call it as they cancel the context.
func (p *Pool) giveUp() {
	p.mu.Lock()
	p.gaveUp.Store(true)
	if p.endedStop != nil {
		p.endedStop()
	}
	p.mu.Unlock()
	p.cancel()
	p.released.Wait(nil, func() bool { return p.holds.Load() == 0 })
}

// release counts out one of the holds that giveUp waits for.
func (p *Pool) release() {
	if p.holds.Add(-1) == 0 {
		p.released.Broadcast()
	}
}

func init() {
	bridge.PoolEnded = func(p any) context.Context { return p.(*Pool).endedContext() }
}

// endedContext returns a context cancelled once the pool has given up.
func (p *Pool) endedContext() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended == nil {
		p.ended, p.endedStop = context.WithCancel(context.Background())
		if p.gaveUp.Load() {
			p.endedStop()
		}
	}
	return p.ended
}

// layerEntry is a task queued in a layer: a func from Go, or a Task from
// Submit, or the step of a layer above (with what tells that layer when
// the step is dropped).
type layerEntry struct {
	fn      func()
	t       *Task
	dropped func()
}

// runEntry runs e. A panic in a Go task is recovered here and passed to
// the pool's panic handler, as the worker would (unless the pool was built
// WithCrashOnPanic), so that the layer's step goes on and its accounting
// follows the handler; a Task recovers its own. Only runtime.Goexit, or a
// panic about to crash the program, unwinds into the caller.
func (l *layer) runEntry(e layerEntry) {
	if e.t != nil {
		e.t.run()
		return
	}
	p := l.p
	if p.crash {
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
			p.onPanic(&PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	e.fn()
	returned = true
}

// refuse completes an entry that was not queued, whose submitter gets
// err: a Task finishes with it.
func (e layerEntry) refuse(err error) {
	if e.t != nil {
		e.t.finish(err)
	}
}

// dropEntries counts out entries that were accepted and will not run: a
// Task finishes with ErrDropped, and a step tells its layer.
func (l *layer) dropEntries(es ...layerEntry) {
	for _, e := range es {
		switch {
		case e.t != nil:
			e.t.finish(ErrDropped)
		case e.dropped != nil:
			e.dropped()
		}
	}
	if n := int64(len(es)); n > 0 {
		l.dropped.Add(uint64(n))
		l.done(n)
	}
}

// holdDrop keeps Stop and Shutdown from returning (see Pool.giveUp) until
// dropTaken has dropped the entries that the caller took off its queue
// under its lock: the layer's abandon, which takes the same lock, finds
// them gone. Call it under that lock.
func (l *layer) holdDrop() {
	if l.p != nil {
		l.p.holds.Add(1)
	}
}

// dropTaken drops entries taken under holdDrop, then lets Stop return.
func (l *layer) dropTaken(es []layerEntry) {
	defer func() {
		if l.p != nil {
			l.p.release()
		}
	}()
	l.dropEntries(es...)
}

// newLayerTask returns a Task for a layer's Submit, or one already done with
// the error that keeps it from being queued.
func newLayerTask(l *layer, task func(context.Context) error) (*Task, error) {
	t := &Task{fn: task, done: make(chan struct{})}
	err := l.refuses()
	if l != nil {
		t.p = l.p
	}
	if task == nil {
		err = ErrNilTask
	}
	if err != nil {
		t.finish(err)
	}
	return t, err
}

// layer is the accounting a layer shares with the others: its executor, its
// unfinished tasks for Wait, and its link to the pool's context.
type layer struct {
	ex Executor
	p  *Pool
	id uint64 // its steps run under it (see mark)

	unfinished atomic.Int64
	dropped    atomic.Uint64
	idle       notify.Cond

	isLinked atomic.Bool // read by accept without linkMu
	linkMu   sync.Mutex
	unlink   func() bool
	abandon  func() // drops what can no longer run; set by the layer
}

// init sets up l on ex; it panics with an error wrapping ErrInvalid if ex
// is nil. A zero pool is accepted: the layer's methods then return the
// pool's error, like a Group's.
func (l *layer) init(ex Executor, what string, abandon func()) {
	if ex == nil {
		panic(fmt.Errorf("%w: %s: nil Executor", ErrInvalid, what))
	}
	l.ex = ex
	l.p = ex.layerPool()
	l.id = engine.NewID()
	l.abandon = abandon
}

// mark returns the step that runs run under l's number, so that wait
// recognises a call from inside it, and calls dropped if an executor drops
// it unrun. Call it once per step, not per submission: the func it makes
// is allocated once and costs a few calls per run.
func (l *layer) mark(run, dropped func()) layerStep {
	return layerStep{run: func() { engine.RunAs(l.id, engine.Func(run)) }, dropped: dropped}
}

// refuses reports why the layer's pool takes no new work, or nil; l is
// nil for a nil Keyed, Priority or RateLimited.
func (l *layer) refuses() error {
	if l == nil || l.ex == nil {
		return errZeroLayer
	}
	return l.p.refuses()
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

func (l *layer) link() {
	p := l.p
	if p == nil || p.e == nil {
		return
	}
	l.linkMu.Lock()
	if !l.isLinked.Load() {
		p.holds.Add(1)
		l.unlink = context.AfterFunc(p.endedContext(), l.poolDone)
		l.isLinked.Store(true)
	}
	l.linkMu.Unlock()
}

// poolDone runs when the pool has given up, on a goroutine of its own;
// Stop and Shutdown return only once it has.
func (l *layer) poolDone() {
	defer l.p.release()
	l.linkMu.Lock()
	l.isLinked.Store(false)
	l.unlink = nil
	l.linkMu.Unlock()
	l.abandon()
}

// wait blocks until the layer has no unfinished task, then undoes the link
// to the pool's context if the layer is still idle. Called from inside one
// of the layer's own steps, it panics with an error wrapping ErrInsideTask
// that names what (the layer's type) instead of waiting for itself.
func (l *layer) wait(what string) {
	if l.unfinished.Load() > 0 && engine.CallerIs(l.id) {
		panic(fmt.Errorf("%w: %s.Wait would wait for the task that called it, one of the %s's own", ErrInsideTask, what, what))
	}
	l.idle.Wait(nil, func() bool { return l.unfinished.Load() <= 0 })
	l.linkMu.Lock()
	if l.isLinked.Load() {
		// Clear the flag before looking at the count: an accept that
		// counts its task after our look then sees the flag clear and
		// links again (both are sequentially consistent atomics).
		l.isLinked.Store(false)
		if l.unfinished.Load() == 0 {
			if l.unlink() { // poolDone will not run
				l.p.release()
			}
			l.unlink = nil
		} else {
			l.isLinked.Store(true)
		}
	}
	l.linkMu.Unlock()
}

// stats fills the counters every layer has.
func (l *layer) stats() LayerStats {
	return LayerStats{Unfinished: int(max(0, l.unfinished.Load())), Dropped: l.dropped.Load()}
}

// zero reports whether l is the layer of a zero, or nil, Keyed, Priority
// or RateLimited.
func (l *layer) zero() bool { return l == nil || l.ex == nil }

// errZeroLayer is returned by the methods of a Keyed, Priority or
// RateLimited not made by its constructor.
var errZeroLayer = fmt.Errorf("%w: Keyed, Priority and RateLimited must be made with their New functions", ErrInvalid)

// LayerStats is a snapshot of a Keyed, Priority or RateLimited layer's
// counters. Like Stats, its fields are read one at a time while tasks run.
type LayerStats struct {
	Unfinished int    // tasks accepted that have neither finished nor been dropped
	Waiting    int    // of those, tasks not yet handed to a worker
	Keys       int    // Keyed only: keys that hold memory (busy, or refilling a per-key bucket)
	Dropped    uint64 // tasks accepted and dropped because the pool stopped before they could start
}

// nanoClock returns the time since an epoch on the monotonic clock, in
// nanoseconds. Layers read it through a field so that tests can replace it.
type nanoClock func() int64

func newNanoClock() nanoClock {
	epoch := time.Now()
	return func() int64 { return int64(time.Since(epoch)) }
}

// ringQueue is a growable circular FIFO. Its first two entries live in
// the struct itself, so a queue that rarely holds more (a key's, mostly)
// never allocates. It must not be copied once used.
type ringQueue[E any] struct {
	buf     []E
	head, n int
	small   [2]E
}

func (r *ringQueue[E]) push(e E) {
	if r.buf == nil {
		r.buf = r.small[:]
	}
	if r.n == len(r.buf) {
		buf := make([]E, 2*len(r.buf))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

// pop removes the first entry; the ring must not be empty.
func (r *ringQueue[E]) pop() E {
	var zero E
	e := r.buf[r.head]
	r.buf[r.head] = zero // let the task be collected
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.shrink()
	}
	return e
}

// popBack removes the last entry; the ring must not be empty.
func (r *ringQueue[E]) popBack() E {
	var zero E
	i := (r.head + r.n - 1) & (len(r.buf) - 1)
	e := r.buf[i]
	r.buf[i] = zero
	r.n--
	if r.n == 0 {
		r.shrink()
	}
	return e
}

// shrink lets an empty ring's buffer go if a burst made it large.
func (r *ringQueue[E]) shrink() {
	r.head = 0
	if len(r.buf) > maxKeptRing {
		r.buf = r.small[:]
	}
}

// maxKeptRing is the largest buffer an empty ringQueue keeps.
const maxKeptRing = 64
