package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/notify"
)

// Errors returned by the engine. Package crew re-exports them.
var (
	ErrStopped = errors.New("crew: pool is stopped")
	ErrFull    = errors.New("crew: queue is full")
)

const (
	exitBit   = 1 << 62     // in Engine.workers: workers must exit
	countMask = exitBit - 1 // the worker count below it

	// Every lateEvery-th push into a shard also checks for searchers that
	// are late rather than stuck, which reads the clock (see wakeIfStale).
	lateEvery = 16

	// staleWake is how long a woken worker may take to start looking for
	// work before producers stop trusting it, and the least time between
	// two wakes for stale searchers that start a worker (see wakeIfStale).
	staleWake = 100 * time.Microsecond

	// staleWakeParked is the least time between two wakes for stale
	// searchers while a parked worker can be woken: waking one is cheap
	// and undone by its next park, and this spacing bounds how long a
	// searcher stuck on a descheduled processor delays the tasks behind it.
	staleWakeParked = 10 * time.Microsecond
)

// Config configures an Engine. Run or NewRunner is required.
type Config[T any] struct {
	MaxWorkers  int           // > 0
	MinWorkers  int           // workers kept when idle, <= MaxWorkers
	QueueSize   int           // tasks waiting beyond running ones; < 0: unbounded
	IdleTimeout time.Duration // how long a worker waits for work before retiring; 0: it never parks

	// Run executes a task. A panic in Run is passed to OnPanic.
	Run func(T)
	// NewRunner, if set, is called once by every worker when it starts, on
	// that worker's goroutine; the worker then runs its tasks with the
	// returned run instead of Run, and calls done (if not nil) when it
	// retires. It gives each worker state of its own (a connection, a
	// buffer, goroutine labels) at no cost per task.
	NewRunner func() (run func(T), done func())
	// OnPanic receives a task that panicked, the recovered value and the
	// stack where it happened. When nil, panics are not recovered and crash
	// the program.
	OnPanic func(t T, value any, stack []byte)
	// OnGoexit receives a task that called runtime.Goexit. May be nil.
	OnGoexit func(t T)
	// Drop receives each queued task that Drain removes. May be nil.
	Drop func(T)
}

// Engine schedules tasks of type T onto a bounded set of worker goroutines.
type Engine[T any] struct {
	run       func(T)
	newRunner func() (func(T), func())
	onPanic   func(T, any, []byte)
	onGoexit  func(T)
	drop      func(T)
	id        uint64 // written on each worker's stack (see InWorker)
	// newWorker is e.runWorker, bound once: a go statement that calls a
	// func value without arguments allocates nothing, where one that
	// passes the new worker allocates a closure for it.
	newWorker func()

	shards  []shard[T]
	stripes []stripe // see pick
	mask    uint32

	closed atomic.Bool // intake is closed; each shard also has the flag under its lock
	paused atomic.Bool // Pause: workers take no task, and nobody is woken or started
	// The last task a worker timed ran longer than longTask (see runTimed
	// and yieldBeforeSpill). It starts clear, so that producers flooding a
	// new engine with tiny tasks yield from the first full ring: a backlog
	// once spilled keeps them spilling, a lock per task. Long tasks then
	// cost producers a yield per full ring until the first is timed.
	longTasks atomic.Bool
	bounded   bool         // QueueSize >= 0
	admitted  atomic.Int64 // with bounded: unfinished tasks; admit keeps it at most capacity, PushPast may pass it
	stuck     atomic.Int64 // with bounded: own tasks waiting in Push for room
	capacity  atomic.Int64 // with bounded: MaxWorkers+QueueSize
	queue     int64        // QueueSize

	workers     atomic.Int64 // exitBit | live workers
	maxWorkers  atomic.Int64
	minWorkers  int64        // kept when idle, as far as maxWorkers allows
	searching   atomic.Int32 // workers looking for a task, or woken to look
	maxSpinning int          // searchers beyond this park after one look
	procs       int64        // GOMAXPROCS when the engine was made
	starting    atomic.Int32 // woken or started workers not yet running
	alive       atomic.Int32 // worker goroutines that have not finished exiting
	lastWake    atomic.Int64 // when wake last succeeded (clock.Now); the engine's birth at first
	staleWoken  atomic.Int64 // when wakeStale last claimed a wake, likewise
	nextHome    atomic.Uint32
	idleTime    time.Duration

	idleMu      sync.Mutex
	idle        idleList[T] // parked workers, most recently parked first
	exiting     bool        // guarded by idleMu: workers must not park
	reaper      *time.Timer // retires workers parked for idleTime (see reap)
	reaperArmed bool        // guarded by idleMu
	lenders     *worker[T]  // parked workers whose slots Borrow took, linked by idleNext; guarded by idleMu
	lendersN    atomic.Int32
	// Workers running a callback of the engine's outside any task
	// (NewRunner or its done, OnPanic or OnGoexit once the task is counted
	// out): the only way a worker runs its user's code while the engine is
	// quiet (see InCallback).
	inCallback atomic.Int32
	borrowed   atomic.Int64 // slots Borrow took and Return has not given back: Wait waits for them

	completed atomic.Uint64 // published by workers in batches; Wait relies on it
	dropped   atomic.Uint64
	panicked  atomic.Uint64

	// Every live worker counts its finished tasks in its own word, so that
	// Stats is exact without a shared write per task.
	allMu   sync.Mutex
	all     []*worker[T] // live workers; worker.slot is the index
	slab    []worker[T]  // workers allocated for starts to come (see enlist)
	retired uint64       // tasks finished by workers no longer in all

	// testListed, set by tests only, runs in park between listing the
	// worker as idle and its last look, with the shard it looks at first.
	testListed func(home uint32)

	idleSig  notify.Cond // unfinished count reached zero
	spaceSig notify.Cond // bounded: room for a task, or closed
	exitSig  notify.Cond // the last worker exited

	// resizeMu serializes Resize and Lend, which set the limit in force
	// (maxWorkers) from the limit set and the slots lent. They come last
	// so as not to move the hot fields above.
	resizeMu sync.Mutex
	limit    atomic.Int64 // the limit set: New's, then Resize's
	lent     int64        // slots lent by tasks waiting for other work (see Lend), guarded by resizeMu
}

