package crew

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/notify"
	"github.com/gocrew/crew/internal/queue"
)

// A Subpool runs tasks on an [Executor] (a [Pool], a [RateLimited], or
// another Subpool) with a limit of its own: at most limit of its slots are
// held at once, each task holding one slot while it runs, or w slots when
// submitted through [Subpool.Weighted](w). Its tasks run on the
// executor's workers, under the executor's limit too, so a Subpool shares
// a pool between kinds of work without letting one kind take every worker.
//
// # Order and fairness
//
// Tasks are admitted in submission order, as with
// golang.org/x/sync/semaphore.Weighted: when the first waiting task needs
// more slots than are free, the tasks behind it wait too, even light ones
// that would fit, so a heavy task is never starved by a stream of light
// ones. A task is handed to the executor only once it is admitted, so the
// executor's queue holds at most limit of a Subpool's tasks; the others
// wait in the Subpool's own queue, holding no worker and no goroutine.
//
// # Cost
//
// Go costs a lock, a queue append and one submission to the executor; the
// task's step runs it and then admits the tasks that the slots it frees
// let in. Neither allocates beyond the task's closure in steady state.
//
// # Stopping
//
// [Subpool.Stop] and [Subpool.Shutdown] stop the Subpool and leave its
// executor running. When the pool stops, the Subpool stops with it: a
// task that cannot start any more is dropped, counted in Stats().Dropped,
// and a [Task] made by a Submit form completes with [ErrDropped] (see
// [Subpool.Go]).
//
// A Subpool is an Executor: a [Keyed] or [Priority] built on it runs its
// tasks under the Subpool's limit (one slot each). A Subpool must be made
// with [NewSubpool]; its methods are safe for concurrent use. Several may
// share one pool.
type Subpool struct {
	l           layer
	limit       int
	bound       int // WithSubpoolQueue: the most tasks waiting to be admitted; 0: unbounded
	nonBlocking bool
	step        layerStep // s.run under s's number (see layer.mark), made once

	mu      sync.Mutex
	waiting queue.FIFO[subEntry] // not admitted yet
	ready   queue.FIFO[subEntry] // admitted: their slots are held; a step is coming for each, or some lack one (see orphans)
	used    int                  // slots held by ready and running tasks
	steps   int                  // steps submitted (or owed) that have not started
	running int                  // tasks running now
	handing int                  // steps whose task returned, handing its slots on (see after)
	seq     uint64               // of the last task queued
	closed  bool                 // Stop or Shutdown began

	queued atomic.Int64 // waiting.Len(), for the producers that wait for room
	shut   atomic.Bool  // closed, likewise
	room   notify.Cond  // the waiting queue shrank, or the Subpool or its pool stopped
}

// subEntry is a task in a Subpool's queues, with the slots it takes.
type subEntry struct {
	e   layerEntry
	w   int
	seq uint64 // in submission order, from 1
}

// A SubpoolOption configures a [Subpool] in [NewSubpool], which reports an
// invalid one (see [Option]).
type SubpoolOption func(*subpoolConfig)

type subpoolConfig struct {
	queue       int
	queueSet    bool
	nonBlocking bool
}

// WithSubpoolQueue bounds to n the tasks waiting in the Subpool's queue
// for slots (those admitted, at most limit, are not counted). A
// submission that finds it full waits for room ([Subpool.Go],
// [Subpool.Submit]), fails with [ErrQueueFull] (the same
// [WithSubpoolNonBlocking]), or reports false ([Subpool.TryGo],
// [Subpool.TrySubmit]); the Context forms wait until their context ends.
// By default the queue is unbounded. n must be at least 1.
func WithSubpoolQueue(n int) SubpoolOption {
	return func(c *subpoolConfig) { c.queue, c.queueSet = n, true }
}

// WithSubpoolNonBlocking makes the plain submissions ([Subpool.Go],
// [Subpool.Submit]) return [ErrQueueFull] instead of waiting when the
// Subpool's bounded queue is full; the Context forms still wait. It needs
// [WithSubpoolQueue].
func WithSubpoolNonBlocking() SubpoolOption {
	return func(c *subpoolConfig) { c.nonBlocking = true }
}

