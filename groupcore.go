package crew

import (
	"cmp"
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/queue"
)

// This file holds the machinery shared by Group, ResultGroup, Stream and the
// Map/ForEach helpers: a group's own queue of tasks, the steps that run them
// on the pool, cancellation, error collection and Wait.
//
// A group never hands a task to the pool directly. Go appends the task to the
// group's queue (a chunked FIFO under the group's mutex) and makes sure a
// step, c.step, is on its way to the pool through the group's stepper (see
// layer.go): a func value made once per group, so the pool's Go path
// allocates nothing per task. A step takes the first task of the queue;
// tasks are interchangeable because each carries its own sequence number.
// Steps are counted (pending: submitted, not started; running: running a
// task), and the group keeps one step pending (stepsAhead) while tasks are
// queued and its limit leaves room: Go submits it when none is pending, and
// a step that takes a task while others are queued submits the next before
// it runs its own. The steps thus fan out across the pool's workers one
// hand-off at a time, as fast as the workers take them, rather than as a
// burst of one step per task, which would make the pool start a worker for
// each step that waits for the group's mutex. A limited group keeps at most
// limit tasks running, and its other tasks wait in its own queue, not in
// the pool's and not on a worker. When a task finishes and tasks wait for
// a slot, the step that ran it submits a new step (without waiting, which
// never blocks a worker) or, if the pool cannot take one, runs the next
// task itself. Steps that a full bounded queue refuses are owed: the pool
// takes them past its queue's bound (see stepper.owe). While tasks wait
// within the limit a step is always pending: submitted, owed, or reserved
// by a step that submits it before it runs its own task, as a task left
// for the group's running tasks could wait for ever behind one that waits
// for it (a producer and its consumer). As Stop or Shutdown begins, before
// the pool closes and takes no more steps, every group submits a step for
// each of its queued tasks within its limit, whatever steps are pending
// (poolStopping): one reserved may reach the pool only once it has closed.
// The pool then runs them side by side as it runs the rest of its queue.
//
// Wait helps, in a slot of the pool's: it runs the group's queued tasks on
// the waiting goroutine while the group's limit allows, from outside the
// pool in a slot it borrows while the pool has fewer live workers than its
// limit or a parked worker to lend one (engine.Borrow), from one of the
// pool's own tasks in that task's slot. This keeps a group that is waited
// on inside a pool task from deadlocking when every worker is busy (the
// classic trap of nested groups on a bounded pool), spares a hand-off per
// task where the pool has room, and never runs more of the pool's tasks at
// once than its limit. A waiter that finds no slot yields a few times
// before it asks whether it is one of the pool's tasks, which costs a walk
// of its stack: the workers holding the slots are most often about to
// take the group's steps. Wait
// also skips the queued tasks of a cancelled group, so that tasks left in
// the group's queue (the pool stopped before their steps were queued, or
// Shutdown dropped them) are accounted for rather than lost.

// entry is a queued task with its sequence number: its index in submission
// order, which is where a ResultGroup stores its result.
type entry[I any] struct {
	seq int
	it  I
}

// helpYields is how many times a waiter that finds queued tasks and no
// slot to run them in yields its processor before it asks whether it is
// one of the pool's workers, which costs a walk of its stack.
const helpYields = 2

// A Go that queues the yieldEvery-th task while more than yieldDepth wait
// yields the processor once.
const (
	yieldEvery = 64
	yieldDepth = 512
)

// firstChunk is the size of the first chunk a group's queue allocates,
// once its inline room is full.
const firstChunk = 64

type seqErr struct {
	seq int
	err error
}