// New returns a started engine. It spawns MinWorkers workers at once.
// The caller validates cfg; New panics on values that make no sense.
func New[T any](cfg Config[T]) *Engine[T] {
	if cfg.MaxWorkers <= 0 || cfg.MinWorkers < 0 || cfg.MinWorkers > cfg.MaxWorkers || cfg.IdleTimeout < 0 || cfg.Run == nil && cfg.NewRunner == nil {
		panic("engine: invalid config")
	}
	n := shardCount(cfg.MaxWorkers)
	e := &Engine[T]{
		run:       cfg.Run,
		newRunner: cfg.NewRunner,
		onPanic:   cfg.OnPanic,
		onGoexit:  cfg.OnGoexit,
		drop:      cfg.Drop,
		shards:    make([]shard[T], n),
		stripes:   make([]stripe, n),
		mask:      uint32(n - 1),
		bounded:   cfg.QueueSize >= 0,
		queue:     int64(cfg.QueueSize),
		idleTime:  cfg.IdleTimeout,
		id:        NewID(),
	}
	e.newWorker = e.runWorker
	born := clock.Now()
	e.lastWake.Store(born)
	e.staleWoken.Store(born)
	// Half the processors, as the runtime bounds its spinning threads. A
	// spinning worker yields with runtime.Gosched, which sends it through
	// the global run queue, from where another processor may take it into
	// its local queue; should that processor's thread be descheduled by
	// the host, the worker waits there, counted as searching, while tasks
	// queue up. Fewer spinners park more workers, and a parked worker is
	// woken onto the producer's own processor.
	e.procs = int64(runtime.GOMAXPROCS(0))
	e.maxSpinning = max(1, int(e.procs)/2)
	for i := range e.shards {
		e.shards[i].init()
	}
	e.maxWorkers.Store(int64(cfg.MaxWorkers))
	e.limit.Store(int64(cfg.MaxWorkers))
	e.minWorkers = int64(cfg.MinWorkers)
	e.capacity.Store(capacity(int64(cfg.MaxWorkers), e.queue))
	e.keepMinimum()
	return e
}

// shardCount returns how many shards an engine for maxWorkers workers
// has: twice GOMAXPROCS, rounded up to a power of two, but no more than
// one for every shardWorkers workers (rounded down to a power of two), so
// that a small pool's memory is bounded by its limit, not by the machine,
// and a pool of fewer than 2*shardWorkers workers has a single queue, in
// which every producer's tasks keep their order.
func shardCount(maxWorkers int) int {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) && 2*n*shardWorkers <= maxWorkers {
		n <<= 1
	}
	return n
}