// NewSubpool returns a [Subpool] that runs its tasks on ex (a [*Pool], a
// [*RateLimited] or a [*Subpool]), at most limit slots' worth at once. It
// panics with an error wrapping [ErrInvalid] if ex is nil, limit is below
// 1, or an option is nil or invalid. A Subpool holds no goroutine while
// idle.
func NewSubpool(ex Executor, limit int, opts ...SubpoolOption) *Subpool {
	var c subpoolConfig
	errs := applyOptions(&c, "crew.NewSubpool", opts)
	errs = append(errs,
		problem(limit < 1, func() error {
			return invalidf("crew.NewSubpool(%d): limit must be at least 1", limit)
		}),
		problem(c.queueSet && c.queue < 1, func() error {
			return invalidf("WithSubpoolQueue(%d): size must be at least 1", c.queue)
		}),
		problem(c.nonBlocking && !c.queueSet, func() error {
			return invalidf("WithSubpoolNonBlocking needs WithSubpoolQueue: an unbounded queue is never full")
		}))
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	s := &Subpool{limit: limit, bound: c.queue, nonBlocking: c.nonBlocking}
	s.waiting.Keep = maxKeptQueue
	s.ready.Keep = maxKeptQueue
	s.l.init(ex, "NewSubpool", s.abandon)
	s.step = s.l.mark(s.run, s)
	return s
}

// Go queues task to run on the executor while it holds one of the
// Subpool's slots, once the tasks submitted before it have been admitted
// (see [Subpool]). It waits for room in a full bounded queue
// ([WithSubpoolQueue]; [ErrQueueFull] with [WithSubpoolNonBlocking]), but
// never for room in the pool's queue: a step that a full pool queue
// refuses goes into it past its bound (see [WithQueueSize]). It returns
// [ErrStopped] once the Subpool or its pool has begun to stop and
// [ErrNilTask] for a nil task. A panic in task goes to the pool's panic
// handler.
//
// [Pool.Stop] runs every task Go accepted, on the pool's workers, with
// two exceptions, both when no task of the Subpool is left running to
// take them on: the tasks queued behind one whose step Stop refused (that
// one's Go returns ErrStopped); and, on a [RateLimited], the tasks not
// yet handed to it. When [Pool.Shutdown]'s deadline passes, the tasks that
// have not started are dropped. Dropped tasks are
// counted in Stats().Dropped, and a [Task] made by a Submit form
// completes with [ErrDropped]. Go allocates nothing beyond the task's
// closure, except when its queues grow.
func (s *Subpool) Go(task func()) error { return s.Weighted(1).Go(task) }

// TryGo queues task like [Subpool.Go] if that needs no waiting, and
// reports whether it did: it returns false when the Subpool's bounded
// queue is full, once the Subpool or its pool has begun to stop, and for a
// nil task.
func (s *Subpool) TryGo(task func()) bool { return s.Weighted(1).TryGo(task) }

// GoContext queues task like [Subpool.Go], waiting for room in a full
// bounded queue until ctx ends (even [WithSubpoolNonBlocking]); it then
// returns ctx's error. ctx bounds only the wait: a queued task runs
// whatever becomes of ctx. It returns an error wrapping [ErrInvalid] for
// a nil ctx.
func (s *Subpool) GoContext(ctx context.Context, task func()) error {
	return s.Weighted(1).GoContext(ctx, task)
}

// Submit queues task like [Subpool.Go] and returns a [Task] to wait for
// its result; the task receives a context of its own, as a [Pool.Submit] task does. A Task that cannot be
// queued is already done with the error; one dropped because the Subpool
// or its pool stopped first completes with [ErrDropped].
func (s *Subpool) Submit(task func(ctx context.Context) error) *Task {
	return s.Weighted(1).Submit(task)
}

