package engine

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync/atomic"
)

const (
	// spinRounds is how many times a searcher scans the shards, yielding the
	// processor between scans, before it parks: long enough to bridge the
	// gaps of a busy producer, short enough to cost nothing noticeable in
	// an idle program.
	spinRounds = 32

	// completionBatch bounds how many finished tasks a worker counts locally
	// before it publishes them, so Stats stays fresh during long bursts.
	completionBatch = 64
)

type worker[T any] struct {
	e                  *Engine[T]
	run                func(T)
	home               uint32        // the shard pop looks at first
	done               int64         // finished tasks not yet published to e.completed
	goAhead            gate          // opened by whoever takes the worker off the idle list
	idlePrev, idleNext *worker[T]    // idle list links, guarded by e.idleMu
	parked             bool          // on the idle list, guarded by e.idleMu
	asleep             bool          // parked and past its last look, guarded by e.idleMu
	retire             bool          // set by the reaper before its go-ahead
	parkedAt           int64         // e.now() when parked, guarded by e.idleMu
	ended              *endedTask[T] // a task that left loop by neither return nor panic
	finished           atomic.Uint64 // tasks run to an end; written by this worker only
	slot               int           // index in e.all, guarded by e.allMu
	untimed            int           // tasks to run before timing one (see runTimed)
}

// endedTask is a task that called runtime.Goexit, or panic(nil) under
// GODEBUG=panicnil=1, with the stack where it did.
type endedTask[T any] struct {
	t     T
	stack []byte
}

// wake makes sure some worker will look at the queues: it wakes a parked
// worker, or starts one if the limit allows. It reports whether it did.
func (e *Engine[T]) wake() bool {
	if e.wakeParked() {
		return true
	}
	if e.spawn() {
		e.lastWake.Store(e.now())
		return true
	}
	return false
}

// wakeParked wakes a parked worker, if there is one and the engine is not
// paused, and reports whether it did.
func (e *Engine[T]) wakeParked() bool {
	if e.idle.n.Load() == 0 || e.paused.Load() {
		return false
	}
	e.idleMu.Lock()
	w := e.idle.pop()
	if w == nil {
		e.idleMu.Unlock()
		return false
	}
	e.searching.Add(1)
	e.starting.Add(1)
	e.idleMu.Unlock()
	e.lastWake.Store(e.now())
	w.goAhead.open()
	return true
}

// spawn starts a worker unless the engine is at its limit, exiting or
// paused.
func (e *Engine[T]) spawn() bool {
	if e.paused.Load() {
		return false
	}
	for {
		v := e.workers.Load()
		if v&exitBit != 0 || v >= e.maxWorkers.Load() {
			return false
		}
		if e.workers.CompareAndSwap(v, v+1) {
			break
		}
	}
	e.searching.Add(1)
	e.starting.Add(1)
	go e.newWorker()
	return true
}

// release takes one worker off the live count if more than keep are live or
// the engine is exiting, and reports whether it did.
func (e *Engine[T]) release(keep int64) bool {
	for {
		v := e.workers.Load()
		if v&exitBit == 0 && v <= keep {
			return false
		}
		if e.workers.CompareAndSwap(v, v-1) {
			if v-1 == exitBit {
				e.exitSig.Broadcast()
			}
			if e.stuck.Load() > 0 {
				// A task waiting for room gives up once every live worker
				// is such a task (waitInWorker): one fewer may make it so.
				e.spaceSig.Broadcast()
			}
			return true
		}
	}
}

// shrunk retires the calling worker if Resize has shrunk the limit below
// the live workers, and reports whether it did. Resize may grow the limit
// back between the read and the release, its keepMinimum counting this
// worker as live: then a worker starts in its place if the minimum wants
// it, or the pool would stay below its minimum for good.
func (e *Engine[T]) shrunk() bool {
	if e.workers.Load() <= e.maxWorkers.Load() || !e.release(e.maxWorkers.Load()) {
		return false
	}
	e.keepMinimum()
	return true
}

// flush publishes the worker's finished tasks; idle tells whether the
// worker found no more work, and then it wakes Wait's callers if no task is
// left unfinished. Every worker publishes before it tests that, so the
// last one to finish sees the others' counts.
func (w *worker[T]) flush(idle bool) {
	if w.done > 0 {
		w.e.completed.Add(uint64(w.done))
		w.e.finish(w.done, false)
		w.done = 0
	}
	if idle {
		w.e.idleSig.BroadcastIf(w.e.quiet)
	}
}