// shardWorkers is the fewest workers per shard: workers that share a
// shard meet on its read count, and more workers than processors add no
// contention, so the bound costs a small pool little while a shard costs
// a few kilobytes.
const shardWorkers = 8

// capacity returns workers+queue, saturating instead of overflowing.
func capacity(workers, queue int64) int64 {
	if workers > math.MaxInt64-queue {
		return math.MaxInt64
	}
	return workers + queue
}

// Push queues t, waiting for room when the engine is bounded and full.
// A nil ctx waits without limit, except from inside the engine's own
// tasks: when every worker is such a task waiting for room, room would
// never come, and Push returns an error wrapping ErrFull. It returns
// ErrStopped once the engine is closed, and ctx's error if ctx ends first.
func (e *Engine[T]) Push(ctx context.Context, t T) error {
	if !e.bounded {
		return e.enqueue(t)
	}
	for {
		err := e.admit()
		if err == nil {
			return e.enqueue(t)
		}
		if err != ErrFull {
			return err
		}
		if ctx == nil && e.InWorker() {
			err = e.waitInWorker()
		} else {
			err = e.spaceSig.Wait(ctx, e.hasRoom)
		}
		if err != nil {
			return err
		}
	}
}

// errFullInWorker is returned by Push when every worker is one of the
// engine's tasks waiting for room in the engine: none would ever come.
var errFullInWorker = fmt.Errorf("%w: every worker is waiting to queue a task into its own full pool", ErrFull)

// waitInWorker waits for room like Push, for a caller that is one of e's
// tasks. Such callers hold workers while they wait: once they hold all of
// them (the limit, and every live worker above it after a shrink), no task
// can finish to make room, and they return errFullInWorker instead.
func (e *Engine[T]) waitInWorker() error {
	e.stuck.Add(1)
	defer e.stuck.Add(-1)
	e.spaceSig.Broadcast() // the other waiters' condition may hold now
	deadlocked := func() bool {
		n := e.stuck.Load()
		return n >= e.maxWorkers.Load() && n >= e.workers.Load()&countMask
	}
	e.spaceSig.Wait(nil, func() bool { return e.hasRoom() || deadlocked() })
	if e.hasRoom() {
		return nil
	}
	return errFullInWorker
}

// TryPush queues t if that needs no waiting. It returns ErrFull when a bounded
// engine is full and ErrStopped once the engine is closed.
func (e *Engine[T]) TryPush(t T) error {
	if e.bounded {
		if err := e.admit(); err != nil {
			return err
		}
	}
	return e.enqueue(t)
}

// PushPast queues t without waiting, past the bound of a bounded engine
// that is full: for work that stands for tasks accepted elsewhere already,
// whose submitter must not wait (a group's or a layer's step). Producers
// that wait for room wait the longer. It returns ErrStopped once the
// engine is closed.
func (e *Engine[T]) PushPast(t T) error {
	if e.bounded {
		e.admitted.Add(1)
	}
	return e.enqueue(t)
}

// admit counts one more unfinished task in a bounded engine if there is room.
func (e *Engine[T]) admit() error {
	for {
		if e.closed.Load() {
			return ErrStopped
		}
		v := e.admitted.Load()
		if v >= e.capacity.Load() {
			return ErrFull
		}
		if e.admitted.CompareAndSwap(v, v+1) {
			return nil
		}
	}
}

func (e *Engine[T]) hasRoom() bool {
	return e.closed.Load() || e.admitted.Load() < e.capacity.Load()
}

// enqueue appends t to a shard and makes sure a worker will look for it.
// The shard decides whether t is accepted, so a task is either refused or
// counted before Close returns.
func (e *Engine[T]) enqueue(t T) error {
	if e.closed.Load() {
		return e.refuse()
	}
	i := e.pick()
	s := &e.shards[i&e.mask]
	n, r := s.push(t)
	spilled := false
	if r == ringFull && e.yieldBeforeSpill() {
		// The producer outpaces the workers: give them its processor
		// once before spilling, as the backlog is theirs to drain. While
		// the backlog lasts every push yields once, a soft backpressure
		// that gives the workers a turn at every push; when the workers
		// are blocked rather than busy, the yield finds nothing to run
		// and is a wasted trip through the scheduler.
		runtime.Gosched()
		n, r = s.push(t)
	}
	if r == ringFull {
		// The producer waits for a busy spill queue rather than spill into
		// another shard: its tasks stay in the shards in turn, and every
		// shard's backlog grows at the same pace, so that workers taking
		// the shards in turn take the tasks close to their order.
		s.mu.Lock()
		n, r = s.spill(t)
		spilled = true
	}
	if r == refused {
		return e.refuse()
	}
	if e.searching.Load() == 0 {
		e.wake()
	} else if ok, _ := e.staleWakeable(); ok {
		// Checked here, where it is inlined, rather than in wakeIfStale:
		// in a busy pool nobody can be woken, and the push should not pay
		// a call to learn that.
		e.wakeIfStale(s, n, spilled)
	}
	return nil
}