// core is a group of tasks of type I running on a pool. The embedding type
// sets exec (run one task) and optionally lost and grow, then calls init.
type core[I any] struct {
	p      *Pool
	ctx    context.Context
	cancel context.CancelCauseFunc
	pctx   context.Context // the pool's context, nil for a zero pool
	slot   int             // in the pool's watchers, -1 when not in them
	cfg    groupConfig
	limit  int       // cfg.limit, or no limit; guarded by mu once SetLimit may change it
	step   layerStep // c.runStep, made once
	steps  stepper
	crash  bool // the pool crashes on panics: do not recover
	// crashing is set by a task whose panic is about to crash the program,
	// so that no deferred cleanup on its way out waits for it (see feed).
	crashing atomic.Bool

	// exec runs task it, number seq, with the task's context.
	exec func(ctx context.Context, seq int, it I) error
	// grow, if set, is called under mu when seq is given to a new task.
	grow func(seq int)
	// unset, if set, clears the result of task seq, whose call panicked or
	// called runtime.Goexit: WithRetry, an earlier call's may be there.
	unset func(seq int)
	// hooks, if set, are a Stream's or a MapErrStream's: set before the
	// first task, never replaced.
	hooks *coreHooks

	mu         sync.Mutex
	q          *queue.FIFO[entry[I]] // own, or one that finished groups share (see init)
	own        queue.FIFO[entry[I]]
	inline     [4]entry[I]   // own's first chunk: a small group allocates none
	lists      [4][]entry[I] // own's lists of chunks, likewise
	fifos      *sync.Pool    // of *queue.FIFO[entry[I]]; nil: the group has its own
	seq        int           // tasks accepted
	pending    int           // steps submitted to the pool (or owed) and not started
	running    int           // tasks running, on steps or helping waiters
	unfinished int           // tasks queued or running
	wake       chan struct{}
	closed     bool  // Wait has returned
	ended      bool  // Done was called and no task was left: Go is refused
	waiters    int32 // goroutines parked in wait
	result     error
	err        error         // first error
	errs       []seqErr      // WithAllErrors
	panicked   *PanicError   // the first panic
	unseen     []*PanicError // panics Wait will not report (see record)
	skipped    int
	later      *coreLater[I] // made by Done or a first retry
}

// coreHooks are the functions through which a Stream or a MapErrStream
// sees its tasks' ends, besides exec.
type coreHooks struct {
	// lost, if set, is told about an accepted task that is skipped: it
	// never runs. (A task that panics is exec's to notice.)
	lost func(seq int)
	// stranded, if set, is called when the pool refused steps for queued
	// tasks: goroutines that wait other than in wait may run them before
	// their steps come, if ever (see Stream.Go).
	stranded func()
	// settle, if set, takes over from record the outcome of each task: it
	// is called under mu with the task's error (nil, the function's, a
	// *PanicError, or for a skipped task the cancellation's cause) and
	// returns the cause with which to cancel the group, or nil.
	settle func(seq int, err error, skipped bool) error
	// until, if set, ends await early: await returns once it reports true.
	// Read and called under mu.
	until func() bool
	// noRetry refuses WithRetry: the tasks return no error to retry on.
	noRetry bool
}

// coreLater is the state of a group that only Done and WithRetry need,
// made on first use under mu, so that a group using neither is smaller.
type coreLater[I any] struct {
	doneCh   chan struct{}      // made by Done; closed once the group has ended
	stopSkip func() bool        // unregisters skipQueued from ctx (see doneChan)
	retries  map[int]tried      // the failed calls of each task that is to be called again
	backoffs map[int]backoff[I] // the tasks waiting for their delay
}

// laterLocked returns c.later, made if need be. Called under mu.
func (c *core[I]) laterLocked() *coreLater[I] {
	if c.later == nil {
		c.later = new(coreLater[I])
	}
	return c.later
}

// untilNow reports whether the hooks' until ends await now. Called under mu.
func (c *core[I]) untilNow() bool {
	return c.hooks != nil && c.hooks.until != nil && c.hooks.until()
}

// tried is what a task of a group built WithRetry has been through: its
// failed calls and the last one's error.
type tried struct {
	calls int
	err   error
}

// backoff is a task of a group built WithRetry waiting for its delay,
// holding no slot: its timer puts it back in the queue (see retryLater).
type backoff[I any] struct {
	e   entry[I]
	err error // the last call's
	t   *time.Timer
}

// init sets c up on p; it reports a nil ctx and nil or invalid options.
// With fifos, a pool of queues that finished groups hand on, the group
// takes its queue from there, so that a backlog's chunks serve the next
// group too; otherwise it has its own, with room for a few tasks inline.
func (c *core[I]) init(ctx context.Context, p *Pool, opts []GroupOption, fifos *sync.Pool) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := c.cfg.apply(opts); err != nil {
		return err
	}
	if c.cfg.retry != nil && c.hooks != nil && c.hooks.noRetry {
		return invalidf("WithRetry: a Stream's tasks return no error to call them again on")
	}
	c.p = p
	// Without a limit of its own, every queued task gets its step in the
	// pool's queue; the pool's limit bounds them. (Steps capped at the
	// pool's limit, with the rest in the group's queue, make the workers
	// submit the steps, which is slower for tiny tasks.)
	c.limit = math.MaxInt
	if c.cfg.limit > 0 {
		c.limit = c.cfg.limit
	}
	c.crash = p.crashes()
	c.own.First = firstChunk
	c.own.Lend(c.lists[:], c.inline[:])
	c.q = &c.own
	if c.fifos = fifos; fifos != nil {
		q, ok := fifos.Get().(*queue.FIFO[entry[I]])
		if !ok {
			q = &queue.FIFO[entry[I]]{First: firstChunk}
		}
		c.q = q
	}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if p.core().usable() {
		// Shutdown cancels the pool's context when its deadline passes;
		// group tasks see it like Submit tasks do, and the group's queued
		// tasks are skipped rather than left behind steps it dropped.
		c.pctx = p.Context()
		c.slot = -1
		if !p.core().groups.add(c.pctx, c) {
			c.poolEnded()
		}
	}
	c.step = layerStep{run: c.runStep, owner: c}
	c.steps.init(p)
	return nil
}