// runWorker is a new worker's goroutine. It runs the worker's Run below
// the frames that spell the engine's number (see InWorker). It clears the
// profile labels that the goroutine inherits from whichever goroutine
// started it (a producer, often, inside pprof.Do): the worker runs
// everybody's tasks, and a profile would charge them all to that producer.
func (e *Engine[T]) runWorker() {
	pprof.SetGoroutineLabels(context.Background())
	w := e.enlist()
	RunAs(e.id, w)
}

// Run is the worker's life: it runs tasks until the worker retires.
func (w *worker[T]) Run() {
	e := w.e
	e.starting.Add(-1)
	e.alive.Add(1)
	var done func()
	retired := false
	ready := false // past newRunner
	// Exit waits for this last, so Stop returns only after the worker's
	// state is closed, even on runtime.Goexit in a task or in done.
	defer func() {
		w.run, w.ended = nil, nil // the user's runner: the slab may outlive w
		if e.alive.Add(-1) == 0 {
			e.exitSig.Broadcast()
		}
	}()
	defer func() {
		e.delist(w)
		if !retired {
			// runtime.Goexit in a task or in newRunner, or a panic about
			// to crash the program: this goroutine ends now. Hand its
			// slot to a new worker, if there is work or the minimum
			// wants one.
			if w.ended != nil && e.onGoexit != nil {
				e.callback(func() { e.onGoexit(w.ended.t) })
			}
			e.release(0)
			if e.unfinished() > 0 {
				e.wake()
			}
			e.wakeIfClosedAndEmpty()
			if ready {
				// Not for a newRunner that ends its goroutine: every
				// replacement would end the same way, in an endless
				// churn while the pool is idle.
				e.keepMinimum()
			}
		}
		if done != nil {
			e.callback(done)
		}
	}()
	w.run = e.run
	searching := true // whoever started this worker counted it as a searcher
	if e.newRunner != nil {
		// newRunner is the user's code, which may take long (a connection
		// to open): it runs outside the searchers, so that producers, and
		// the wake here, start other workers meanwhile rather than rely on
		// this one. Counted as a searcher, it would hold back every other
		// start until it returned.
		searching = false
		if e.searching.Add(-1) == 0 && e.queued() > 1 {
			e.wake() // for the tasks beyond the one this worker will take
		}
		e.callback(func() { w.run, done = e.newRunner() })
	}
	ready = true
	for ; !w.loop(searching); searching = false {
		if ended := w.ended; ended != nil {
			// The goroutine did not end after all: the task called
			// panic(nil) under GODEBUG=panicnil=1, which recover cannot
			// tell from runtime.Goexit. Report it as the panic it was,
			// and only so: cleared first, so that an OnPanic that calls
			// runtime.Goexit does not have it reported again to OnGoexit.
			w.ended = nil
			e.panicked.Add(1)
			e.callback(func() { e.onPanic(ended.t, nil, ended.stack) })
		}
	}
	retired = true
}

// loop runs tasks until the worker retires, and reports true then. After a
// panic in a task it reports the panic and returns false, and Run calls it
// again: one deferred call per run of the loop, not one per task. searching
// tells whether the worker is counted in e.searching on entry.
func (w *worker[T]) loop(searching bool) (retired bool) {
	e := w.e
	var t T // the running task, for the deferred call
	defer func() {
		if retired {
			return
		}
		var v any
		if e.onPanic != nil {
			v = recover()
		}
		// Deferred, so that the task is counted even if OnPanic calls
		// runtime.Goexit: Wait and Stop would wait for it for ever.
		defer func() {
			w.done++ // the task that panicked or called runtime.Goexit
			w.finished.Add(1)
			w.flush(true)
		}()
		if v != nil {
			e.panicked.Add(1)
			e.callback(func() { e.onPanic(t, v, debug.Stack()) })
		} else {
			// Either the goroutine is ending (runtime.Goexit, or a panic
			// that will crash the program) and Run's deferred call
			// takes over, or loop returns to Run after a panic(nil).
			w.ended = &endedTask[T]{t: t}
			if e.onPanic != nil {
				w.ended.stack = debug.Stack()
			}
		}
	}()
	for {
		var ok bool
		t, ok = w.next(searching)
		if !ok {
			return true
		}
		searching = false
		if w.untimed--; w.untimed < 0 {
			w.runTimed(t)
		} else {
			w.run(t)
		}
		w.finished.Add(1)
		if w.done++; w.done >= completionBatch || e.bounded {
			w.flush(false)
		}
	}
}