// yieldBeforeSpill reports whether a producer that found its ring full
// should yield before it spills: at the worker limit, where no new worker
// can help, and below it while the program has at most yieldGoroutines
// goroutines per processor. A yield puts the producer behind every
// runnable goroutine: among a few, the workers soon run and drain the
// ring, and the producer pays no lock per task; among thousands (many
// producers, or many workers woken from blocking tasks), it waits behind
// all of them, and a spill, with the producer starting a worker, is far
// cheaper. runtime.NumGoroutine is read only on a full ring.
//
// Nor does a producer yield while tasks are long (see longTask): a worker
// running tasks back to back gives its processor back only when it runs
// out of them or the runtime preempts it, so the yield would wait for the
// tasks instead of letting them catch up, and an unbounded Push would be
// paced like a bounded queue's.
//
// Nor does a producer yield on more than yieldProcs processors. There the
// workers are more often running already, and the yield mostly delays the
// producer: runtime.Gosched goes through the runtime's global run queue,
// under a lock that every processor takes. Spilling costs memory instead,
// as a producer that outpaces the workers queues its backlog in fifo
// chunks.
func (e *Engine[T]) yieldBeforeSpill() bool {
	if e.procs > yieldProcs || e.longTasks.Load() {
		return false
	}
	return e.workers.Load()&countMask >= e.maxWorkers.Load() ||
		runtime.NumGoroutine() <= yieldGoroutines*int(e.procs)
}

// When producers yield before they spill (see yieldBeforeSpill).
const (
	// yieldGoroutines is the goroutines per processor up to which a
	// producer below the worker limit yields.
	yieldGoroutines = 128
	// yieldProcs is the most processors (GOMAXPROCS when the engine was
	// made) on which producers yield at all.
	yieldProcs = 2
)

// A task that runs longer than longTask is long: a producer that yields
// would wait for such tasks, so it spills instead (see yieldBeforeSpill).
// longTask is of the order of the time a worker takes to run a ringful of
// tiny tasks. Workers time one task in timeEvery while tasks are short,
// and one in timeLongEvery while they are long (see runTimed).
const (
	longTask      = 2 * time.Microsecond
	timeEvery     = 64
	timeLongEvery = 8
)

// wakeIfStale wakes one more worker when the searchers that producers rely
// on seem not to be running, judged at the nth push into s (n counts the
// ring's pushes, or the spill queue's when spilled is set), a push that
// found a searcher counted and somebody to wake (see staleWakeable). A
// searcher counts from the moment it is woken, but its goroutine may wait
// long for a processor when many are runnable, or sit on a processor that
// the host has descheduled; without this, producers would wake nobody
// while tasks wait.
//
// A stall, the task pushed into s's ring before this one still waiting
// while nobody takes any (see stalled), calls wakeStale. Every lateEvery-th
// push also checks for searchers that may be late rather than stuck: a
// woken worker that has not started while no wake has succeeded for
// staleWake, or s spilling a backlog. These read the clock, and their
// conditions can hold for long stretches of a busy engine, so they are
// checked at every lateEvery-th push only.
//
// wakeStale wakes a parked worker, but starts new ones only up to
// GOMAXPROCS: a stall means that the searchers wait for a processor (a new
// worker's NewRunner runs outside the searchers), and a new worker would
// wait like them, while the searchers will come. When workers block
// instead (sleep, I/O), the processors are free and searchers do not
// stall: a push that finds no searcher, and a searcher that finds a
// backlog, start workers up to the limit.
//
// The caller checks nothing while a check could wake nobody: no worker is
// parked and GOMAXPROCS workers (or the limit, if lower) are live, as in a
// busy pool. The looks read lines that workers write, and a busy pool's
// producers should not pay for them. While a stall lasts, every push that
// looks calls wakeStale, whose clock read comes before its rate limit
// turns the push away.
func (e *Engine[T]) wakeIfStale(s *shard[T], n uint64, spilled bool) {
	switch {
	case !spilled && s.stalled(n):
		e.wakeStale()
	case n%lateEvery != 0:
	case spilled || e.starting.Load() > 0 && e.now()-e.lastWake.Load() > int64(staleWake):
		e.wakeStale()
	}
}

