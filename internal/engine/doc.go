// Package engine is crew's task scheduler: the queues and the workers that
// drain them. Everything else in crew is a thin layer over it.
//
// # Algorithm
//
// Producers never hand a task to a particular worker; they append it to one
// of a small set of shards (twice GOMAXPROCS, rounded up to a power of two),
// picked by hashing a count of the producer's pushes, which spreads them
// more evenly than a random pick, at under half its cost (spread.go).
// Workers pull: each looks first at the shard where it last found a task
// and takes from the others when that is empty. Handing a task to a parked goroutine costs a
// wake-up per task (about 250 ns); pulling costs a few atomic operations,
// which is why crew pulls. What is left of a tiny task's cost is moving
// cache lines between cores, so a shard is a lock-free ring in which
// producers and workers write separate lines, with a locked spill queue
// behind it for backlogs (shard.go): on two cores a tiny task costs 26-44
// ns this way, against 45-73 with a lock around each shard. A producer
// that finds its ring full yields its processor once before it spills,
// where the yield soon reaches a worker: only while tasks are short, on
// at most two processors (GOMAXPROCS when the engine was made), and at
// the worker limit or while the program has few goroutines
// (yieldBeforeSpill). On more processors the workers are more often
// running already, and the yield's trip through the runtime's global run
// queue, under a lock every processor takes, costs more than the spill.
// A worker takes one task at a time: a batch taken from a shard would be
// hidden from the other workers while its owner is blocked in a task, and
// a task waiting for one of them would deadlock the pool below its limit.
//
// Waking is the expensive part, so it follows the Go scheduler's rule (see
// findRunnable, resetspinning and wakep in runtime/proc.go): a worker that
// finds no task becomes a searcher, spins for a short while yielding the
// processor, then parks on a mutex of its own. After a push, a producer wakes a
// parked worker, or starts a new one below the limit, only when no worker
// is searching; a searcher that finds a task wakes the next one while tasks
// remain queued, so a backlog spreads over workers even after the producers
// stop. A woken or new worker counts as a searcher until it has run and
// found a task: while the processors are saturated new workers wait in the
// run queue, keep the count up and stop further wakes, so tiny tasks run on
// a few workers; when tasks block (sleep, I/O), new workers run at once,
// find the backlog and the pool grows towards its limit. (A new worker
// that first runs the user's code to make its state, NewRunner, stops
// counting while it does: that code may take long, and other workers start
// meanwhile.) At most half of GOMAXPROCS searchers spin at a time; the
// others park after one look.
//
// Counting a woken or spinning worker as a searcher fails when its
// goroutine does not get a processor for long (a million runnable
// producers, or a processor the host has descheduled while the searcher sat
// in its run queue): producers would wake nobody while the backlog grows.
// So every push into a shard checks for that: the task pushed into it
// before still waits and nobody has taken one since the last check; and
// every 16th, a woken worker that has not started while no wake has
// succeeded for 100 µs, or a shard spilling a backlog. It then wakes one
// more worker: a parked one at most once per 10 µs, a new one at most once
// per 100 µs and only up to GOMAXPROCS workers (as it was when the engine
// was made), as searchers that wait for a processor mean busy processors,
// where a new worker would wait too. A check first reads the parked and
// live worker counts and stops when it could wake nobody (no worker parked,
// and GOMAXPROCS workers, or the limit if lower, live), as in a busy pool;
// skipping the rest there made tiny tasks 3.5-10% cheaper. The stall check
// then looks at the ring cell before the one the producer has just written,
// and reads the shard's count of taken tasks (a line the workers write)
// only when that task still waits, so it is cheap while the workers keep
// up. The check's spacing sets the p99 queue wait at half load: checking
// every 16th push for a run of undrained pushes, 130 µs; every 4th push for
// a task three pushes back, 44-94 µs; every push, 14-22 µs, at no cost to
// busy producers since the skip above (before it, reading the taken count
// at every 4th push cost 3-9 ns per task).
//
// The race between a worker going to sleep and a producer deciding nobody is
// searching is closed like the runtime closes it: the worker first stops
// counting itself as a searcher and registers as idle, then looks at the
// queues once more; the producer first pushes, then reads the searcher count
// and the idle list. With sequentially consistent atomics one of them sees
// the other.
//
// # Accounting
//
// Each shard counts the tasks pushed into it and taken from it. Close marks
// a shard closed in the word producers claim ring cells with, and under the
// spill queue's lock, so a task is either refused or counted before Close
// returns: no task is lost between a check and a push. Workers count
// completions locally and publish them when they run out of work (or every
// completionBatch tasks), so in an unbounded engine no word shared by all
// producers and workers is written per task. Each also keeps an exact count
// in a word of its own, which Stats sums over the live workers, so that a
// worker blocked in a long task does not hide the tasks it has finished.
// Unfinished tasks are the pushed count minus completed and dropped, read
// finished-first: both only grow, so a zero means every accepted task had
// finished at one instant, which is what Wait and Stop wait for.
//
// Bounded engines add one admission counter, kept below MaxWorkers plus the
// queue size; producers that find it full wait on a signal or fail.
//
// Panics are recovered once per worker loop, not once per task: a deferred
// function at the top of the loop reports the panic and the worker re-enters
// the loop. runtime.Goexit in a task ends that worker's goroutine; the same
// deferred function accounts for the task, and one a frame further out
// starts a replacement once the goroutine is known to be ending: under
// GODEBUG=panicnil=1 a panic(nil) also recovers as nil, but returns.
//
// # Calls from inside a task
//
// Wait from inside one of the engine's tasks would wait for itself, and a
// task that waits for room in its own full engine may wait for room only
// it can free. Go has no goroutine-local storage to recognise such a
// caller, so each worker writes its engine's number onto its own stack as
// a run of frames (see identity.go); the few paths about to block read the
// caller's stack. Wait then reports ErrInWorker, and a push waits for room
// unless every worker is a task waiting the same way, when it fails.
//
// A parked worker waits on a mutex of its own rather than a channel and a
// timer, so starting a worker allocates only the worker and its goroutine,
// and workers are allocated in slabs that grow with the pool (enlist):
// a burst of thousands of starts costs one allocation per 64 workers.
// Idle workers retire after an idle timeout, down to a minimum: one timer
// per engine retires them oldest first (idle.go). Once the engine is
// closed, a worker that finds the queue empty retires at once instead of
// parking until Exit (leave): a parked goroutine holds a sudog, one more
// allocation per worker of a pool stopped behind a backlog. The rings are allocated
// with the engine. Spill queue chunks double in size as a backlog grows,
// so a backlog of n tasks costs about log2(n) allocations; emptied chunks
// are kept for the next burst, and the same timer gives them back once
// the queue has drained (fifo.go).
package engine