// runTimed runs t and times it, for the producers' choice between yielding
// and spilling (see yieldBeforeSpill). Two clock reads cost about as much
// as a tiny task, so while tasks are short a worker times one in
// timeEvery. While they are long it times one in timeLongEvery, to see
// soon when they are short again: blocking tasks use little processor
// time, and timing each of them would add a noticeable share to it.
func (w *worker[T]) runTimed(t T) {
	e := w.e
	began := e.now()
	w.run(t)
	long := e.now()-began > int64(longTask)
	if e.longTasks.Load() != long {
		e.longTasks.Store(long) // a line that producers read: written on change only
	}
	if long {
		w.untimed = timeLongEvery - 1
	} else {
		w.untimed = timeEvery - 1
	}
}

// pop takes the task at the head of the first non-empty shard, starting at
// the one after the shard it last took a task from: a worker visits the
// shards in turn, as a producer fills them (see pick), so that one
// producer's tasks are taken close to the order they were pushed in and
// no shard's backlog waits while another's is drained. wait is set for a
// worker's last look before it parks, which must not miss a task that a
// spill queue is moving into its ring (see shard.pop).
//
// Workers take one task at a time. Taking several at once would save
// cache-line transfers, but a worker blocked in one task would hide the
// rest from the other workers, and a task that waits for one of them would
// deadlock the pool below its limit.
func (w *worker[T]) pop(wait bool) (t T, ok bool) {
	e := w.e
	if e.paused.Load() {
		return t, false
	}
	for range e.shards {
		s := &e.shards[w.home&e.mask]
		w.home++
		if t, ok = s.pop(wait); ok {
			return t, true
		}
	}
	return t, false
}

// foundWork is called by a searcher that found a task. If it was the last
// searcher and tasks remain queued, it wakes another worker, as the Go
// scheduler does when a spinning thread finds work: a backlog left by
// producers that have stopped pushing still spreads over the workers, each
// woken worker waking the next.
func (w *worker[T]) foundWork() {
	e := w.e
	if e.searching.Add(-1) == 0 && e.queued() > 0 {
		e.wake()
	}
}

// next returns the next task to run, searching and parking as needed, or
// reports false when the worker has retired. searching tells whether the
// worker is counted in e.searching on entry.
func (w *worker[T]) next(searching bool) (t T, ok bool) {
	e := w.e
	if !searching {
		if e.shrunk() {
			// Shrunk by Resize. A producer that found every slot taken
			// woke nobody and left its task to the running workers: if
			// the others are parked, wake one for it.
			w.flush(true)
			if e.queued() > 0 {
				e.wake()
			}
			e.wakeIfClosedAndEmpty()
			return t, false
		}
		if t, ok = w.pop(false); ok {
			return t, true
		}
		w.flush(true)
		e.searching.Add(1)
	}
	for {
		// Spin only while few others do, as the runtime bounds its spinning
		// threads by the processors: a crowd of spinning workers would take
		// the processors from the producers they wait for.
		spins := spinRounds
		if int(e.searching.Load()) > e.maxSpinning {
			spins = 1
		}
		for range spins {
			if t, ok = w.pop(false); ok {
				w.foundWork()
				return t, true
			}
			if e.workers.Load()&exitBit != 0 {
				break
			}
			runtime.Gosched()
		}
		e.searching.Add(-1)
		switch t, r := w.park(); r {
		case gotTask:
			return t, true
		case retire:
			return t, false
		}
		// Woken: a waker counted us as a searcher again. If Resize shrank
		// the pool below the live workers, retire instead and pass the
		// wake on, so the task the waker pushed still finds a worker.
		if e.shrunk() {
			e.searching.Add(-1)
			e.wake()
			e.wakeIfClosedAndEmpty()
			return t, false
		}
	}
}

type parkResult int

const (
	woken parkResult = iota
	gotTask
	retire
)