// wakeStale wakes a parked worker, at most once per staleWakeParked, or
// starts one if none is parked and fewer than GOMAXPROCS (and the limit)
// are live, at most once per staleWake. It keeps its own clock, not the
// time of the last wake of any kind: a pool at half load wakes parked
// workers all the time, and a stall must not wait for a quiet moment. A
// wake at the parked rate never starts a worker: the worker seen parked
// may have left the list since (to run a task its last look found), and a
// start in its place would come at the parked rate, faster than starts
// are allowed, whatever the limit.
func (e *Engine[T]) wakeStale() {
	ok, parked := e.staleWakeable()
	if !ok {
		return // nobody to wake: spare the clock
	}
	every := staleWakeParked
	if !parked {
		every = staleWake
	}
	now := e.now()
	last := e.staleWoken.Load()
	if now-last <= int64(every) || !e.staleWoken.CompareAndSwap(last, now) {
		return
	}
	if parked {
		e.wakeParked()
	} else {
		e.wake()
	}
}

// staleWakeable reports whether wakeStale would find a worker to wake: a
// parked one (parked is then true), or room to start one below GOMAXPROCS
// and the limit.
func (e *Engine[T]) staleWakeable() (ok, parked bool) {
	if e.idle.n.Load() > 0 {
		return true, true
	}
	return e.workers.Load()&countMask < min(e.maxWorkers.Load(), e.procs), false
}

// refuse undoes a bounded admission for a task the closed engine refuses.
func (e *Engine[T]) refuse() error {
	if e.bounded {
		e.admitted.Add(-1)
		e.spaceSig.Broadcast()
	}
	return ErrStopped
}

// finish records n tasks as finished (run or dropped) and wakes the waiters
// that this may concern. idle tells whether the caller found the queues
// empty: only then is Wait's condition worth testing.
func (e *Engine[T]) finish(n int64, idle bool) {
	if e.bounded {
		e.admitted.Add(-n)
		e.spaceSig.Broadcast()
	}
	if idle {
		e.idleSig.Broadcast()
	}
}

// unfinished reports how many accepted tasks have neither run to the end nor
// been dropped. The finished counts are read before the pushed ones: both only
// grow, so a result of zero means that at one instant every accepted task was
// finished.
func (e *Engine[T]) unfinished() int64 {
	completed := e.completed.Load()
	return e.unfinishedAfter(completed, e.dropped.Load())
}

// unfinishedAfter is unfinished with the given counts of completed and
// dropped tasks, read before the call.
func (e *Engine[T]) unfinishedAfter(completed, dropped uint64) int64 {
	done := completed + dropped
	var pushed uint64
	for i := range e.shards {
		pushed += e.shards[i].pushed()
	}
	return int64(pushed - done)
}

// queued reports the number of tasks waiting in the shards.
func (e *Engine[T]) queued() int64 {
	var n int64
	for i := range e.shards {
		n += int64(e.shards[i].len())
	}
	return n
}

// Wait blocks until no task is queued or running, on a worker or in a
// borrowed slot, or ctx ends (nil: never).
// Called from inside one of e's tasks, which would wait for itself, it
// returns ErrInWorker instead of blocking. It tells such a caller by
// walking its stack (see InWorker), and gives the tasks waitYields turns
// of the processor first: a caller from outside most often waits for a
// short tail of tasks, which then spares it the walk.
func (e *Engine[T]) Wait(ctx context.Context) error {
	if !e.quiet() {
		for range waitYields {
			runtime.Gosched()
			if e.quiet() {
				return nil
			}
		}
		if e.InWorker() {
			return ErrInWorker
		}
	}
	return e.idleSig.Wait(ctx, e.quiet)
}

// waitYields is how many turns Wait gives the tasks before it walks the
// caller's stack.
const waitYields = 2

// InCallback reports whether the caller is one of e's workers running a
// callback of the engine's outside any task: NewRunner or the done it
// returned, OnPanic or OnGoexit. A caller that Wait found quiet can be one
// of e's workers only there, as a running task is not quiet. It walks the
// stack only while such a callback runs.
func (e *Engine[T]) InCallback() bool {
	return e.inCallback.Load() > 0 && e.InWorker()
}

// callback runs f, a callback of the engine's, counted in inCallback.
func (e *Engine[T]) callback(f func()) {
	e.inCallback.Add(1)
	defer e.inCallback.Add(-1)
	f()
}