// mustInit is init for the constructors, which panic on what init reports.
func (c *core[I]) mustInit(ctx context.Context, p *Pool, opts []GroupOption, fifos *sync.Pool) {
	if err := c.init(ctx, p, opts, fifos); err != nil {
		panic(err)
	}
}

// watchSlot is where the pool's watchers keep c's index (see watchers).
func (c *core[I]) watchSlot() *int { return &c.slot }

// poolEnded cancels the group once the pool's context has ended: with
// ErrStopped if Shutdown gave up, else with the context's cause.
func (c *core[I]) poolEnded() {
	cause := context.Cause(c.pctx)
	if c.p.refuses() != nil {
		cause = ErrStopped
	}
	c.cancel(cause)
}

// push accepts one task, or returns why not: ErrGroupDone, ErrStopped, or an
// error wrapping ErrInvalid for a zero pool. The last two are also recorded
// as the group's error. With try, push accepts the task only if it can
// start at once within the limit, and otherwise returns errNoRoom.
func (c *core[I]) push(it I, try bool) error {
	if c.ctx == nil {
		return errZeroGroup
	}
	if err := c.lockOpen(); err != nil {
		return err
	}
	if try && c.running+c.q.Len() >= c.limit {
		c.mu.Unlock()
		return errNoRoom
	}
	seq := c.seq
	c.seq++
	if c.grow != nil {
		c.grow(seq)
	}
	c.q.Push(entry[I]{seq, it})
	c.unfinished++
	if c.later != nil && c.later.doneCh != nil && c.ctx.Err() != nil {
		// Done's skipQueued ran at the cancellation, before this task
		// came, and with no waiter nothing else skips it if its step is
		// dropped (an owed step the stopped pool refused, the pool's queue
		// dropped by Shutdown): skip it now.
		c.mu.Unlock()
		c.skipQueued()
		return nil
	}
	n := c.needSteps()
	// A waiter that parked before the task came may be the only goroutine
	// able to run it (in its slot, with every worker of the pool held):
	// wake it to look again.
	c.signal()
	deep := seq%yieldEvery == 0 && c.q.Len() > yieldDepth
	c.mu.Unlock()
	if n > 0 {
		c.submit(n, false)
	}
	if deep {
		// The producer outruns the tasks, which then compete with it for
		// the processors: yield now and then so they catch up, rather than
		// grow the queue without limit (the engine does the same).
		runtime.Gosched()
	}
	return nil
}

// setLimit is SetLimit: it changes the limit under mu and submits the steps
// that a higher limit lets the queued tasks have.
func (c *core[I]) setLimit(n int) error {
	switch {
	case c == nil || c.ctx == nil:
		return errZeroGroup
	case n == 0:
		return invalidf("SetLimit(0): a limit must be at least 1, or negative for none")
	case n < 0:
		n = math.MaxInt
	}
	c.mu.Lock()
	c.limit = n
	k := c.needSteps()
	c.signal() // a waiter parked at the old limit may run a queued task now
	c.mu.Unlock()
	if k > 0 {
		c.submit(k, false)
	}
	return nil
}

// errNoRoom is push's answer to a try that finds the group's limit reached.
var errNoRoom = errors.New("crew: no room in the group's limit")

// accept is the Go and TryGo of Group, ResultGroup and Stream, c nil for a
// nil one: it records a nil task (isNil) as the group's error, as Go
// documents, and pushes it.
func (c *core[I]) accept(it I, isNil, try bool) error {
	switch {
	case c == nil:
		return errZeroGroup
	case isNil && c.ctx != nil:
		c.fail(ErrNilTask)
		return ErrNilTask
	}
	return c.push(it, try)
}

// lockOpen locks c.mu if c accepts tasks. Otherwise it returns why not,
// ErrGroupDone or the pool's refusal (also recorded as the group's
// error), with c.mu unlocked.
func (c *core[I]) lockOpen() error {
	c.mu.Lock()
	if c.closed || c.ended {
		c.mu.Unlock()
		return ErrGroupDone
	}
	if err := c.p.refuses(); err != nil {
		c.mu.Unlock()
		c.fail(err)
		return err
	}
	return nil
}

