package crew

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/engine"
)

// poolCore is what Pool and FuncPool share: an engine whose queue holds
// elements of type E (a func() for a Pool, a value for a function pool),
// and what makes it a pool around it: the context its tasks receive, the
// panic and error policy, the counters the engine does not keep, the
// observer and the end. The constructors set it up with start. Its
// methods report errZeroPool for a core that start did not set up.
type poolCore[E any] struct {
	// Read by every submission: the engine, and slow, which folds
	// WithNonBlocking and observation into one flag.
	e    *engine.Engine[E]
	slow bool

	nonBlocking bool
	crash       bool
	failOnPanic bool // a task's panic counts as a failure (function pools)
	ctx         context.Context
	cancel      context.CancelFunc
	onPanic     func(*PanicError)
	onError     func(error) // nil without WithErrorHandler

	failed   atomic.Uint64
	panicked atomic.Uint64 // panics recovered outside the engine's worker loop
	// Submit tasks that a worker found dropped as it began them (see
	// Pool.dropListed): in all for Stats, and not yet in a ShutdownError.
	lateDrops, lateUnreported atomic.Uint64
	// Submit tasks that Cancel kept from starting, and how many of their
	// places in the queue workers have passed over (see stats).
	cancels, cancelSkips atomic.Uint64
	completedHigh        atomic.Uint64 // the highest Completed Stats has reported

	name string
	obs  *observer // nil unless WithHooks, WithLatency or WithLogger
	// stamp, set when tasks are timed, returns the element to queue in
	// el's place, carrying its submission time; t is el's Submit task.
	stamp func(el E, t *Task) E

	end end
	// groups are the groups on the pool that its context's end cancels.
	groups watchers
	// stopping is set as Stop or Shutdown begins, before the engine
	// closes: from then on a group gives each of its queued tasks a step
	// of its own (see core.needSteps).
	stopping atomic.Bool
	// exited, if set, runs after the engine's workers have exited and
	// before the end: a function pool with state waits for the states to
	// be closed.
	exited func()
	// listed, if set, holds tasks the pool tracks outside the engine (a
	// Pool's Submit tasks), which Shutdown's deadline drops too.
	listed listedTasks
}

// listedTasks are tasks a pool tracks outside its engine; see
// Pool.dropListed.
type listedTasks interface {
	markEnd()
	dropListed(final bool, drained int) (dropped int)
}

// errZeroPool is returned by the methods of a pool not made by its
// constructor.
var errZeroPool = invalidf("pools must be made with crew.New, crew.NewFunc or crew.NewFuncWithState")

// start sets c up for the options in cfg and makes its engine from ec,
// which holds Run or NewRunner; st stamps the elements when the options ask
// for their times.
func (c *poolCore[E]) start(cfg config, maxWorkers int, ec engine.Config[E], st stamp[E]) {
	c.nonBlocking, c.crash, c.onPanic, c.onError = cfg.nonBlocking, cfg.crash, cfg.onPanic, cfg.onError
	c.ctx, c.cancel = context.WithCancel(cfg.ctx)
	ec.MaxWorkers = maxWorkers
	ec.MinWorkers = cfg.minWorkers
	ec.QueueSize = cfg.queueSize
	ec.IdleTimeout = cfg.idleTimeout
	if !c.crash {
		ec.OnPanic = func(_ E, v any, stack []byte) { c.recovered(&PanicError{Value: v, Stack: stack}) }
	}
	if c.failOnPanic {
		ec.OnGoexit = func(E) { c.failed.Add(1) }
	}
	c.observe(&cfg, &ec, st)
	c.slow = c.nonBlocking || c.obs != nil
	c.e = engine.New(ec)
}

// recovered reports a panic that no Task or group receives: a Go task's,
// or a function pool's call (which counts as failed).
func (c *poolCore[E]) recovered(pe *PanicError) {
	if c.failOnPanic {
		c.failed.Add(1)
	}
	c.onPanic(pe)
}