// quiet reports whether every accepted task has finished and no borrowed
// slot is running work (see Borrow).
func (e *Engine[T]) quiet() bool { return e.borrowed.Load() == 0 && e.unfinished() == 0 }

// Close stops intake: every later push returns ErrStopped and producers
// blocked for room return ErrStopped. Queued tasks still run; workers
// retire as they find the queue empty, parked ones once Close wakes them.
// Idempotent.
func (e *Engine[T]) Close() {
	e.closed.Store(true)
	for i := range e.shards {
		e.shards[i].close()
	}
	e.spaceSig.Broadcast()
	e.idleMu.Lock()
	e.wakeAllParked()
	e.idleMu.Unlock()
}

// wakeAllParked wakes every parked worker, with e.idleMu held.
func (e *Engine[T]) wakeAllParked() {
	for w := e.idle.pop(); w != nil; w = e.idle.pop() {
		e.searching.Add(1)
		e.starting.Add(1)
		w.goAhead.open()
	}
}

// Pause stops the workers from taking queued tasks until Resume: each
// looks at the flag before it takes a task, so a worker that was taking
// one as Pause returned may still run it. Producers still queue, and wake
// or start nobody; workers that find nothing park as usual. Close does
// not resume: the caller resumes an engine whose queue it wants run.
// Pause reports whether it paused the engine: false if it was paused
// already.
func (e *Engine[T]) Pause() bool { return !e.paused.Swap(true) }

// Resume lets the workers take tasks again, wakes one for the queue (each
// worker that finds a task wakes the next while tasks remain), and starts
// the workers that MinWorkers wants and Pause kept from starting.
func (e *Engine[T]) Resume() {
	if !e.paused.Swap(false) {
		return
	}
	if e.queued() > 0 {
		e.wake()
	}
	e.keepMinimum() // workers not started while paused (a Goexit's replacement, a Resize)
}

// OverLimit reports whether more workers are live than the limit, as
// after Resize lowered it: each worker that finds it so after its task
// retires.
func (e *Engine[T]) OverLimit() bool {
	return e.workers.Load()&countMask > e.maxWorkers.Load()
}

// Paused reports whether Pause was called and Resume not since.
func (e *Engine[T]) Paused() bool { return e.paused.Load() }

// Closed reports whether Close was called.
func (e *Engine[T]) Closed() bool { return e.closed.Load() }

// Bounded reports whether Push may wait for room: the queue is bounded.
func (e *Engine[T]) Bounded() bool { return e.bounded }

// Drain removes every queued task, passes each to Config.Drop, counts it as
// dropped and returns how many it removed. A task is either run by a worker
// or removed here, never both. A task whose producer is still filling its
// ring cell, and those behind it in that ring, are left to the workers.
// A Drop that panics or calls runtime.Goexit skips the calls for the
// tasks after its own, not their count: Wait and Exit would otherwise
// wait for them for ever.
func (e *Engine[T]) Drain() int {
	var dropped []T
	for i := range e.shards {
		dropped = e.shards[i].drain(dropped)
	}
	total := len(dropped)
	if total == 0 {
		return 0
	}
	defer func() {
		e.dropped.Add(uint64(total))
		e.finish(int64(total), true)
	}()
	if e.drop != nil {
		for _, t := range dropped {
			e.drop(t)
		}
	}
	return total
}

// Exit makes every worker return once the queues are empty and waits until
// they have. Call it after Close and Wait; it is idempotent.
func (e *Engine[T]) Exit() {
	for {
		v := e.workers.Load()
		if v&exitBit != 0 || e.workers.CompareAndSwap(v, v|exitBit) {
			break
		}
	}
	e.idleMu.Lock()
	e.exiting = true
	e.wakeAllParked()
	if e.reaper != nil {
		e.reaper.Stop()
	}
	e.idleMu.Unlock()
	e.exitSig.Wait(nil, func() bool { return e.workers.Load() == exitBit && e.alive.Load() == 0 })
}

// Resize changes the worker limit to n > 0. Extra workers retire after their
// current task; when n grows, workers start for queued tasks at once, one
// per task that no searching worker will take, and up to the minimum.
func (e *Engine[T]) Resize(n int) {
	e.resizeMu.Lock() // one at a time: the capacity follows the limit stored
	defer e.resizeMu.Unlock()
	e.limit.Store(int64(n))
	e.applyLimit()
}

