package crew

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
)

// This file holds the machinery shared by Group, ResultGroup, Stream and the
// Map/ForEach helpers: a group's own queue of tasks, the steps that run them
// on the pool, cancellation, error collection and Wait.
//
// A group never hands a task to the pool directly. Go appends the task to the
// group's queue (a chunked FIFO under the group's mutex) and submits a step,
// c.step, to the pool: a func value made once per group, so the pool's Go
// path allocates nothing per task. A step takes the first task of the queue,
// not necessarily the one whose Go submitted it; tasks are interchangeable
// because each carries its own sequence number. Steps are counted (pending:
// submitted, not started; running: running a task), and Go submits one only
// when the queued tasks outnumber the pending steps and the group's limit
// leaves room, so a limited group keeps at most limit tasks running and its
// other tasks wait in its own queue, not in the pool's and not on a worker.
// When a task finishes and tasks wait for a slot, the step that ran it
// submits a new step (TrySubmit, which never blocks a worker) or, if the
// pool cannot take one, runs the next task itself. Steps that a full
// bounded queue refuses go to one goroutine per group that waits for room
// to submit them: every queued task within the limit gets its step, as a
// task left for the group's running tasks could wait for ever behind one
// that waits for it (a producer and its consumer).
//
// Wait helps: while tasks are queued and the limit allows, it runs them on
// the waiting goroutine. This keeps a group that is waited on inside a pool
// task from deadlocking when every worker is busy (the classic trap of
// nested groups on a bounded pool), and lets tasks left in the group's
// queue (the pool stopped before their steps were queued, or Shutdown
// dropped them) run or be skipped rather than be lost.

// crashes reports whether p was built WithCrashOnPanic: group tasks then let
// panics crash the program, like the pool's own tasks.
func (p *Pool) crashes() bool { return p != nil && p.crash }

// notePanic counts a panic recovered from a group task in Stats().Panicked.
func (p *Pool) notePanic() { p.panicked.Add(1) }

// refuses reports why p takes no new work, or nil when it does.
func (p *Pool) refuses() error {
	switch {
	case p == nil || p.e == nil:
		return errZeroPool
	case p.e.Closed():
		return ErrStopped
	}
	return nil
}

// maxWorkers returns p's worker limit, 1 for a zero pool.
func (p *Pool) maxWorkers() int {
	if p == nil {
		return 1
	}
	return max(1, p.Stats().MaxWorkers)
}

// entry is a queued task with its sequence number: its index in submission
// order, which is where a ResultGroup stores its result.
type entry[I any] struct {
	seq int
	it  I
}

const chunkLen = 128

// A Go that queues the yieldEvery-th task while more than yieldDepth wait
// yields the processor once.
const (
	yieldEvery = 64
	yieldDepth = 4 * chunkLen
)

type chunk[I any] struct {
	e    [chunkLen]entry[I]
	next *chunk[I]
}

// fifo is an unbounded queue of fixed-size chunks. A drained fifo keeps one
// chunk and one spare; with pool non-nil the chunks of a finished group go
// to it for the next group. Not safe for concurrent use.
type fifo[I any] struct {
	head, tail *chunk[I]
	r, w       int // next read index in head, next write index in tail
	n          int
	spare      *chunk[I]
	pool       *sync.Pool // of *chunk[I]; may be nil
}

func (q *fifo[I]) push(e entry[I]) {
	if q.tail == nil {
		c := q.acquire()
		q.head, q.tail, q.r, q.w = c, c, 0, 0
	} else if q.w == chunkLen {
		c := q.acquire()
		q.tail.next = c
		q.tail, q.w = c, 0
	}
	q.tail.e[q.w] = e
	q.w++
	q.n++
}

// pop removes the first entry; the queue must not be empty.
func (q *fifo[I]) pop() entry[I] {
	c := q.head
	e := c.e[q.r]
	c.e[q.r] = entry[I]{} // let the task's closure be collected
	q.r++
	q.n--
	switch {
	case q.n == 0: // then head == tail: rewind and reuse the chunk
		q.r, q.w = 0, 0
	case q.r == chunkLen:
		q.head, q.r = c.next, 0
		c.next = nil
		q.recycle(c)
	}
	return e
}

func (q *fifo[I]) acquire() *chunk[I] {
	if c := q.spare; c != nil {
		q.spare = nil
		return c
	}
	if q.pool != nil {
		if c, ok := q.pool.Get().(*chunk[I]); ok {
			return c
		}
	}
	return new(chunk[I])
}

func (q *fifo[I]) recycle(c *chunk[I]) {
	if q.spare == nil {
		q.spare = c
	} else if q.pool != nil {
		q.pool.Put(c)
	}
}

