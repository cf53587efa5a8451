package crew

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/clock"
)

// A Priority runs tasks on an [Executor] (a [Pool], or a [RateLimited]),
// starting the queued task of highest priority first whenever a worker comes
// free, with aging so that low priorities cannot starve.
//
// # Aging and the starvation bound
//
// A task's effective priority grows while it waits: it is
// priority + waited/aging, where aging is set [WithAging] ([DefaultAging]
// if not set). Equal effective priorities start in submission order. Since
// every task ages at the same pace, the order between two queued tasks
// never changes, which gives an exact bound: a task of priority p
// submitted at time t can be overtaken only by tasks already queued at t
// and by tasks of priority q > p submitted before t + (q-p)×aging. With
// priorities at most P, a task starts after at most the tasks queued
// before it plus those submitted during the (P-p)×aging that follows it.
// WithAging(0) turns aging off: strict priorities, FIFO within one, and
// low priorities can starve.
//
// # Cost
//
// Each task is kept in a heap under a mutex, and one step is submitted to
// the pool for it; the step runs the best task queued when it starts, which
// need not be the one it was submitted for. The pool does not know about
// priorities and its own Go path pays nothing for them. Go costs a heap
// push (O(log n) for n queued tasks), the pool submission and a heap pop.
// Tasks already in the pool's queue when a higher-priority task arrives do
// not move, but they are steps, not tasks: the task a step runs is chosen
// when it starts.
//
// A Priority must be made with [NewPriority]; its methods are safe for
// concurrent use. Several may share one pool.
type Priority struct {
	l     layer
	clock func() int64 // clock.Now; tests replace it
	aging int64        // nanoseconds per priority level; 0: strict priorities
	step  layerStep    // q.run under q's number (see layer.mark), made once

	mu      sync.Mutex
	h       []prioItem   // a 4-ary min-heap on (key, seq)
	entries []layerEntry // the tasks, by prioItem.slot
	free    []uint32     // unused slots of entries
	seq     uint64
	pending int          // steps submitted and not started
	orphans atomic.Int32 // tasks in h without a step (see countOrphans); read without mu
}

// prioItem is a heap node. It holds no pointer, so sifting needs no write
// barrier and the collector does not scan the heap; the task itself stays
// put in entries.
type prioItem struct {
	key  int64 // with aging: submission time - priority×aging; strict: -priority
	seq  uint64
	slot uint32 // in entries
}

func (a *prioItem) before(b *prioItem) bool {
	return a.key < b.key || a.key == b.key && a.seq < b.seq
}

// DefaultAging is how long a task waits to gain one level of priority,
// unless [WithAging] says otherwise.
const DefaultAging = 100 * time.Millisecond

// maxAging is the longest aging: one that leaves [Priority.key] room for
// the priorities -1, 0 and 1.
const maxAging = time.Duration(math.MaxInt64 / 4)

// A PriorityOption configures a [Priority] in [NewPriority], which reports
// an invalid one (see [Option]).
type PriorityOption func(*priorityConfig)

type priorityConfig struct {
	aging time.Duration
}

// WithAging sets how long a queued task waits to gain one level of
// priority ([DefaultAging] if not set). d == 0 turns aging off: strict
// priorities, under which a steady stream of high-priority tasks starves
// the low ones. d must not be negative, nor longer than math.MaxInt64/4
// nanoseconds (about 73 years), beyond which [Priority.Go] would count
// every priority as 0.
func WithAging(d time.Duration) PriorityOption {
	return func(c *priorityConfig) { c.aging = d }
}

// NewPriority returns a [Priority] that runs its tasks on ex (a [*Pool] or
// a [*RateLimited]). It panics with an error wrapping [ErrInvalid] if ex is
// nil or an option is nil or invalid.
func NewPriority(ex Executor, opts ...PriorityOption) *Priority {
	c := priorityConfig{aging: DefaultAging}
	errs := applyOptions(&c, "crew.NewPriority", opts)
	errs = append(errs, problem(c.aging < 0, func() error {
		return invalidf("WithAging(%v): duration must not be negative", c.aging)
	}), problem(c.aging > maxAging, func() error {
		return invalidf("WithAging(%v): beyond %v every priority would count as 0 (see Priority.Go); WithAging(0) turns aging off", c.aging, maxAging)
	}))
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	q := &Priority{aging: int64(c.aging), clock: clock.Now}
	q.l.init(ex, "NewPriority", q.abandon)
	q.step = q.l.mark(q.run, q)
	return q
}