// Borrow takes a worker's slot for the caller, a goroutine that is not one
// of e's workers but is about to run work of e's users on e's behalf (a
// group's queued task, run by the goroutine that waits for the group), if
// the limit has room for one more worker or a parked worker can lend its
// slot; it reports whether it did. A borrowed slot counts as a live
// worker until Return gives it back: e starts no worker in its place, so
// the limit holds, and Wait and Exit wait for it. A parked worker whose slot is
// borrowed stays parked, off the idle list where nobody can wake it, until
// Return lists it again.
func (e *Engine[T]) Borrow() bool {
	if e.paused.Load() {
		return false
	}
	for {
		v := e.workers.Load()
		switch max := e.maxWorkers.Load(); {
		case v&exitBit != 0 || v > max:
			return false
		case v == max:
			if !e.borrowParked() {
				return false
			}
			e.borrowed.Add(1)
			return true
		}
		if e.workers.CompareAndSwap(v, v+1) {
			e.borrowed.Add(1)
			return true
		}
	}
}

// borrowParked takes the slot of the worker parked longest, if it is
// asleep (past its last look at the queues, as the reaper requires), and
// keeps it on e.lenders; see Borrow.
func (e *Engine[T]) borrowParked() bool {
	if e.idle.asleep.Load() == 0 {
		return false
	}
	e.idleMu.Lock()
	defer e.idleMu.Unlock()
	w := e.idle.tail
	if w == nil || !w.asleep || e.exiting {
		return false
	}
	e.idle.remove(w)
	w.idleNext, e.lenders = e.lenders, w
	e.lendersN.Add(1)
	return true
}

// AsWorker runs f on the calling goroutine marked as one of e's workers
// (InWorker reports true inside), for a goroutine that holds a slot Borrow
// took: what f waits for is then seen as waited for by a worker, which
// helps or lends its slot instead of waiting for slots it holds.
func (e *Engine[T]) AsWorker(f func()) { RunAs(e.id, Func(f)) }

// Return gives back a slot that Borrow took, and starts a worker for the
// queued tasks that the slot may have kept from starting. Slots are alike:
// while some parked worker lent its slot, Return lists that worker as idle
// again, whichever way the caller's slot was taken.
func (e *Engine[T]) Return() {
	if e.lendersN.Load() == 0 || !e.relist() {
		e.release(0)
	}
	if e.borrowed.Add(-1) == 0 {
		e.idleSig.Broadcast() // Wait may be waiting for this slot
	}
	if e.queued() > int64(e.searching.Load()) {
		e.wake()
	}
}

// relist lists a worker whose slot was lent as idle again, asleep as it
// was, and reports whether there was one. A closed engine wakes it, to
// take the queue's last tasks or retire.
func (e *Engine[T]) relist() bool {
	e.idleMu.Lock()
	defer e.idleMu.Unlock()
	w := e.lenders
	if w == nil {
		return false
	}
	e.lenders, w.idleNext = w.idleNext, nil
	e.lendersN.Add(-1)
	w.parkedAt = e.now()
	e.idle.push(w)
	e.idle.markAsleep(w)
	e.armReaper(e.idleTime)
	if e.exiting || e.closed.Load() {
		e.wakeAllParked()
	}
	return true
}

// Saturated reports whether every worker the limit allows is live and none
// is parked: a task queued now may have to wait for a running one to
// finish. It reads three words.
func (e *Engine[T]) Saturated() bool {
	return e.workers.Load()&countMask >= e.maxWorkers.Load() && e.idle.n.Load() == 0
}

// Lend runs wait, in which one of e's own tasks waits for other work of
// e's, with the task's slot lent to e: while wait runs, e may run one task
// more than its limit, so that the work waited for can run even when every
// worker is a task waiting so. The tasks running user code stay within the
// limit: the lender runs none while it waits. When wait returns, the limit
// is back, and a worker beyond it retires as it finishes its task. Call it
// only from inside one of e's tasks (see InWorker).
func (e *Engine[T]) Lend(wait func()) {
	e.lend(1)
	defer e.lend(-1)
	wait()
}

func (e *Engine[T]) lend(d int64) {
	e.resizeMu.Lock()
	defer e.resizeMu.Unlock()
	e.lent += d
	e.applyLimit()
}