// fail records the error a task returned. The handler runs first: should
// it panic or call runtime.Goexit, the worker loop reports that instead.
func (c *poolCore[E]) fail(err error) {
	if c.onError != nil {
		c.onError(err)
	}
	c.failed.Add(1)
}

// usable reports whether start set c up.
func (c *poolCore[E]) usable() bool { return c != nil && c.e != nil }

// refuses reports why c takes no new work, or nil when it does.
func (c *poolCore[E]) refuses() error {
	switch {
	case !c.usable():
		return errZeroPool
	case c.e.Closed():
		return ErrStopped
	}
	return nil
}

// How a submission waits for room in a full bounded queue.
type pushMode uint8

const (
	pushGo   pushMode = iota // wait, unless the pool is non-blocking: Go, Submit, Invoke
	pushTry                  // never wait: TryGo, TrySubmit, TryInvoke
	pushCtx                  // wait until ctx ends, even non-blocking: the Context forms
	pushPast                 // never wait, past a full queue's bound: owed steps (see stepper.owe)
)

// push queues el as Go does. A plain pool tests two fields and calls the
// engine.
func (c *poolCore[E]) push(el E, t *Task) error {
	switch {
	case !c.usable():
		return errZeroPool
	case c.slow:
		return c.pushAs(nil, el, t, pushGo)
	}
	return c.e.Push(nil, el)
}

// pushAs queues el as mode says, stamped with its submission time when
// tasks are timed, and reports refusals to the observer. The caller has
// checked that c is usable and, for pushCtx, that ctx is not nil.
func (c *poolCore[E]) pushAs(ctx context.Context, el E, t *Task, mode pushMode) error {
	if c.stamp != nil {
		el = c.stamp(el, t)
	}
	var err error
	switch {
	case mode == pushTry || mode == pushGo && c.nonBlocking:
		err = c.e.TryPush(el)
	case mode == pushCtx:
		err = c.e.Push(ctx, el)
	default:
		err = c.e.Push(nil, el)
	}
	if c.obs != nil && (errors.Is(err, ErrQueueFull) || err == ErrStopped) {
		c.obs.refused(err)
	}
	return err
}

