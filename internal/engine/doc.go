// Package engine is crew's task scheduler: the queues and the workers that
// drain them. Everything else in crew is a thin layer over it.
//
// # Queues
//
// Producers never hand a task to a particular worker: they append it to
// one of a fixed set of shards (twice GOMAXPROCS, rounded up to a power of
// two, but at most one per eight workers of the limit, so that a small
// pool has one), and workers pull, at a few atomic operations per task
// instead of a wake-up. A producer takes the shards in turn from an offset
// of its own, counting its pushes in a stripe chosen by its stack address
// (spread.go); a worker visits them in the same turn, one task from each.
// A shard keeps its tasks in order: a worker that finds the ring's oldest
// cell claimed by a producer not done filling it leaves the shard, spill
// queue included, until the cell is filled, and takes the other shards'
// tasks meanwhile. So one producer's tasks are taken in order from a
// single shard, and from several shards each is passed by a few later
// ones per shard, unless a producer loses its processor between claiming
// a cell and filling it: while it is off, the other shards' tasks pass
// the ones behind its cell.
//
// A shard is a bounded lock-free ring in which producers and workers write
// separate cache lines, with a fifo under a mutex behind it for backlogs
// (shard.go, fifo.go). While a shard spills, producers append to the fifo
// and workers move it into the ring a ringful at a time, so a backlog
// costs producers a lock per task and workers one per ringful. A producer
// that finds its ring full yields its processor once before it spills,
// but only where the yield soon reaches a worker (yieldBeforeSpill).
//
// A worker takes one task at a time: a batch would be hidden from the
// other workers while its owner is blocked in a task, and a task waiting
// for one of them would deadlock the pool below its limit.
//
// # Waking
//
// Waking follows the Go scheduler's rule (see findRunnable, resetspinning
// and wakep in runtime/proc.go). A worker that finds no task becomes a
// searcher: it scans the shards, yielding between scans, then parks. A
// producer wakes a parked worker, or starts one below the limit, only when
// no worker is searching; the last searcher to find a task wakes another
// while tasks remain queued, so a backlog spreads over the workers after
// the producers stop. A woken or new worker counts as a searcher until it
// finds a task or parks: on saturated processors new workers wait in the
// run queue and hold off further wakes, so tiny tasks run on a few
// workers; when tasks block, new workers run at once, find the backlog,
// and the pool grows toward its limit. A new worker does not count while
// it runs the user's NewRunner, which may take long. At most half of
// GOMAXPROCS searchers spin; the others park after one look.
//
// The race between a worker going to sleep and a producer deciding that
// nobody is searching is closed as the runtime closes it: the worker stops
// counting as a searcher, lists itself as idle, then looks at every shard
// once more, waiting for busy locks; the producer pushes, then reads the
// searcher count and the idle list. With sequentially consistent atomics
// one of them sees the other.
//
// The rule trusts a counted searcher to run, which fails when its
// goroutine gets no processor for long (many runnable goroutines, or a
// processor the host has descheduled): producers would wake nobody while
// tasks wait. So a push that finds a searcher checks for a stall
// (wakeIfStale): the task pushed into the ring before its own still waits
// and none has been taken since the last look; every lateEvery-th push
// also counts a spilling shard, or a woken worker late to start, as one.
// A stall wakes a parked worker, or starts one up to GOMAXPROCS workers,
// each at a bounded rate: searchers waiting for a processor mean busy
// processors, where more new workers would wait too. The check is skipped
// while nobody could be woken, so that a busy pool's producers do not
// read the workers' lines.
//
// # Accounting
//
// Each shard counts the tasks pushed into it and taken from it. Close sets
// a bit in the word producers claim ring cells with, and a flag under the
// fifo's lock, so a task is either refused or counted before Close
// returns. Workers count finished tasks in a word of their own, which
// Stats sums, and publish them to the engine's count when they find no
// more work, every completionBatch tasks and, in a bounded engine, after
// each task; an unbounded engine writes no shared word per finished task.
//
// Unfinished tasks are the pushed count minus the completed and dropped
// ones, the finished counts read first: all only grow, so a zero means
// that every accepted task had finished at one instant. Wait waits for
// that zero, which the worker that finishes the last task sees once it has
// published. It relies on a shard's pushed count being exact, even while a
// worker moves tasks from the fifo into the ring (shard.pushed). Bounded
// engines add one admission count, at most MaxWorkers plus QueueSize;
// producers that find it full wait or fail.
//
// # Pausing
//
// Pause sets a flag that every worker reads before it takes a task, and
// that wakes and starts read before they act: a paused engine's workers
// find nothing, search and park as an idle engine's do, and its producers
// queue without waking anybody. Resume clears the flag and wakes one
// worker, whose finding a task wakes the next, as after any backlog.
//
// # Panics and Goexit
//
// A function deferred at the top of a worker's loop, not one per task,
// recovers a panic, counts the task and reports it to OnPanic; the worker
// then enters the loop again. Without OnPanic the panic crashes the
// program. runtime.Goexit in a task ends the worker's goroutine: the same
// function counts the task, and one a frame further out, in Run, reports
// it to OnGoexit and hands the worker's slot to a replacement. recover
// returns nil for Goexit and, under GODEBUG=panicnil=1, for panic(nil);
// the two are told apart by whether the loop returns.
//
// # Calls from inside a task
//
// Wait from inside one of the engine's tasks would wait for itself, and a
// task that waits for room in its own full engine may wait for room only
// it can free. Go has no goroutine-local storage, so each worker writes
// its engine's number onto its own stack as a run of frames (identity.go),
// and the few paths about to block read the caller's stack: Wait returns
// ErrInWorker, and a push waits for room unless tasks waiting the same way
// hold every worker, when it fails. The read costs a walk of the stack, so
// Wait first gives the tasks a couple of turns to finish; and a caller
// that finds the engine quiet is a worker only inside one of the engine's
// callbacks outside a task (a runner's start or done, the panic handler),
// which a counter tells, so it reads the stack only while one runs
// (InCallback).
//
// # Worker lifecycle and memory
//
// A parked worker waits on a mutex of its own, which its waker unlocks
// exactly once (idle.go): parking allocates nothing. Workers are allocated
// in slabs that grow with the pool (enlist). Idle workers retire after
// IdleTimeout, oldest first and down to MinWorkers, by one timer per
// engine. Once the engine is closed, a worker that finds the queues empty
// retires at once rather than park until Exit, as a parked goroutine holds
// a sudog. Exit waits until every worker goroutine and its runner's done
// function have ended. The rings are allocated with the engine; fifo
// chunks double as a backlog grows, and emptied ones are kept for the next
// burst until a drained queue is trimmed (by the reaper, or by the last
// worker to leave when there is none).
package engine
