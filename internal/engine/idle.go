package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/clock"
)

// A parked worker waits at a gate of its own (worker.goAhead), which is
// shut whenever no go-ahead is pending: a waker that takes the worker off
// the idle list opens it, exactly once, and the worker shuts it again as
// it passes. Unlike a channel and a timer per worker, this costs no
// allocation, and parking resets no timer.
//
// Idle workers retire after the idle timeout. One timer per engine, the
// reaper, serves them all: the idle list is ordered by the time of parking,
// so the reaper retires from the oldest end and sleeps until the next one
// is due.

// now reads crew's monotonic clock (package clock), in nanoseconds.
func (e *Engine[T]) now() int64 { return clock.Now() }

// armReaper makes sure the reaper runs within d. Called with e.idleMu held.
func (e *Engine[T]) armReaper(d time.Duration) {
	if e.reaperArmed {
		return
	}
	e.reaperArmed = true
	if e.reaper == nil {
		e.reaper = time.AfterFunc(d, e.reap)
	} else {
		e.reaper.Reset(d)
	}
}

// reap retires the workers parked for the idle timeout or longer, oldest
// first and down to MinWorkers, then sleeps until the next one is due. It
// runs on the reaper timer's goroutine, which also gives back the memory of
// drained spill queues: the spill queues keep their chunks for the next
// burst, and the reaper runs about once per idle timeout while workers
// park.
func (e *Engine[T]) reap() {
	e.trim()
	defer e.keepMinimum() // the limit it read may have grown since (see shrunk)
	e.idleMu.Lock()
	defer e.idleMu.Unlock()
	e.reaperArmed = false
	for w := e.idle.tail; w != nil; w = e.idle.tail {
		due := time.Duration(w.parkedAt + int64(e.idleTime) - e.now())
		if !w.asleep {
			// Still taking its last look at the queues: it may be about to
			// run a task, so its slot is not ours to take yet.
			due = max(due, e.idleTime/8, time.Microsecond)
		}
		if due > 0 {
			e.armReaper(due)
			return
		}
		keep := min(e.minWorkers, e.maxWorkers.Load())
		if e.closed.Load() {
			keep = 0 // a closed engine keeps no minimum (see keepMinimum)
		}
		if !e.release(keep) {
			return // at the minimum: the rest stay parked
		}
		e.idle.remove(w)
		w.retire = true
		w.goAhead.open()
	}
}

// trim gives back the memory of the spill queues that have drained.
func (e *Engine[T]) trim() {
	for i := range e.shards {
		e.shards[i].trim()
	}
}

// idleList is a doubly linked list of parked workers, most recently parked
// first. Wakers take the head, whose stack and caches are warmest; the
// reaper takes the tail.
type idleList[T any] struct {
	head, tail *worker[T]
	n          atomic.Int32 // read without the lock to skip it when empty
	asleep     atomic.Int32 // listed workers past their last look (Stats.Idle)
}

// markAsleep records that w, listed, is past its last look at the queues: only
// a wake-up, which checks the worker limit, sets it running again.
func (l *idleList[T]) markAsleep(w *worker[T]) {
	w.asleep = true
	l.asleep.Add(1)
}

func (l *idleList[T]) push(w *worker[T]) {
	w.idlePrev, w.idleNext = nil, l.head
	if l.head != nil {
		l.head.idlePrev = w
	} else {
		l.tail = w
	}
	l.head = w
	w.parked, w.asleep = true, false
	l.n.Add(1)
}

func (l *idleList[T]) pop() *worker[T] {
	w := l.head
	if w != nil {
		l.remove(w)
	}
	return w
}

func (l *idleList[T]) remove(w *worker[T]) {
	if w.idlePrev != nil {
		w.idlePrev.idleNext = w.idleNext
	} else {
		l.head = w.idleNext
	}
	if w.idleNext != nil {
		w.idleNext.idlePrev = w.idlePrev
	} else {
		l.tail = w.idlePrev
	}
	w.idlePrev, w.idleNext = nil, nil
	if w.asleep {
		l.asleep.Add(-1)
	}
	w.parked, w.asleep = false, false
	l.n.Add(-1)
}

// A gate is a worker's go-ahead: a binary semaphore, shut at first, that a
// waker opens and the worker passes, shutting it behind it. The worker
// waits in sync.Cond.Wait, which a testing/synctest bubble counts as
// durably blocked (a wait in Mutex.Lock it does not), so that a bubble
// whose workers are parked lets its clock advance. A gate must not be
// copied once used.
type gate struct {
	mu     sync.Mutex
	opened sync.Cond // on mu
	isOpen bool
}

// open lets the worker pass: once, whether it waits already or not.
func (g *gate) open() {
	g.mu.Lock()
	g.isOpen = true
	g.mu.Unlock()
	g.opened.Signal()
}

// pass waits until the gate is open, then shuts it.
func (g *gate) pass() {
	g.mu.Lock()
	if g.opened.L == nil {
		g.opened.L = &g.mu
	}
	for !g.isOpen {
		g.opened.Wait()
	}
	g.isOpen = false
	g.mu.Unlock()
}