// applyLimit makes the limit in force the limit set plus the slots lent,
// and starts workers for the queued tasks that it lets run. Called with
// resizeMu held.
func (e *Engine[T]) applyLimit() {
	n := e.limit.Load()
	if e.lent > math.MaxInt64-n {
		n = math.MaxInt64
	} else {
		n += e.lent
	}
	old := e.maxWorkers.Swap(n)
	if e.bounded {
		e.capacity.Store(capacity(n, e.queue))
		e.spaceSig.Broadcast()
	}
	// A woken or new worker counts as searching at once but takes its
	// task only once it runs, so workers start only for the queued tasks
	// that no searcher will take: counted against the queued tasks alone,
	// one task would start a worker at every step up to the new limit.
	for i := old; i < n && e.queued() > int64(e.searching.Load()); i++ {
		if !e.wake() {
			break
		}
	}
	e.keepMinimum()
}

// keepMinimum starts as many workers as are missing from the minimum (as
// far as the limit allows): in New, after Resize, and in place of a worker
// whose goroutine a task ended. It counts them once: a loop on the live
// count would start more for as long as new workers end at once (a
// WorkerStart hook that calls runtime.Goexit).
func (e *Engine[T]) keepMinimum() {
	if e.closed.Load() {
		return // its workers retire as they find the queue empty (see leave)
	}
	for n := min(e.minWorkers, e.maxWorkers.Load()) - e.workers.Load()&countMask; n > 0 && e.spawn(); n-- {
	}
}

// Stats is a snapshot of the engine's counters. Fields are read one by one
// while tasks run, so they are consistent only when the engine is quiet.
type Stats struct {
	// Idle counts the parked workers past their last look at the queues:
	// only a wake-up, which checks the worker limit, gives them a task.
	Workers, Idle, Searching int
	Queued, Unfinished       int64
	Completed                uint64 // tasks that ran to the end or panicked
	Dropped, Panicked        uint64
	MaxWorkers               int
}

// Stats returns a snapshot of the engine's counters. It visits every live
// worker under a lock, so its cost grows with the pool.
func (e *Engine[T]) Stats() Stats {
	// Finished counts first, as in unfinished: pushed is read after them,
	// so Unfinished cannot be negative. Dropped is read once, so that a
	// Drain between two reads cannot count its tasks both as dropped and
	// as unfinished (Submitted would then jump and fall back).
	completed := e.finished()
	dropped := e.dropped.Load()
	return Stats{
		Workers:    int(e.workers.Load() & countMask),
		Idle:       int(e.idle.asleep.Load()),
		Searching:  int(e.searching.Load()),
		Queued:     e.queued(),
		Unfinished: e.unfinishedAfter(completed, dropped),
		Completed:  completed,
		Dropped:    dropped,
		Panicked:   e.panicked.Load(),
		MaxWorkers: int(e.limit.Load()),
	}
}

// finished returns the number of tasks that workers have finished, exactly:
// the workers' own counts, including what they have not yet published.
func (e *Engine[T]) finished() uint64 {
	e.allMu.Lock()
	defer e.allMu.Unlock()
	n := e.retired
	for _, w := range e.all {
		n += w.finished.Load()
	}
	return n
}

// enlist returns a new worker, added to the live workers. Workers are
// allocated in slabs, each as large as the live workers were (up to
// workerSlab): a pool that grows to thousands of workers, as one running
// blocking tasks does, pays one allocation per slab instead of one per
// worker, and a small pool allocates little it does not use. A slab stays
// in memory while any of its workers lives.
func (e *Engine[T]) enlist() *worker[T] {
	e.allMu.Lock()
	if len(e.slab) == 0 {
		e.slab = make([]worker[T], min(max(len(e.all), 1), workerSlab))
	}
	w := &e.slab[0]
	e.slab = e.slab[1:]
	w.e, w.home, w.slot = e, e.nextHome.Add(1), len(e.all)
	if e.all == nil {
		e.all = make([]*worker[T], 0, 8) // once, not at 1, 2 and 4 workers
	}
	e.all = append(e.all, w)
	e.allMu.Unlock()
	return w
}

// workerSlab is the most workers that enlist allocates at once.
const workerSlab = 64

// delist removes w from the live workers, keeping its count, and returns
// the memory of a burst of workers once most have gone.
func (e *Engine[T]) delist(w *worker[T]) {
	e.allMu.Lock()
	e.retired += w.finished.Load()
	last := len(e.all) - 1
	e.all[w.slot] = e.all[last]
	e.all[w.slot].slot = w.slot
	e.all[last] = nil
	e.all = e.all[:last]
	if cap(e.all) > 64 && len(e.all) < cap(e.all)/4 {
		e.all = append([]*worker[T](nil), e.all...)
	}
	e.allMu.Unlock()
}