// leave retires a worker that does not park: the engine keeps no idle
// workers, or it is closed and its queue empty, where a parked worker
// would only wait for Exit to wake it (and hold a sudog meanwhile: one
// allocation per worker of a pool that stops behind a backlog). Its last
// look sees every task queued before it, rather than retire and start
// another worker for a task it could take.
// A producer whose push began before Close, or that finds no searcher
// now, finds room to start a worker, since we have left; and a push made
// before we left is seen by the count below. The caller is no longer
// counted as a searcher.
func (w *worker[T]) leave() (t T, r parkResult) {
	e := w.e
	if t, ok := w.pop(true); ok {
		if e.searching.Load() == 0 && e.queued() > 0 {
			e.wake() // for the tasks behind this one, as park passes a wake on
		}
		return t, gotTask
	}
	e.release(0)
	if e.queued() > 0 {
		e.spawn()
		return t, retire
	}
	e.wakeIfClosedAndEmpty()
	if e.workers.Load()&countMask == 0 {
		e.trim() // there is no reaper to do it
	}
	return t, retire
}

// wakeIfClosedAndEmpty wakes the parked workers of a closed engine whose
// queue is empty, to retire. A worker of a closed engine parks only while
// a task seems queued (a cell that a producer is still filling, or a
// count that overlaps a move), and the wake for that task may go to
// another worker: each worker that retires calls this, so that the last
// one wakes whoever is still parked.
func (e *Engine[T]) wakeIfClosedAndEmpty() {
	if e.closed.Load() && e.idle.n.Load() > 0 && e.queued() == 0 {
		e.idleMu.Lock()
		e.wakeAllParked()
		e.idleMu.Unlock()
	}
}

// park lists the worker as idle and blocks until a producer wakes it or the
// idle timeout retires it. The caller is no longer counted as a searcher.
func (w *worker[T]) park() (t T, r parkResult) {
	e := w.e
	if e.idleTime == 0 {
		return w.leave()
	}
	e.idleMu.Lock()
	if e.exiting {
		e.idleMu.Unlock()
		e.release(0)
		return t, retire
	}
	if e.closed.Load() && e.queued() == 0 {
		// Under idleMu: Close wakes whoever it finds listed. A queued
		// task this worker could not take is in a cell that a producer
		// has claimed and is still filling (or the count overlapped a
		// move): park for its wake, as a worker that left would start
		// another for it, and that one another, until the cell is
		// filled.
		e.idleMu.Unlock()
		return w.leave()
	}
	w.parkedAt = e.now()
	e.idle.push(w)
	e.armReaper(e.idleTime)
	e.idleMu.Unlock()

	if e.testListed != nil {
		e.testListed(w.home)
	}
	// A producer may have pushed after our last scan, seen no searcher and,
	// before we were listed, no idle worker either. Look once more.
	if t, ok := w.pop(true); ok {
		e.idleMu.Lock()
		listed := w.parked
		if listed {
			e.idle.remove(w)
		}
		e.idleMu.Unlock()
		// Whoever left us this task may have left more, and a waker that
		// took us off the list woke us for one of them: pass the wake on,
		// as a searcher that finds work does, or that task waits behind
		// ours while other workers stay parked.
		if !listed {
			// The waker counted us as a searcher: take its go-ahead, then
			// give the count back as foundWork does. (The reaper leaves a
			// worker alone until it is asleep.)
			w.goAhead.pass()
			e.starting.Add(-1)
			w.foundWork()
		} else if e.searching.Load() == 0 && e.queued() > 0 {
			e.wake()
		}
		return t, gotTask
	}

	e.idleMu.Lock()
	if w.parked { // if not, a waker took us: its go-ahead is on its way
		if e.closed.Load() && e.queued() == 0 {
			// Listed on a closed engine for a task that another worker
			// has taken since: nobody would wake us for it. A worker
			// that leaves wakes those it finds listed
			// (wakeIfClosedAndEmpty); one that left before we were
			// listed counted the queue empty first, and so do we now.
			e.idle.remove(w)
			e.idleMu.Unlock()
			return w.leave()
		}
		e.idle.markAsleep(w)
	}
	e.idleMu.Unlock()
	w.goAhead.pass()
	if w.retire { // the reaper took us off the list and our slot with it
		return t, retire
	}
	e.starting.Add(-1)
	return t, woken
}
