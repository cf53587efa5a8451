// Package engine is crew's task scheduler: the queues and the workers that
// drain them. Everything else in crew is a thin layer over it.
//
// # Algorithm
//
// Producers never hand a task to a particular worker; they append it to one of
// a small set of shards, each a mutex-guarded chunked FIFO, picked at random
// (a cheap per-thread generator), so that producers on different cores rarely
// meet on one lock. Workers pull: each starts at its home shard and steals
// from the others when that is empty. Handing a task to a parked goroutine
// costs a wake-up per task (about 250 ns); pulling costs a lock and an unlock
// (about 5 ns), which is why crew pulls.
//
// Waking is the expensive part, so it follows the Go scheduler's rule (see
// findRunnable and wakep in runtime/proc.go): a worker that finds no task
// becomes a searcher, spins for a short while, then parks on its own channel.
// After a push, a producer wakes a parked worker, or starts a new one below the
// limit, only when no worker is searching. A woken or new worker counts as a
// searcher until it has run and found a task, so while the CPUs are saturated
// new workers wait in the run queue, keep the searcher count up and stop
// further wakes: the pool stays near GOMAXPROCS workers for tiny tasks. When
// tasks block (sleep, I/O), new workers run at once, find the backlog and
// the pool grows towards its limit as fast as tasks arrive.
//
// The race between a worker going to sleep and a producer deciding nobody is
// searching is closed like the runtime closes it: the worker first stops
// counting itself as a searcher and registers as idle, then looks at the
// queues once more; the producer first pushes, then reads the searcher count
// and the idle list. With sequentially consistent atomics one of them sees the
// other.
//
// # Accounting
//
// One atomic word holds the number of unfinished tasks (queued or running) and
// a closed bit. Accepting a task adds one to it, and the same instruction
// reports whether the engine was already closed, so a task is either refused or
// counted before Stop can observe an idle engine: no task is lost between
// the check and the push. Workers count completions locally and subtract them
// in one step when they run out of work (or every completionBatch tasks), so
// the shared word is touched once per burst rather than once per task. When it
// reaches zero, waiters in Wait and Stop are woken.
//
// Panics are recovered once per worker loop, not once per task: a deferred
// function at the top of the loop reports the panic and the worker re-enters
// the loop. runtime.Goexit in a task ends that worker's goroutine; the same
// deferred function accounts for the task and starts a replacement.
//
// Idle workers retire after an idle timeout, down to a minimum. A drained
// shard keeps one chunk and one spare, so the memory of a burst is returned.
package engine