// context is the group's Context, nil for a nil or zero group.
func (c *core[I]) context() context.Context {
	if c == nil {
		return nil
	}
	return c.ctx
}

// finished reports whether Wait has returned.
func (c *core[I]) finished() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// pushN accepts n tasks with the zero value of I, for the slice helpers,
// whose tasks are their sequence numbers.
func (c *core[I]) pushN(n int) error {
	if err := c.lockOpen(); err != nil {
		return err
	}
	var zero I
	for range n {
		c.q.Push(entry[I]{c.seq, zero})
		c.seq++
	}
	c.unfinished += n
	k := c.needSteps()
	c.mu.Unlock()
	if k > 0 {
		c.submit(k, false)
	}
	return nil
}

// needSteps reserves the steps to submit so that stepsAhead are pending
// while tasks are queued, within the limit; once the pool is stopping, so
// that every queued task has one (see poolStopping). Called under mu.
func (c *core[I]) needSteps() int {
	ahead := stepsAhead
	if c.p.stopping() {
		ahead = c.q.Len()
	}
	n := min(c.q.Len(), ahead) - c.pending
	if room := c.limit - c.running - c.pending; room < n {
		n = room
	}
	if n <= 0 {
		return 0
	}
	c.pending += n
	return n
}

// submit hands n reserved steps to the pool without ever blocking. When
// its queue is full, the steps it refused are owed (see stepper): queued
// tasks within the limit must get their steps, since a task left to the
// group's running tasks or to Wait may wait for them for ever (a producer
// and its consumer in one group, the producer running). A step that calls
// submit with keep keeps one of them and runs the next task itself (submit
// returns false), unless the pool has more workers than its limit (Resize
// lowered it): the step's worker is then one too many, and every refused
// step is owed, unless Stop closes the pool first. When the
// pool has stopped, the refused steps are given up; if nothing of the
// group is running, the group fails with ErrStopped so that its queued
// tasks are skipped.
func (c *core[I]) submit(n int, keep bool) bool {
	for i := range n {
		if c.steps.submit(nil, c.step, pushTry) != nil {
			return !c.refused(n-i, keep)
		}
	}
	return true
}

// refused deals with n reserved steps that the pool did not take (see
// submit), and reports whether the calling step keeps one.
func (c *core[I]) refused(n int, keep bool) (kept bool) {
	stopped := c.p.refuses() != nil
	if keep && !stopped && c.p.c.e.OverLimit() {
		// The step's worker is one too many: it retires after its task,
		// and the step it would have kept goes past the full queue's bound
		// like the others. Should Stop close the pool first, it keeps the
		// step after all, as a step on a stopping pool does.
		if c.steps.submit(nil, c.step, pushPast) == nil {
			n--
			keep = false
		} else {
			stopped = true
		}
	}
	c.mu.Lock()
	if keep {
		n--
		c.pending--
	}
	if stopped {
		c.forgoSteps(n, keep)
		return keep
	}
	c.mu.Unlock()
	for range n {
		c.steps.owe(c.step)
	}
	if c.hooks != nil && c.hooks.stranded != nil {
		c.hooks.stranded() // a producer may run a task before its step comes
	}
	return keep
}

// stepDropped gives up an owed step that the stopped pool refused.
func (c *core[I]) stepDropped() {
	c.mu.Lock()
	c.forgoSteps(1, false)
}

// forgoSteps gives up n reserved steps that will not be submitted: the tasks
// left without a step wait for a running step, a waiter or a producer to
// run them, and if the pool has stopped and nothing of the group is
// running, the group fails with ErrStopped so that they are skipped.
// stepGoesOn tells that the caller is a step about to run the next task.
// Called with mu held; it unlocks it.
func (c *core[I]) forgoSteps(n int, stepGoesOn bool) {
	c.pending -= n
	idle := !stepGoesOn && c.running+c.pending == 0
	c.signal()
	c.mu.Unlock()
	if c.hooks != nil && c.hooks.stranded != nil {
		c.hooks.stranded()
	}
	if idle && c.p.refuses() != nil {
		c.fail(ErrStopped)
	}
}