// Go queues task with priority prio (higher runs sooner; any int, but
// [WithAging](d) counts those beyond ±math.MaxInt64/4/d.Nanoseconds() as
// that bound) and submits a step for it to the executor. It waits for room
// in a full bounded pool queue like [Pool.Go] ([ErrQueueFull] on a pool
// built [WithNonBlocking]), returns [ErrStopped] once the pool has begun to
// stop and [ErrNilTask] for a nil task. A panic in task goes to the pool's
// panic handler. Go allocates nothing beyond the task's closure, except
// when the heap grows.
//
// [Pool.Stop] runs the tasks Go accepted, except those whose steps the
// executor drops as the pool stops (on a [RateLimited], those still
// waiting for a token: see [RateLimited.Go]; on a [Subpool], see
// [Subpool.Go]), and one more: since a step runs the best task, not its
// own, a Go that the stopping pool refuses may find that its task has
// already run in another's step, leaving another task without a step; if
// no step of q is left to take it on, that task is dropped. When
// [Pool.Shutdown]'s deadline passes, the tasks that have not started are
// dropped. Dropped tasks are counted in Stats().Dropped (see [LayerStats]),
// and a [Task] made by a Submit form completes with [ErrDropped].
func (q *Priority) Go(prio int, task func()) error {
	return submitGo(q.layer(), q.push, nil, prio, task, pushGo)
}

// TryGo queues task with priority prio like [Priority.Go] if that needs no
// waiting, and reports whether it did: it returns false when the pool's
// bounded queue has no room for its step, once the pool has begun to stop,
// and for a nil task.
func (q *Priority) TryGo(prio int, task func()) bool {
	return submitGo(q.layer(), q.push, nil, prio, task, pushTry) == nil
}

// GoContext queues task with priority prio like [Priority.Go], waiting for
// room in a full bounded queue until ctx ends (even on a pool built
// [WithNonBlocking]); it then returns ctx's error. ctx bounds only the
// wait: a queued task runs whatever becomes of ctx. It returns an error
// wrapping [ErrInvalid] for a nil ctx.
func (q *Priority) GoContext(ctx context.Context, prio int, task func()) error {
	return submitGo(q.layer(), q.push, ctx, prio, task, pushCtx)
}

// Submit queues task with priority prio like [Priority.Go] and returns a
// [Task] to wait for its result; the task receives a context of its own
// (see [Pool.Submit]). A Task that cannot be queued is already done with
// the error; one dropped because the pool stopped first completes with
// [ErrDropped]. [Task.Cancel] keeps it from starting; it still waits for
// its turn, where it is passed over.
func (q *Priority) Submit(prio int, task func(ctx context.Context) error) *Task {
	return submitTask(q.layer(), q.push, nil, prio, task, pushGo)
}