// TrySubmit is [Subpool.Submit] with [Subpool.TryGo]'s rule: it reports
// whether task was queued, and if not, the [Task] is already done with the
// reason.
func (s *Subpool) TrySubmit(task func(ctx context.Context) error) (*Task, bool) {
	return s.Weighted(1).TrySubmit(task)
}

// SubmitContext is [Subpool.Submit] with [Subpool.GoContext]'s wait for
// room, until ctx ends.
func (s *Subpool) SubmitContext(ctx context.Context, task func(ctx context.Context) error) *Task {
	return s.Weighted(1).SubmitContext(ctx, task)
}

// Weighted returns the view of s whose submissions take w slots each: a
// task counts as w tasks against the Subpool's limit while it runs, and,
// like any task, waits for the tasks submitted before it (see [Subpool]).
// A w below 1 or above the limit is reported by each submission, with an
// error wrapping [ErrInvalid]. Weighted allocates nothing.
func (s *Subpool) Weighted(w int) Weighted { return Weighted{s: s, w: w} }

// A Weighted submits tasks to a [Subpool], each taking the number of slots
// given to [Subpool.Weighted]. Its methods are the Subpool's, with that
// weight; see [Subpool.Go] for what they return and when they wait. The
// zero Weighted reports an error wrapping [ErrInvalid].
type Weighted struct {
	s *Subpool
	w int
}

// Go is [Subpool.Go] for a task that takes w slots. It returns an error
// wrapping [ErrInvalid] if w is below 1 or above the Subpool's limit.
func (v Weighted) Go(task func()) error {
	return submitGo(v.s.layer(), v.s.push, nil, v.w, task, pushGo)
}

// TryGo is [Subpool.TryGo] for a task that takes w slots; it reports false
// if w is below 1 or above the Subpool's limit.
func (v Weighted) TryGo(task func()) bool {
	return submitGo(v.s.layer(), v.s.push, nil, v.w, task, pushTry) == nil
}

// GoContext is [Subpool.GoContext] for a task that takes w slots.
func (v Weighted) GoContext(ctx context.Context, task func()) error {
	return submitGo(v.s.layer(), v.s.push, ctx, v.w, task, pushCtx)
}

// Submit is [Subpool.Submit] for a task that takes w slots; the [Task] is
// done with an error wrapping [ErrInvalid] if w is below 1 or above the
// Subpool's limit.
func (v Weighted) Submit(task func(ctx context.Context) error) *Task {
	return submitTask(v.s.layer(), v.s.push, nil, v.w, task, pushGo)
}