// signal wakes a goroutine parked in wait, if any. Called under mu.
func (c *core[I]) signal() {
	if c.waiters > 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// runStep is what the pool runs for the group: it takes the first queued
// task if the limit allows, submits the next step if tasks are left, and
// keeps going if the pool took no follow-up step.
func (c *core[I]) runStep() {
	c.mu.Lock()
	c.pending--
	for c.q.Len() > 0 && c.running < c.limit {
		e := c.q.Take()
		c.running++
		n := c.needSteps() // the next step, for the tasks behind this one
		c.mu.Unlock()
		if n > 0 {
			c.submit(n, false)
		}
		if !c.runItem(e, true) {
			return
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
}

// poolStopping submits a step for each queued task within the limit: the
// pool is about to close (Stop, Shutdown), after which it takes no step,
// and it runs only what it queued before. A task left behind the one
// pending step would then wait for a running task of the group to take
// it on as it finishes, one after another, or for ever if the running
// tasks wait for it. The steps already pending do not count: one that is
// reserved but not yet submitted (a step's for the task behind its own,
// a Go's) may reach the pool only after it has closed. A step too many
// finds the queue empty, or the limit reached, and ends.
func (c *core[I]) poolStopping() {
	c.mu.Lock()
	n := min(c.q.Len(), c.limit-c.running)
	if n > 0 {
		c.pending += n
	}
	c.mu.Unlock()
	if n > 0 {
		c.submit(n, false)
	}
}

// stepsAhead is how many steps a group keeps pending while tasks are
// queued within its limit: each step that starts a task submits the next.
const stepsAhead = 1

// mayHelp reports whether the calling goroutine may run the group's queued
// tasks in its own slot: it is one of the pool's workers, a task waiting
// for the group. Any other goroutine must borrow a slot for each task it
// runs (see borrow), or it would run more of the pool's tasks at once than
// its limit. It reads the caller's stack (see engine.InWorker): call it
// only on a path about to block.
func (c *core[I]) mayHelp() bool {
	pc := c.p.core()
	return pc.usable() && pc.e.InWorker()
}

// borrow takes a slot of the pool for a task the caller runs itself, if
// the pool's limit has room or a parked worker lends its slot (see
// engine.Borrow); giveBack returns it.
func (c *core[I]) borrow() bool {
	pc := c.p.core()
	return pc.usable() && pc.e.Borrow()
}

func (c *core[I]) giveBack() { c.p.c.e.Return() }

// runBorrowed runs e, which the caller took off the queue, in a borrowed
// slot, as one of the pool's workers would: a wait in it for the pool's
// work helps or lends the slot (see engine.AsWorker). With more, it goes on
// in the same slot with the next queued tasks while the limit allows, the
// pool is not paused and more unfinished tasks than more are left (a
// waiter's own condition); more < 0 runs e alone.
func (c *core[I]) runBorrowed(e entry[I], more int) {
	defer c.giveBack()
	c.p.c.e.AsWorker(func() {
		for {
			c.runItem(e, false)
			if more < 0 {
				return
			}
			c.mu.Lock()
			if c.unfinished <= more || c.untilNow() || c.q.Len() == 0 || c.running >= c.limit || c.ctx.Err() != nil || c.p.c.e.Paused() {
				c.mu.Unlock()
				return
			}
			e = c.q.Take()
			c.running++
			c.mu.Unlock()
		}
	})
}

// helpOne runs one queued task on the calling goroutine if the limit allows
// (or skips it if the group is cancelled), and reports whether it did.
// inside says that the caller may run it in its own slot (see mayHelp);
// otherwise it must borrow one.
func (c *core[I]) helpOne(inside bool) bool {
	c.mu.Lock()
	if c.q.Len() == 0 || c.running >= c.limit && c.ctx.Err() == nil {
		c.mu.Unlock()
		return false
	}
	borrowed := c.ctx.Err() == nil && !inside // a skip needs no slot
	if borrowed && !c.borrow() {
		c.mu.Unlock()
		return false
	}
	e := c.q.Take()
	c.running++
	c.mu.Unlock()
	if borrowed {
		c.runBorrowed(e, -1)
	} else {
		c.runItem(e, false)
	}
	return true
}

// runItem runs (or, if the group is cancelled, skips) a task that the
// caller took from the queue and counted as running. With keep, the caller
// is a step that goes on with the next queued task itself when the pool
// would take no step for it, and runItem reports whether it must (see
// done); without, the steps the task's end calls for are all submitted or
// owed.
func (c *core[I]) runItem(e entry[I], keep bool) (again bool) {
	if c.ctx.Err() == nil && c.pctx != nil && (c.pctx.Err() != nil || c.p.over()) {
		// The pool's watchers cancel the group on a goroutine of their
		// own, maybe later: cancel now, so that no queued task starts
		// meanwhile.
		// Shutdown ends the pool before it drops its queue and cancels
		// its context, and a task must not start in between either.
		c.poolEnded()
	}
	if c.ctx.Err() != nil {
		if err := c.forget(e.seq); err != nil {
			// Called before and queued again after its delay: it ends
			// with its last error, as one still waiting would.
			return c.done(e.seq, err, false, keep)
		}
		if c.hooks != nil && c.hooks.lost != nil {
			c.hooks.lost(e.seq)
		}
		return c.done(e.seq, nil, true, keep)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		var err error = ErrGoexit
		v := recover()
		if v != nil {
			if c.crash {
				// WithCrashOnPanic: crash now, before any accounting lets
				// Wait return. The stack printed still shows the task's
				// frames, below this deferred call.
				c.crashing.Store(true)
				panic(v)
			}
			err = &PanicError{Value: v, Stack: debug.Stack()}
			c.p.notePanic()
		}
		// A step that runtime.Goexit ends (recovered as nil) cannot go on
		// with the next task: it keeps no step.
		if c.forget(e.seq) != nil && c.unset != nil { // a panic is not retried
			c.unset(e.seq) // only the last call counts
		}
		again = c.done(e.seq, err, false, keep && v != nil)
	}()
	ctx := c.ctx
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	var err error
	if r := c.cfg.retry; r != nil {
		err = r.call(ctx, func(ctx context.Context) error { return c.exec(ctx, e.seq, e.it) })
		returned = true
		if err != nil {
			if again, later := c.retryLater(e, err, keep); later {
				return again
			}
			err = unwrapPermanent(err)
		} else {
			c.forget(e.seq)
		}
	} else {
		err = c.exec(ctx, e.seq, e.it)
		returned = true
	}
	return c.done(e.seq, err, false, keep)
}

// retryLater puts a task whose call returned err aside for its delay, if
// the retry policy calls it again: its slot is freed and a timer puts it
// back in the queue (see requeue). It reports whether it did, and, like
// done, whether the caller must go on with the next queued task.
func (c *core[I]) retryLater(e entry[I], err error, keep bool) (again, later bool) {
	r := c.cfg.retry
	c.mu.Lock()
	l := c.laterLocked()
	attempt := l.retries[e.seq].calls + 1
	if !r.again(c.ctx, attempt, err) {
		delete(l.retries, e.seq)
		c.mu.Unlock()
		return false, false
	}
	if l.retries == nil {
		l.retries = make(map[int]tried)
		l.backoffs = make(map[int]backoff[I])
		// A cancelled group ends its waiting tasks at once, not after
		// their delay.
		context.AfterFunc(c.ctx, c.endBackoffs)
	}
	l.retries[e.seq] = tried{attempt, err}
	l.backoffs[e.seq] = backoff[I]{e, err, time.AfterFunc(r.Backoff(attempt), func() { c.requeue(e.seq) })}
	c.running--
	n := c.needSteps()
	c.signal()
	c.mu.Unlock()
	return n > 0 && !c.submit(n, keep), true
}

// requeue puts task seq, whose delay is over, back in the queue, unless
// endBackoffs did.
func (c *core[I]) requeue(seq int) {
	c.mu.Lock()
	b, ok := c.later.backoffs[seq]
	if !ok {
		c.mu.Unlock()
		return
	}
	delete(c.later.backoffs, seq)
	if c.ctx.Err() != nil {
		// Cancelled meanwhile: end it as endBackoffs does, rather than
		// queue it after the queue was skipped (see doneChan).
		delete(c.later.retries, seq)
		c.running++ // for done to count it out
		c.mu.Unlock()
		c.done(seq, b.err, false, false)
		return
	}
	c.q.Push(b.e)
	n := c.needSteps()
	c.signal()
	c.mu.Unlock()
	if n > 0 {
		c.submit(n, false)
	}
}

// forget drops the record of task seq's failed calls, if it has one, and
// returns the last one's error, or nil.
func (c *core[I]) forget(seq int) error {
	if c.cfg.retry == nil {
		return nil
	}
	c.mu.Lock()
	var t tried
	ok := false
	if c.later != nil {
		t, ok = c.later.retries[seq]
		delete(c.later.retries, seq)
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return t.err
}

// endBackoffs ends every task waiting for its delay, once the group is
// cancelled: each finishes at once with its last call's error.
func (c *core[I]) endBackoffs() {
	c.mu.Lock()
	var ended []backoff[I]
	l := c.later
	for seq, b := range l.backoffs {
		b.t.Stop() // if it fired, requeue finds the task gone
		delete(l.backoffs, seq)
		delete(l.retries, seq)
		ended = append(ended, b)
	}
	c.running += len(ended) // for done to count them out
	c.mu.Unlock()
	for _, b := range ended {
		c.done(b.e.seq, unwrapPermanent(b.err), false, false)
	}
}

// done accounts for a finished task and submits steps for queued tasks
// that now fit the limit. With keep, a step the pool would not take is
// kept for the caller to run itself, and done reports whether it was.
func (c *core[I]) done(seq int, err error, skipped, keep bool) bool {
	c.mu.Lock()
	if c.hooks != nil && c.hooks.settle != nil {
		if skipped {
			c.skipped++
			err = context.Cause(c.ctx)
		}
		if cause := c.hooks.settle(seq, err, skipped); cause != nil {
			c.cancel(cause)
		}
	} else if skipped {
		c.skipped++
	} else if err != nil {
		if cause := c.record(seq, err); cause != nil {
			// Cancel before the slot is free: no queued task may start
			// between the error and the cancellation. (Cancelling takes
			// only the contexts' own locks and calls nothing of ours.)
			c.cancel(cause)
		}
	}
	c.running--
	c.unfinished--
	if c.unfinished == 0 && c.later != nil && c.later.doneCh != nil {
		c.end()
	}
	n := c.needSteps()
	c.signal()
	c.mu.Unlock()
	return n > 0 && !c.submit(n, keep)
}

// doneChan is Done: it makes the channel and ends the group at once if no
// task is left.
func (c *core[I]) doneChan() <-chan struct{} {
	if c == nil || c.ctx == nil {
		return closedChan
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.laterLocked()
	if l.doneCh == nil {
		l.doneCh = make(chan struct{})
		if c.unfinished == 0 {
			c.end()
		} else {
			// Only a waiter skips the queued tasks of a cancelled group:
			// without one, nothing else would end it.
			l.stopSkip = context.AfterFunc(c.ctx, c.skipQueued)
		}
	}
	return l.doneCh
}

// skipQueued skips the tasks queued in a cancelled group, as a waiter
// would.
func (c *core[I]) skipQueued() {
	for {
		c.mu.Lock()
		if c.q.Len() == 0 {
			c.mu.Unlock()
			return
		}
		e := c.q.Take()
		c.running++
		c.mu.Unlock()
		c.runItem(e, false) // skips it
	}
}

// end closes the Done channel of a group left with no task, and refuses
// Go from then on. Called under mu.
func (c *core[I]) end() {
	if !c.ended {
		c.ended = true
		close(c.later.doneCh)
		if c.later.stopSkip != nil {
			c.later.stopSkip()
		}
	}
}

// record notes a task's error under mu and returns the cause with which to
// cancel the group, or nil. A panic that Wait will not report, as it
// returns the first error or re-panics with the first panic, is kept in
// unseen for the pool's panic handler (see finish).
func (c *core[I]) record(seq int, err error) (cause error) {
	pe, _ := err.(*PanicError)
	first := pe != nil && c.panicked == nil
	if first {
		c.panicked = pe
	}
	switch {
	case c.cfg.all:
		c.errs = append(c.errs, seqErr{seq, err})
		if c.cfg.cancelOn {
			cause = err // cancel calls after the first change nothing
		}
	case c.err == nil:
		c.err = err
		cause = err
	}
	var reported bool // by Wait
	switch {
	case c.cfg.repanic:
		reported = first // Wait re-panics with the first panic
	case c.cfg.all:
		reported = true // Wait joins every error
	default:
		reported = cause != nil // Wait returns the first error
	}
	if pe != nil && !reported {
		c.unseen = append(c.unseen, pe)
	}
	return cause
}

// fail records err as the error of a task that was not accepted.
func (c *core[I]) fail(err error) {
	c.mu.Lock()
	c.failLocked(c.seq, err)
	c.mu.Unlock()
}

// failAt records err as the error of task seq, found after the task itself
// finished (a Stream callback's panic).
func (c *core[I]) failAt(seq int, err error) {
	c.mu.Lock()
	c.failLocked(seq, err)
	c.mu.Unlock()
}

func (c *core[I]) failLocked(seq int, err error) {
	if c.closed || c.ctx == nil {
		return
	}
	cause := c.record(seq, err)
	if c.cfg.all && err == ErrStopped {
		cause = err // the group cannot go on: skip its queued tasks
	}
	if cause != nil {
		c.cancel(cause)
	}
	c.signal()
}

// await returns when at most n tasks are unfinished, or once until (if
// set) reports true, running queued tasks on the calling goroutine
// meanwhile where it may (see mayHelp). When the group's context is
// cancelled it skips every queued task, limit or not.
func (c *core[I]) await(n int) {
	c.mu.Lock()
	skipping := false // the context has been seen cancelled
	help := 0         // whether the caller may run tasks (see mayHelp): 1 yes, -1 no, 0 not asked yet
	yields := 0       // before asking
	for c.unfinished > n && !c.untilNow() {
		if c.q.Len() > 0 && (c.ctx.Err() != nil || c.running < c.limit && help > 0) {
			e := c.q.Take()
			c.running++
			c.mu.Unlock()
			c.runItem(e, false) // or skips it
			c.mu.Lock()
			continue
		}
		if c.q.Len() > 0 && c.running < c.limit && help <= 0 && c.borrow() {
			e := c.q.Take()
			c.running++
			c.mu.Unlock()
			c.runBorrowed(e, n)
			c.mu.Lock()
			continue
		}
		if c.q.Len() > 0 && c.running < c.limit && help == 0 {
			c.mu.Unlock()
			if yields < helpYields {
				// The pool's slots are taken, most often by workers
				// about to take the group's steps: give them the
				// processor before paying for mayHelp.
				yields++
				runtime.Gosched()
			} else if help = -1; c.mayHelp() {
				help = 1
			}
			c.mu.Lock()
			continue
		}
		if c.wake == nil {
			c.wake = make(chan struct{}, 1)
		}
		wake := c.wake
		c.waiters++
		c.mu.Unlock()
		var ctxDone <-chan struct{} // made only by a Wait that parks
		if !skipping {
			ctxDone = c.ctx.Done()
		}
		select {
		case <-wake:
		case <-ctxDone:
			skipping = true // from now on queued tasks are skipped
		}
		c.mu.Lock()
		c.waiters--
	}
	c.signal() // pass the wake-up on to another waiter
	c.mu.Unlock()
}

// wait is Wait: it waits for every task, finishes the group on the first
// call and returns its outcome, re-panicking WithRepanic.
func (c *core[I]) wait() error {
	if c == nil || c.ctx == nil {
		return errZeroGroup
	}
	pe, res, unseen := c.finish(false)
	if pe != nil && c.cfg.repanic {
		defer panic(pe) // even if the panic handler panics
	}
	c.handOver(unseen)
	return res
}

// finish is wait without the repanic: it waits for every task, closes the
// group the first time, and returns the first panic, the outcome and, the
// first time, the panics that Wait does not report, for the caller to
// hand to the pool's panic handler before it returns. discard says that
// the caller drops the outcome (feed, as its sequence panics), whose
// panics are then unseen too.
func (c *core[I]) finish(discard bool) (pe *PanicError, res error, unseen []*PanicError) {
	for {
		c.await(0)
		c.mu.Lock()
		if c.closed || c.unfinished == 0 {
			break
		}
		c.mu.Unlock() // a task came in since: wait for it too
	}
	first := !c.closed
	if first {
		c.closed = true
		unseen = c.unseenLocked(discard)
		c.result = c.outcome()
		if c.fifos != nil && c.q != &c.own {
			// Empty now: hand it on. A step still in the pool's queue
			// finds the group's own queue, empty too.
			c.fifos.Put(c.q)
			c.q = &c.own
		}
	}
	res, pe = c.result, c.panicked
	c.mu.Unlock()
	if first {
		c.cancel(res)
		if c.pctx != nil {
			c.p.core().groups.remove(c)
		}
	}
	return pe, res, unseen
}

// unseenLocked returns the panics that nobody will see unless the pool's
// panic handler gets them: those Wait does not report and, if the outcome
// is discarded, every panic. Called under mu, before outcome.
func (c *core[I]) unseenLocked(discard bool) []*PanicError {
	switch {
	case !discard:
		return c.unseen
	case c.cfg.all:
		var all []*PanicError
		for _, e := range c.errs {
			if pe, ok := e.err.(*PanicError); ok {
				all = append(all, pe)
			}
		}
		return all
	}
	reported := c.panicked // WithRepanic, Wait re-panics with it
	if !c.cfg.repanic {
		reported, _ = c.err.(*PanicError) // else it returns the first error
	}
	if reported == nil {
		return c.unseen
	}
	return append(c.unseen, reported)
}

// handOver passes pes to the pool's panic handler, every one of them even
// if the handler panics or calls runtime.Goexit.
func (c *core[I]) handOver(pes []*PanicError) {
	i := 0
	defer func() {
		if i < len(pes) { // the handler did not return
			c.handOver(pes[i+1:])
		}
	}()
	for ; i < len(pes); i++ {
		c.p.c.onPanic(pes[i])
	}
}

// outcome is Wait's error, computed once under mu.
func (c *core[I]) outcome() error {
	var cause error
	if c.skipped > 0 {
		cause = context.Cause(c.ctx)
	}
	if !c.cfg.all {
		if c.err != nil {
			return c.err
		}
		return cause
	}
	slices.SortStableFunc(c.errs, func(a, b seqErr) int { return cmp.Compare(a.seq, b.seq) })
	errs := make([]error, 0, len(c.errs)+1)
	for _, e := range c.errs {
		errs = append(errs, e.err)
	}
	if cause != nil && !slices.Contains(errs, cause) {
		errs = append(errs, cause)
	}
	c.errs = nil
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}