// release gives an empty queue's chunks back to the pool.
func (q *fifo[I]) release() {
	if q.n != 0 || q.pool == nil {
		return
	}
	if q.head != nil {
		q.pool.Put(q.head)
	}
	if q.spare != nil {
		q.pool.Put(q.spare)
	}
	q.head, q.tail, q.spare, q.r, q.w = nil, nil, nil, 0, 0
}

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
	unlink func() bool     // stops the link from pctx
	cfg    groupConfig
	limit  int    // cfg.limit, or no limit
	step   func() // c.runStep, made once
	crash  bool   // the pool crashes on panics: do not recover
	// crashing is set by a task whose panic is about to crash the program,
	// so that no deferred cleanup on its way out waits for it (see feed).
	crashing atomic.Bool

	// exec runs task it, number seq, with the task's context.
	exec func(ctx context.Context, seq int, it I) error
	// lost, if set, is told about an accepted task that is skipped: it
	// never runs. (A task that panics is exec's to notice.)
	lost func(seq int)
	// grow, if set, is called under mu when seq is given to a new task.
	grow func(seq int)
	// stranded, if set, is called when the pool refused steps for queued
	// tasks: goroutines that wait other than in wait may run them before
	// their steps come, if ever (see Stream.Go).
	stranded func()

	mu         sync.Mutex
	q          fifo[I]
	seq        int // tasks accepted
	pending    int // steps submitted to the pool and not started
	owed       int // of pending, steps the pool's full queue refused (see submit)
	running    int // tasks running, on steps or helping waiters
	unfinished int // tasks queued or running
	waiters    int // goroutines parked in wait
	wake       chan struct{}
	closed     bool // Wait has returned
	submitting bool // a goroutine runs submitOwed
	result     error
	err        error         // first error
	errs       []seqErr      // WithAllErrors
	panicked   *PanicError   // the first panic
	unseen     []*PanicError // panics Wait will not report (see record)
	skipped    int
}

func (c *core[I]) init(ctx context.Context, p *Pool, opts []GroupOption, chunks *sync.Pool) {
	if ctx == nil {
		panic(fmt.Errorf("%w: nil context", ErrInvalid))
	}
	c.p = p
	c.cfg.apply(opts)
	// Without a limit of its own, every queued task gets its step in the
	// pool's queue. (Capping the steps at the pool's worker limit, with
	// the rest of the tasks in the group's queue, measured 25% slower for
	// tiny tasks: the workers then submit the steps.)
	c.limit = math.MaxInt
	if c.cfg.limit > 0 {
		c.limit = c.cfg.limit
	}
	c.crash = p.crashes()
	c.q.pool = chunks
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if p.refuses() != errZeroPool {
		// Shutdown cancels the pool's context when its deadline passes;
		// group tasks see it like Submit tasks do, and the group's queued
		// tasks are skipped rather than left behind steps it dropped.
		c.pctx = p.Context()
		c.unlink = context.AfterFunc(c.pctx, c.poolEnded)
	}
	c.step = c.runStep
}

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
// as the group's error.
func (c *core[I]) push(it I) error {
	if c.ctx == nil {
		return errZeroGroup
	}
	if err := c.lockOpen(); err != nil {
		return err
	}
	seq := c.seq
	c.seq++
	if c.grow != nil {
		c.grow(seq)
	}
	c.q.push(entry[I]{seq, it})
	c.unfinished++
	n := c.needSteps()
	deep := seq%yieldEvery == 0 && c.q.n > yieldDepth
	c.mu.Unlock()
	if n > 0 {
		c.submit(n, true)
	}
	if deep {
		// The producer outruns the tasks, which then compete with it for
		// the processors: yield now and then so they catch up, rather than
		// grow the queue without limit (the engine does the same).
		runtime.Gosched()
	}
	return nil
}

// lockOpen locks c.mu if c accepts tasks. Otherwise it returns why not,
// ErrGroupDone or the pool's refusal (also recorded as the group's
// error), with c.mu unlocked.
func (c *core[I]) lockOpen() error {
	c.mu.Lock()
	if c.closed {
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
		c.q.push(entry[I]{c.seq, zero})
		c.seq++
	}
	c.unfinished += n
	k := c.needSteps()
	c.mu.Unlock()
	if k > 0 {
		c.submit(k, true)
	}
	return nil
}

// needSteps reserves the steps to submit so that every queued task has one,
// within the limit. Called under mu.
func (c *core[I]) needSteps() int {
	n := c.q.n - c.pending
	if room := c.limit - c.running - c.pending; room < n {
		n = room
	}
	if n <= 0 {
		return 0
	}
	c.pending += n
	return n
}

// submit hands n reserved steps to the pool without ever blocking, and
// reports whether the pool took them all. When its queue is full, the steps
// it refused go to a goroutine that waits for room (submitOwed): every
// queued task within the limit must get a step, since a task left to the
// group's running tasks or to Wait may wait for them for ever (a producer
// and its consumer in one group, the producer running). A step that calls
// submit (fromGo false) keeps one of them: it runs the next task itself.
// When the pool has stopped, the refused steps are given up; if nothing of
// the group is running, the group fails with ErrStopped so that its queued
// tasks are skipped.
func (c *core[I]) submit(n int, fromGo bool) bool {
	for i := range n {
		if !c.p.TrySubmit(c.step) {
			c.refused(n-i, fromGo)
			return false
		}
	}
	return true
}