// pushContext is the Context forms' push: it checks ctx, which bounds the
// wait for room.
func (c *poolCore[E]) pushContext(ctx context.Context, el E, t *Task) error {
	switch {
	case !c.usable():
		return errZeroPool
	case ctx == nil:
		return invalidf("nil context")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.pushAs(ctx, el, t, pushCtx)
}

// tryPush is the Try forms' push.
func (c *poolCore[E]) tryPush(el E, t *Task) error {
	if !c.usable() {
		return errZeroPool
	}
	return c.pushAs(nil, el, t, pushTry)
}

// pushPast queues el past the queue's bound (see engine.PushPast): a
// step of a group or a layer that a full queue refused and whose
// submitter must not wait (see stepper.owe). Only a closed pool refuses
// it, and reports the refusal to the observer as pushAs does.
func (c *poolCore[E]) pushPast(el E) error {
	if !c.usable() {
		return errZeroPool
	}
	if c.stamp != nil {
		el = c.stamp(el, nil)
	}
	err := c.e.PushPast(el)
	if err != nil && c.obs != nil {
		c.obs.refused(err)
	}
	return err
}

// wait blocks until c is idle, and panics when called from inside one of
// c's tasks, which would wait for itself forever.
func (c *poolCore[E]) wait() {
	if !c.usable() {
		return
	}
	if err := c.e.Wait(nil); err != nil {
		panic(fmt.Errorf("%w: Wait would wait for the task that called it", err))
	}
}

// pause is Pause. A Stop that closes the engine between the store and the
// check resumes it after, or the check sees it closed and resumes: either
// way a stopping pool is not left paused. Only a pause set here is undone:
// a pool that was paused already stays so, as a Shutdown from inside one
// of its tasks leaves it.
func (c *poolCore[E]) pause() {
	if !c.usable() {
		return
	}
	if c.e.Pause() && c.e.Closed() {
		c.e.Resume()
	}
}

// resume is Resume.
func (c *poolCore[E]) resume() {
	if c.usable() {
		c.e.Resume()
	}
}

// paused is Paused.
func (c *poolCore[E]) paused() bool { return c.usable() && c.e.Paused() }

// stop is Stop. It closes the engine, waits for its tasks and its workers,
// and ends the pool. Called from inside one of c's tasks, which could never
// finish while Stop waits, or from a worker's own code as it retires (a
// state's close), which the workers' exit would wait for, it returns after
// closing the engine: the queued tasks still run, and a stop from outside
// the pool waits for them.
func (c *poolCore[E]) stop() {
	if !c.usable() {
		return
	}
	began := clock.Now()
	c.stopGroups()
	c.e.Close()
	c.e.Resume()
	if c.e.Wait(nil) != nil || c.e.InCallback() {
		return
	}
	c.exit()
	if c.obs != nil {
		// Once the pool has stopped; a Shutdown racing this Stop may have
		// dropped tasks, and its summary would come second.
		c.obs.stopped(began, int(c.stats().Dropped))
	}
}

// stopGroups readies the groups on the pool for Stop and Shutdown, which
// run what was queued before they began but take no more steps once the
// engine closes: each group submits now a step for each of its queued
// tasks within its limit, as it will for tasks that come before the
// close, so that they run side by side as the workers free up rather than
// one after another on the worker of the group's one pending step (a task
// that waits for a later task of its group would wait for ever).
func (c *poolCore[E]) stopGroups() {
	c.stopping.Store(true)
	c.groups.stopping()
}

// shutdown is Shutdown: stop with a deadline. When ctx ends first, it ends
// the pool, drops the queued tasks (the engine's and, with listed, the
// ones the pool tracks), cancels the pool's context so that the running
// tasks see it, waits for them and reports the drop as a *ShutdownError.
func (c *poolCore[E]) shutdown(ctx context.Context) error {
	if !c.usable() {
		return errZeroPool
	}
	began := clock.Now()
	c.stopGroups()
	c.e.Close()
	var err error
	if c.e.Paused() && !c.e.InWorker() {
		err = ErrPaused // the queue would not start: drop it now
	} else {
		err = c.e.Wait(ctx)
	}
	if err == nil && c.e.InCallback() {
		err = engine.ErrInWorker // a worker's own code, as it retires (see stop)
	}
	if err == engine.ErrInWorker {
		return fmt.Errorf("%w: Shutdown cannot wait for the task that called it; the pool is closed and its queued tasks still run (once resumed, if paused)", err)
	}
	dropped := 0
	if err != nil {
		// End the pool before the drain: a step that finishes its task
		// meanwhile must drop the next one, not run it; and cancel only
		// after the drain: a worker freed by the cancellation must not
		// start a task about to be dropped.
		if c.listed != nil {
			c.listed.markEnd() // dropListed releases it
		} else {
			c.end.mark()
			c.end.release()
		}
		dropped = c.dropQueued()
	}
	c.exit()
	if c.obs != nil {
		c.obs.stopped(began, int(c.stats().Dropped)) // late drops included
	}
	if err != nil {
		return &ShutdownError{Dropped: dropped, Err: err}
	}
	return nil
}

// dropQueued is Shutdown once its deadline has passed: it drops the
// engine's queue and the tasks the pool tracks, cancels the running tasks
// and waits for them, and returns how many tasks it dropped. A Drop hook
// that panics in the drain (which Hooks forbids) still leaves every
// dropped task counted and completed, and no task running, before the
// panic reaches the caller: a later Stop then stops the pool.
func (c *poolCore[E]) dropQueued() (dropped int) {
	defer func() {
		if c.listed != nil {
			c.listed.dropListed(false, 0) // before the wait: running tasks may wait for them
		}
		c.finish() // the running tasks may wait for what the layers hold, too
		c.e.Wait(nil)
		if c.listed != nil {
			dropped = c.listed.dropListed(true, dropped) // no worker is left to start them
		}
	}()
	defer c.e.Resume() // a paused engine's workers take what the drain leaves (a cell still being filled)
	return c.e.Drain() // a concurrent Shutdown drains the rest, if any
}

// exit makes the workers exit, waits for them (and for exited), then
// finishes the pool.
func (c *poolCore[E]) exit() {
	c.e.Exit()
	if c.exited != nil {
		c.exited()
	}
	c.finish()
}

// finish ends the pool, cancels its context and waits until whatever held
// tasks for the pool has dropped them. It is idempotent.
func (c *poolCore[E]) finish() {
	c.end.close()
	c.cancel()
	c.end.settle()
}

// resize is Resize.
func (c *poolCore[E]) resize(n int) error {
	switch {
	case !c.usable():
		return errZeroPool
	case n < 1:
		return invalidf("Resize(%d): worker limit must be at least 1", n)
	case c.end.over():
		return ErrStopped
	}
	c.e.Resize(n)
	return nil
}

// context is Context.
func (c *poolCore[E]) context() context.Context {
	if !c.usable() {
		return context.Background()
	}
	return c.ctx
}

// done is Done.
func (c *poolCore[E]) done() <-chan struct{} {
	if !c.usable() {
		return closedChan
	}
	return c.end.done().Done()
}

// stats is Stats.
func (c *poolCore[E]) stats() Stats {
	if !c.usable() {
		return Stats{}
	}
	// Submit tasks that Shutdown dropped as a worker began them ran as
	// far as the engine knows, and so did the places of cancelled tasks
	// that workers passed over. A worker counts one of those before the
	// engine counts it as completed, so Completed less them can dip for a
	// moment: it never reports less than it has. The highest value
	// reported is read first: one that a concurrent call published after
	// our reading of the engine could exceed our Submitted.
	//
	// The places of cancelled tasks not passed over are queued, or were
	// drained by Shutdown, which the engine counts as dropped: Dropped
	// leaves them out. No task is cancelled once Shutdown has marked the
	// end, before its drain (see Pool.cancelQueued), and the skips are
	// read before the cancels (a worker counts a skip after the Cancel
	// counted the task), so Dropped never reports more than it will have.
	high := c.completedHigh.Load()
	es := c.e.Stats()
	late := c.lateDrops.Load()
	skips := c.cancelSkips.Load()
	cancels := c.cancels.Load()
	pending := cancels - skips
	s := Stats{
		MaxWorkers: es.MaxWorkers,
		Workers:    es.Workers,
		Idle:       es.Idle,
		Running:    int(min(max(0, es.Unfinished-es.Queued), int64(es.Workers))), // a task runs on a live worker
		Queued:     int(es.Queued - min(int64(pending), es.Queued)),
		Submitted:  es.Completed + es.Dropped + uint64(es.Unfinished),
		Completed:  es.Completed,
		Failed:     c.failed.Load(),
		Panicked:   es.Panicked + c.panicked.Load(),
		Dropped:    es.Dropped + late,
		Cancelled:  cancels,
	}
	s.Dropped -= min(pending, s.Dropped)
	s.Completed = max(s.Completed-min(late+skips, s.Completed), high)
	for s.Completed > high && !c.completedHigh.CompareAndSwap(high, s.Completed) {
		high = c.completedHigh.Load()
	}
	return s
}

// latency is Latency.
func (c *poolCore[E]) latency() (LatencySnapshot, bool) {
	if c == nil || c.obs == nil || c.obs.lat == nil {
		return LatencySnapshot{}, false
	}
	return c.obs.lat.Snapshot(), true
}

// poolName is Name.
func (c *poolCore[E]) poolName() string {
	if c == nil {
		return ""
	}
	return c.name
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