// TrySubmit is [Subpool.TrySubmit] for a task that takes w slots.
func (v Weighted) TrySubmit(task func(ctx context.Context) error) (*Task, bool) {
	t := submitTask(v.s.layer(), v.s.push, nil, v.w, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [Subpool.SubmitContext] for a task that takes w slots.
func (v Weighted) SubmitContext(ctx context.Context, task func(ctx context.Context) error) *Task {
	return submitTask(v.s.layer(), v.s.push, ctx, v.w, task, pushCtx)
}

// Wait blocks until every task queued on s has finished or been dropped.
// Tasks queued while it waits count too. It does not stop s.
//
// Called from inside one of s's own tasks, which it would wait for
// forever, Wait panics with an error wrapping [ErrInsideTask], like
// [Pool.Wait]; the tasks of a layer built on s are s's tasks too. Any
// other caller may wait, a plain task of the pool included. Recognising
// the caller costs microseconds, and only when Wait is about to block.
func (s *Subpool) Wait() { s.layer().wait("Subpool") }

// Stop stops s and leaves its executor running: it refuses new work
// ([ErrStopped]), lets every task already queued run as usual, and
// returns when they have finished (or been dropped, if the pool stops
// meanwhile). A paused pool holds it up like [Pool.Wait]. Stop is
// idempotent and safe to call from several goroutines; it does nothing on
// a zero Subpool.
//
// Called from inside one of s's own tasks, which could not finish while
// Stop waited, Stop closes s and returns at once; the queued tasks still
// run.
func (s *Subpool) Stop() {
	if s.layer().zero() {
		return
	}
	s.close()
	if engine.CallerIs(s.l.id) {
		return
	}
	s.l.wait("Subpool")
}

// Shutdown stops s like [Subpool.Stop], but gives up waiting for queued
// tasks when ctx ends: it then drops every task that has not started,
// waits for the running ones to return, and reports a [*ShutdownError]
// with the exact number of entries it dropped: its own tasks, and the
// steps of a layer built on s (that layer counts the tasks they would
// have run in its own Stats). Dropped entries are counted in
// Stats().Dropped, and a [Task] made by a Submit form completes with
// [ErrDropped]. Unlike [Pool.Shutdown], it cancels no context: the
// running tasks have the pool's. Shutdown returns nil when every task had
// returned before ctx ended. A nil ctx never ends: Shutdown(nil) waits
// like Stop.
//
// Called from inside one of s's own tasks, Shutdown closes s and returns
// an error wrapping [ErrInsideTask] at once, as Stop does. On a zero
// Subpool it returns an error wrapping [ErrInvalid].
func (s *Subpool) Shutdown(ctx context.Context) error {
	l := s.layer()
	if l.zero() {
		return errZeroLayer
	}
	s.close()
	if engine.CallerIs(l.id) {
		return fmt.Errorf("%w: Subpool.Shutdown would wait for the task that called it, one of the Subpool's own", ErrInsideTask)
	}
	var err error
	l.p.lendIfInside(func() {
		err = l.idle.Wait(ctx, func() bool { return l.unfinished.Load() <= 0 })
	})
	if err == nil {
		l.wait("Subpool") // lets the pool's end go
		return nil
	}
	s.mu.Lock()
	taken := s.takeAll()
	l.holdDrop()
	s.mu.Unlock()
	s.room.Broadcast()
	dropped := l.dropTaken(taken) // not those that Task.Cancel finished: they count as cancelled
	l.wait("Subpool")             // for the running tasks
	return &ShutdownError{Dropped: dropped, Err: err}
}

// close makes s refuse new work.
func (s *Subpool) close() {
	s.mu.Lock()
	s.closed = true
	s.shut.Store(true)
	s.mu.Unlock()
	s.room.Broadcast()
}

// SubpoolStats is a snapshot of a [Subpool]'s counters. Like [Stats], its
// fields are read while tasks run. In the embedded [LayerStats], Waiting
// counts the tasks that have not started: those waiting for slots, and
// those admitted and handed to the executor.
type SubpoolStats struct {
	LayerStats
	Limit   int // the limit given to NewSubpool
	Running int // tasks running now
	InUse   int // slots held by the running tasks and by those admitted and not yet started
}

// Stats returns a snapshot of s's counters ([SubpoolStats]); zeros for a
// zero Subpool.
func (s *Subpool) Stats() SubpoolStats {
	var out SubpoolStats
	out.LayerStats = s.layer().stats(func(ls *LayerStats) {
		s.mu.Lock()
		ls.Waiting = s.waiting.Len() + s.ready.Len()
		out.Limit, out.Running, out.InUse = s.limit, s.running, s.used
		s.mu.Unlock()
	})
	return out
}

// layer returns s's layer, nil if s is nil.
func (s *Subpool) layer() *layer {
	if s == nil {
		return nil
	}
	return &s.l
}

// pool makes a Subpool an Executor.
func (s *Subpool) pool() *Pool {
	if s == nil {
		return nil // a layer on it reports a zero pool
	}
	return s.l.p
}

// refuses reports why s takes no new work, or nil. Called under mu.
func (s *Subpool) refuses() error {
	if s.closed {
		return ErrStopped
	}
	return s.l.refuses()
}

// push queues e with weight w, waiting for room in the bounded queue as
// mode says, and hands the executor a step for each task it admits. The
// step of a layer built on s (an entry with an owner) is never refused for
// a full queue: that layer bounds its own.
func (s *Subpool) push(ctx context.Context, w int, e layerEntry, mode pushMode) error {
	if w < 1 || w > s.limit {
		err := invalidf("Subpool.Weighted(%d): weight must be between 1 and the limit %d", w, s.limit)
		e.refuse(err)
		return err
	}
	s.mu.Lock()
	for {
		if err := s.refuses(); err != nil {
			s.mu.Unlock()
			e.refuse(err)
			return err
		}
		if s.bound == 0 || e.owner != nil || s.waiting.Len() < s.bound {
			break
		}
		s.mu.Unlock()
		if mode == pushTry || mode == pushGo && s.nonBlocking {
			e.refuse(ErrQueueFull)
			return ErrQueueFull
		}
		if err := s.waitRoom(ctx); err != nil {
			e.refuse(err)
			return err
		}
		s.mu.Lock()
	}
	s.seq++
	seq := s.seq
	s.waiting.Push(subEntry{e: e, w: w, seq: seq})
	s.queued.Store(int64(s.waiting.Len()))
	s.l.accept()
	n := s.pump()
	s.mu.Unlock()
	return s.submit(n, seq)
}

// waitRoom waits until the bounded queue has room, s has stopped, or ctx
// (nil: none) ends, then returns ctx's error, if it ended. Called from
// inside one of the pool's tasks while the pool is saturated, it lends the
// task's slot meanwhile, since the room may come from a task of s that
// needs a worker.
func (s *Subpool) waitRoom(ctx context.Context) error {
	var err error
	s.l.p.lendIfInside(func() {
		err = s.room.Wait(ctx, func() bool {
			return s.queued.Load() < int64(s.bound) || s.shut.Load() || s.l.over()
		})
	})
	return err
}

// pump admits the waiting tasks that the free slots let in, in order, and
// returns how many steps the caller must submit for them. Called under mu.
func (s *Subpool) pump() int {
	n := 0
	for s.waiting.Len() > 0 {
		head, _ := s.waiting.Peek()
		if s.used+head.w > s.limit {
			break
		}
		s.waiting.Take()
		s.used += head.w
		s.ready.Push(head)
		n++
	}
	if n > 0 {
		s.steps += n
		s.queued.Store(int64(s.waiting.Len()))
	}
	return n
}

// submit hands n steps, counted in steps, to the executor without waiting.
// A step that a full pool queue refuses is owed (see stepper.owe). One
// refused for good leaves a ready task without a step (see
// lost). own is the task that the calling submission queued, 0 for none:
// if the refusal leaves it to be dropped, submit refuses it instead and
// returns the executor's error.
func (s *Subpool) submit(n int, own uint64) error {
	if n > 0 && s.bound > 0 {
		s.room.Broadcast()
	}
	for i := range n {
		switch err := s.l.steps.submit(nil, s.step, pushTry); err {
		case nil:
		case ErrQueueFull:
			for range n - i {
				s.l.steps.owe(s.step)
			}
			return nil
		default:
			return s.lost(n-i, own, err)
		}
	}
	return nil
}

// stepDropped deals with a step of s that its executor dropped unrun, or
// an owed one that the stopped pool refused.
func (s *Subpool) stepDropped() { s.lost(1, 0, ErrDropped) }

// lost deals with n steps that will never run, which the executor refused
// with err (see submit for own).
func (s *Subpool) lost(n int, own uint64, err error) error {
	s.mu.Lock()
	s.steps -= n
	dropped := s.orphans()
	refused := -1
	for i, e := range dropped {
		if own != 0 && e.seq == own {
			refused = i
		}
	}
	if len(dropped) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.l.holdDrop()
	s.mu.Unlock()
	s.room.Broadcast()
	if refused >= 0 {
		e := dropped[refused]
		dropped = append(dropped[:refused], dropped[refused+1:]...)
		s.l.done(1)
		e.e.refuse(err)
	}
	s.l.dropTaken(entriesOf(dropped))
	if refused >= 0 {
		return err
	}
	return nil
}

// orphans deals with the ready tasks that lack a step, after the executor
// refused or dropped steps for good. While the pool is stopping but has
// not ended, a step that runs a task of s, or will, takes them on, on the
// worker it holds (see after). Otherwise no step will come for them, nor
// for the tasks waiting behind them: orphans takes them all off the
// queues, to be dropped. Called under mu.
func (s *Subpool) orphans() []subEntry {
	if s.ready.Len() <= s.steps || s.running+s.handing+s.steps > 0 && s.l.steps.inline(ErrStopped) {
		return nil
	}
	var taken []subEntry
	for s.ready.Len() > s.steps {
		e, _ := s.ready.PopBack()
		s.used -= e.w
		taken = append(taken, e)
	}
	for s.waiting.Len() > 0 {
		taken = append(taken, s.waiting.Take())
	}
	s.queued.Store(0)
	return taken
}

// run is the step: it runs the first admitted task, then the tasks left
// without a step, if any.
func (s *Subpool) run() {
	s.mu.Lock()
	s.steps--
	if s.ready.Len() == 0 { // dropped as s or its pool stopped
		s.mu.Unlock()
		return
	}
	e := s.ready.Take()
	s.running++
	s.mu.Unlock()
	for ok := true; ok; {
		e, ok = s.exec(e)
	}
}

// exec runs e, then frees its slots, and returns a ready task without a
// step for the caller to run next, if there is one it may run.
func (s *Subpool) exec(e subEntry) (next subEntry, ok bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if s.l.p.crashes() {
			if v := recover(); v != nil {
				panic(v) // WithCrashOnPanic: crash now (see Keyed's exec)
			}
		}
		// runtime.Goexit: free the slots and run what this step would
		// have taken on, then let it unwind to the worker.
		for next, ok := s.after(e.w); ok; {
			next, ok = s.exec(next)
		}
	}()
	s.l.runEntry(e.e) // recovers panics
	returned = true
	return s.after(e.w)
}

// after frees the w slots of a task that has returned, admits the tasks
// they let in, and returns a ready task without a step if the calling
// step may take it on.
func (s *Subpool) after(w int) (subEntry, bool) {
	s.mu.Lock()
	s.used -= w
	s.running--
	if n := s.pump(); n > 0 {
		s.handing++ // a step refused now leaves its task to this one (see orphans)
		s.mu.Unlock()
		s.submit(n, 0)
		s.mu.Lock()
		s.handing--
	}
	if s.ready.Len() > s.steps {
		if s.l.steps.inline(ErrStopped) {
			e := s.ready.Take()
			s.running++
			s.mu.Unlock()
			s.l.done(1)
			return e, true
		}
		dropped := s.orphans()
		s.l.holdDrop()
		s.mu.Unlock()
		s.room.Broadcast()
		s.l.dropTaken(entriesOf(dropped))
	} else {
		s.mu.Unlock()
	}
	s.l.done(1)
	return subEntry{}, false
}

// takeAll takes every task that has not started off the queues, to be
// dropped, and frees the slots of the admitted ones. Called under mu.
func (s *Subpool) takeAll() []layerEntry {
	var taken []layerEntry
	for s.ready.Len() > 0 {
		e := s.ready.Take()
		s.used -= e.w
		taken = append(taken, e.e)
	}
	for s.waiting.Len() > 0 {
		taken = append(taken, s.waiting.Take().e)
	}
	s.queued.Store(0)
	return taken
}

// abandon drops every task that has not started once the pool has ended:
// no step of s will run any more.
func (s *Subpool) abandon() {
	s.mu.Lock()
	dropped := s.takeAll()
	s.mu.Unlock()
	s.room.Broadcast()
	s.l.dropEntries(dropped...)
}

// entriesOf returns the layer entries of es.
func entriesOf(es []subEntry) []layerEntry {
	if len(es) == 0 {
		return nil
	}
	out := make([]layerEntry, len(es))
	for i, e := range es {
		out[i] = e.e
	}
	return out
}