// TrySubmit is [Priority.Submit] with [Priority.TryGo]'s rule: it reports
// whether task was queued, and if not, the [Task] is already done with the
// reason.
func (q *Priority) TrySubmit(prio int, task func(ctx context.Context) error) (*Task, bool) {
	t := submitTask(q.layer(), q.push, nil, prio, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [Priority.Submit] with [Priority.GoContext]'s wait for
// room, until ctx ends.
func (q *Priority) SubmitContext(ctx context.Context, prio int, task func(ctx context.Context) error) *Task {
	return submitTask(q.layer(), q.push, ctx, prio, task, pushCtx)
}

// Wait blocks until every task queued on q has finished or been dropped.
// Tasks queued while it waits count too.
//
// Called from inside one of q's own tasks, which it would wait for
// forever, Wait panics with an error wrapping [ErrInsideTask], like
// [Pool.Wait]. Any other caller may wait, a plain task of the pool or a
// task of another layer included. Recognising the caller costs
// microseconds, and only when Wait is about to block.
func (q *Priority) Wait() { q.layer().wait("Priority") }

// Stats returns a snapshot of q's counters ([LayerStats]); Waiting counts
// the tasks in its heap.
func (q *Priority) Stats() LayerStats { return q.layer().stats(q.waiting) }

// waiting fills the counts Stats adds to the layer's: the tasks in the
// heap.
func (q *Priority) waiting(s *LayerStats) {
	q.mu.Lock()
	s.Waiting = len(q.h)
	q.mu.Unlock()
}

// layer returns q's layer, nil if q is nil.
func (q *Priority) layer() *layer {
	if q == nil {
		return nil
	}
	return &q.l
}

// key returns the heap key of a task of priority prio submitted now: with
// aging, the time at which it would have had to be submitted with
// priority 0 to be worth as much now. (Comparing prio+waited/aging between
// two tasks at any moment compares these keys, which do not change.)
func (q *Priority) key(prio int) int64 {
	p := int64(prio)
	if q.aging == 0 {
		return ^p // -p-1: the same order, and math.MinInt does not overflow
	}
	lim := math.MaxInt64 / 4 / q.aging
	p = min(max(p, -lim), lim) // keep the product well inside int64
	return q.clock() - p*q.aging
}

// push queues e with priority prio and submits a step for it as mode says.
func (q *Priority) push(ctx context.Context, prio int, e layerEntry, mode pushMode) error {
	key := q.key(prio) // reads the clock: outside the lock
	q.mu.Lock()
	if err := q.l.refuses(); err != nil {
		q.mu.Unlock()
		e.refuse(err)
		return err
	}
	seq := q.seq
	q.seq++
	q.heapPush(prioItem{key: key, seq: seq, slot: q.store(e)})
	q.pending++
	q.l.accept()
	q.mu.Unlock()
	if err := q.l.steps.submit(ctx, q.step, mode); err != nil {
		return q.failed(seq, err)
	}
	return nil
}

// failed undoes a submission whose step the executor refused with err.
func (q *Priority) failed(seq uint64, err error) error {
	q.mu.Lock()
	q.pending--
	for i := range q.h {
		if q.h[i].seq == seq { // ours is still queued: take it back
			e := q.heapRemove(i)
			// Counted out under mu, so that another failed call cannot
			// take it for a running step that will adopt orphans.
			q.l.done(1)
			q.settle(err)
			e.refuse(err)
			return err
		}
	}
	// Another submission's step took ours, so it ran or runs: ours was
	// accepted after all.
	q.settle(err)
	return nil
}

// settle makes sure that every queued task has a step, after a refused
// submission took its own step out of pending: a step it counted on (see
// run) may have run another submission's task, whose step was refused in
// turn, leaving a task without a step, an orphan. Every refusal settles,
// so the last one sees the orphans. Called with mu held; it unlocks it.
func (q *Priority) settle(err error) {
	q.countOrphans()
	switch {
	case len(q.h) <= q.pending:
		// None left without a step, or dropped as the pool stopped.
		q.mu.Unlock()
	case q.pending > 0 || q.l.unfinished.Load() > int64(len(q.h)):
		// A step that is pending, or running a task (those not in the
		// heap), adopts it when its own task is done (see run): it reads
		// orphans after counting its task done, and we read that count
		// after raising orphans. A step dropping the tasks it found
		// without a step (those not in the heap too) reads it again after
		// counting them done (see adopt). A pending step whose submission
		// fails settles in turn.
		q.mu.Unlock()
	case err != ErrStopped && err != ErrDropped:
		// Nobody to adopt it, and the executor refused the step for now:
		// its queue is full (a Go from inside a task may have found every
		// worker waiting for room), or the submitter's context ended. A
		// step of its own is owed (see stepper.owe): the caller must not
		// wait, as it may be the worker that room waits for.
		q.pending++
		q.countOrphans()
		q.mu.Unlock()
		q.l.steps.owe(q.step)
	default:
		// Nobody to adopt them, and the pool has stopped: no task queued
		// will run. (Dropping only this refusal's orphan would leave one
		// whose settle deferred to a pending step that the executor then
		// dropped too.)
		q.dropQueued()
	}
}

// stepDropped settles after a step was dropped (see stepFailed).
func (q *Priority) stepDropped() { q.stepFailed(ErrDropped) }

// stepFailed settles after the executor dropped a step that pending
// counted: a RateLimited's, as the pool stopped, or an owed one that the
// stopped pool refused.
func (q *Priority) stepFailed(err error) {
	q.mu.Lock()
	q.pending--
	q.settle(err)
}

// run is the step: it runs the best queued task, then the tasks left
// without a step by submissions the pool refused (see failed), if any.
func (q *Priority) run() {
	q.mu.Lock()
	q.pending--
	if len(q.h) == 0 { // dropped as the pool stopped
		q.mu.Unlock()
		return
	}
	e := q.heapRemove(0)
	q.mu.Unlock()
	q.runFrom(e)
}

// runFrom runs e, then the tasks left without a step, if any.
func (q *Priority) runFrom(e layerEntry) {
	for {
		q.exec(e)
		if q.orphans.Load() == 0 { // one atomic load: the word is rarely written
			return
		}
		var ok bool
		if e, ok = q.adopt(); !ok {
			return
		}
	}
}

// countOrphans publishes the number of tasks without a step. Called under
// mu after a change that can alter it.
func (q *Priority) countOrphans() {
	q.orphans.Store(int32(max(0, len(q.h)-q.pending)))
}

func (q *Priority) exec(e layerEntry) {
	returned := false
	defer func() {
		if q.l.p.crashes() {
			if v := recover(); v != nil {
				panic(v) // WithCrashOnPanic: crash now (see Keyed's exec)
			}
		}
		q.l.done(1)
		if !returned && q.orphans.Load() > 0 {
			// runtime.Goexit: the step unwinds past runFrom, whose adopting a
			// refused submission may count on (see settle). Adopt here.
			if e, ok := q.adopt(); ok {
				q.runFrom(e)
			}
		}
	}()
	q.l.runEntry(e) // recovers panics
	returned = true
}

// adopt takes the best task if one lacks a step. When the step's worker is
// one too many (see stepper.overLimit), it owes a step for each of those
// tasks instead; when the executor does not let a step run more than its
// own task (after Shutdown's deadline; on a RateLimited or a Subpool,
// which would start it without a token or a slot), it drops them.
//
// The tasks it drops are counted done only after mu is released, so a
// settle in between counts them among the unfinished tasks not in the
// heap and leaves the orphans it finds to a running step: to this one.
// Hence, having counted them done, adopt reads orphans again, as runFrom
// does after its task (see settle), and takes on what it finds.
func (q *Priority) adopt() (layerEntry, bool) {
	for {
		q.mu.Lock()
		if n := len(q.h) - q.pending; n > 0 && q.l.steps.overLimit() {
			q.pending += n
			q.countOrphans()
			q.mu.Unlock()
			for range n {
				q.l.steps.owe(q.step)
			}
			return layerEntry{}, false
		}
		var dropped []layerEntry
		for len(q.h) > q.pending {
			e := q.heapRemove(0)
			if q.l.steps.inline(ErrStopped) { // a pool that has not ended
				q.countOrphans()
				q.mu.Unlock()
				return e, true
			}
			dropped = append(dropped, e)
		}
		q.countOrphans()
		q.mu.Unlock()
		if len(dropped) == 0 {
			return layerEntry{}, false
		}
		q.l.dropEntries(dropped...)
		if q.orphans.Load() == 0 {
			return layerEntry{}, false
		}
	}
}

// abandon drops every queued task once the pool has stopped: their steps
// have been dropped or have run.
func (q *Priority) abandon() {
	q.mu.Lock()
	q.dropQueued()
}

// dropQueued drops every queued task. Called with mu held; it unlocks it.
func (q *Priority) dropQueued() {
	var dropped []layerEntry
	for _, it := range q.h {
		dropped = append(dropped, q.entries[it.slot])
	}
	q.h, q.entries, q.free = nil, nil, nil
	q.countOrphans()
	q.l.holdDrop()
	q.mu.Unlock()
	q.l.dropTaken(dropped)
}

// store keeps e in a free slot of entries and returns the slot.
func (q *Priority) store(e layerEntry) uint32 {
	if n := len(q.free); n > 0 {
		slot := q.free[n-1]
		q.free = q.free[:n-1]
		q.entries[slot] = e
		return slot
	}
	q.entries = append(q.entries, e)
	return uint32(len(q.entries) - 1)
}

func (q *Priority) heapPush(it prioItem) {
	q.h = append(q.h, it)
	q.up(len(q.h) - 1)
}

// heapRemove removes the item at i and returns its task.
func (q *Priority) heapRemove(i int) layerEntry {
	h := q.h
	n := len(h) - 1
	slot := h[i].slot
	h[i] = h[n]
	q.h = h[:n]
	if i < n {
		q.down(i)
		q.up(i)
	}
	e := q.entries[slot]
	q.entries[slot] = layerEntry{} // let the task be collected
	switch {
	case n == 0 && cap(h) > 1024:
		q.h, q.entries, q.free = nil, nil, nil // a drained burst returns its memory
	case n == 0:
		q.entries, q.free = q.entries[:0], q.free[:0]
	default:
		q.free = append(q.free, slot)
	}
	return e
}

// The heap is 4-ary: half as deep as a binary one, and a node's children
// share a cache line or two, which pays off for the large heaps of a
// backlog. Sifting moves a hole instead of swapping items.
const heapArity = 4

func (q *Priority) up(i int) {
	h := q.h
	it := h[i]
	for i > 0 {
		parent := (i - 1) / heapArity
		if !it.before(&h[parent]) {
			break
		}
		h[i] = h[parent]
		i = parent
	}
	h[i] = it
}

func (q *Priority) down(i int) {
	h := q.h
	it := h[i]
	for {
		first := heapArity*i + 1
		if first >= len(h) {
			break
		}
		best := first
		for c := first + 1; c < min(first+heapArity, len(h)); c++ {
			if h[c].before(&h[best]) {
				best = c
			}
		}
		if !h[best].before(&it) {
			break
		}
		h[i] = h[best]
		i = best
	}
	h[i] = it
}