// refused deals with n reserved steps that the pool did not take (see
// submit).
func (c *core[I]) refused(n int, fromGo bool) {
	stopped := c.p.refuses() != nil
	c.mu.Lock()
	if !fromGo {
		n--
		c.pending--
	}
	if stopped {
		c.giveUp(n, !fromGo)
		return
	}
	c.owed += n
	start := n > 0 && !c.submitting
	if start {
		c.submitting = true
	}
	c.mu.Unlock()
	if start {
		go c.submitOwed()
	}
	if c.stranded != nil {
		c.stranded() // a producer may run a task before its step comes
	}
}

// submitOwed submits the owed steps one by one, waiting for room in the
// pool's queue. It gives up the rest when the group's context ends (Wait
// has returned, or the group is cancelled: its queued tasks are then
// skipped) or the pool stops.
func (c *core[I]) submitOwed() {
	c.mu.Lock()
	for c.owed > 0 {
		c.owed--
		c.mu.Unlock()
		err := c.p.SubmitCtx(c.ctx, c.step)
		c.mu.Lock()
		if err != nil {
			n := 1 + c.owed
			c.owed = 0
			c.submitting = false
			c.giveUp(n, false)
			return
		}
	}
	c.submitting = false
	c.mu.Unlock()
}

// giveUp gives up n reserved steps that will not be submitted: the tasks
// left without a step wait for a running step, a waiter or a producer to
// run them, and if the pool has stopped and nothing of the group is
// running, the group fails with ErrStopped so that they are skipped.
// stepGoesOn tells that the caller is a step about to run the next task.
// Called with mu held; it unlocks it.
func (c *core[I]) giveUp(n int, stepGoesOn bool) {
	c.pending -= n
	idle := !stepGoesOn && c.running+c.pending == 0
	c.signal()
	c.mu.Unlock()
	if c.stranded != nil {
		c.stranded()
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
// task if the limit allows, and keeps going if the pool took no follow-up
// step.
func (c *core[I]) runStep() {
	c.mu.Lock()
	c.pending--
	for c.q.n > 0 && c.running < c.limit {
		e := c.q.pop()
		c.running++
		c.mu.Unlock()
		if !c.runItem(e) {
			return
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
}

// helpOne runs one queued task on the calling goroutine if the limit allows
// (or skips it if the group is cancelled), and reports whether it did.
func (c *core[I]) helpOne() bool {
	c.mu.Lock()
	if c.q.n == 0 || c.running >= c.limit && c.ctx.Err() == nil {
		c.mu.Unlock()
		return false
	}
	e := c.q.pop()
	c.running++
	c.mu.Unlock()
	c.runItem(e)
	return true
}

// runItem runs (or, if the group is cancelled, skips) a task that the
// caller took from the queue and counted as running. It reports whether
// the caller should go on with the next queued task itself because the
// pool would not take a step for it.
func (c *core[I]) runItem(e entry[I]) (again bool) {
	if c.ctx.Err() == nil && c.pctx != nil && (c.pctx.Err() != nil || c.p.gaveUp.Load()) {
		// AfterFunc cancels the group on a goroutine of its own, maybe
		// later: cancel now, so that no queued task starts meanwhile (bug
		// 52 in RELIABILITY.md). Shutdown marks the pool as giving up
		// before it drops its queue and cancels its context, and a task
		// must not start in between either (bug 62).
		c.poolEnded()
	}
	if c.ctx.Err() != nil {
		if c.lost != nil {
			c.lost(e.seq)
		}
		return c.done(e.seq, nil, true)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		var err error = ErrGoexit
		if v := recover(); v != nil {
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
		again = c.done(e.seq, err, false)
	}()
	ctx := c.ctx
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	err := c.exec(ctx, e.seq, e.it)
	returned = true
	return c.done(e.seq, err, false)
}

// done accounts for a finished task and submits steps for queued tasks
// that now fit the limit. It reports what runItem does.
func (c *core[I]) done(seq int, err error, skipped bool) bool {
	c.mu.Lock()
	if skipped {
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
	n := c.needSteps()
	c.signal()
	c.mu.Unlock()
	return n > 0 && !c.submit(n, false)
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

// await returns when at most n tasks are unfinished, running queued tasks
// on the calling goroutine meanwhile (see helpOne). When the group's
// context is cancelled it skips every queued task, limit or not.
func (c *core[I]) await(n int) {
	c.mu.Lock()
	skipping := false // the context has been seen cancelled
	for c.unfinished > n {
		if c.q.n > 0 && (c.running < c.limit || c.ctx.Err() != nil) {
			e := c.q.pop()
			c.running++
			c.mu.Unlock()
			c.runItem(e)
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
	if c.ctx == nil {
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
		c.q.release()
	}
	res, pe = c.result, c.panicked
	c.mu.Unlock()
	if first {
		c.cancel(res)
		if c.unlink != nil {
			c.unlink()
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
		c.p.onPanic(pes[i])
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
