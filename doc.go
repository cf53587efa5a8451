// Package crew runs work concurrently under control: a bounded pool of
// reusable worker goroutines with a queue in front of it.
//
//	p := crew.New(64)          // at most 64 tasks run at once
//	defer p.Stop()             // refuse new work, run what is queued, wait
//	p.Go(func() { ... })       // fire and forget: Go itself allocates nothing
//	t := p.Submit(func(ctx context.Context) error { ... })
//	err := t.Wait()            // the task's error, or a *PanicError
//
// # Submitting
//
// Go, TrySubmit and SubmitCtx take a func(); Submit takes a
// func(context.Context) error and returns a Task to wait on. The queue is
// unbounded unless WithQueueSize bounds it; then Go and Submit wait for
// room, TrySubmit never waits (it reports false), SubmitCtx waits until its
// context ends, and WithNonBlocking makes Go and Submit fail fast with
// ErrQueueFull (SubmitCtx still waits).
//
// # Stopping
//
// Wait waits until the pool is idle and leaves it running. Stop refuses new
// work (ErrStopped), runs everything queued and returns when every worker
// has exited. Shutdown does the same but, when its context ends, cancels the
// tasks' context, drops the tasks that have not started and reports exactly
// how many in a *ShutdownError.
//
// From inside one of the pool's own tasks, where waiting for the pool means
// waiting for the caller too, these calls do not hang: Wait panics with an
// error wrapping ErrInsideTask, Stop closes the pool and returns at once,
// Shutdown closes it and returns ErrInsideTask. Go and Submit from inside a
// task wait for room like any caller, unless every worker is a task doing
// the same; then they fail with ErrQueueFull. The Wait of a Keyed, Priority
// or RateLimited likewise panics with ErrInsideTask when called from inside
// one of that layer's own tasks (a RateLimited's include the steps of the
// layers built on it); any other task may wait for a layer.
//
// # Panics
//
// A panic in a task is recovered by default: a Submit task's Wait returns it
// as a *PanicError with the stack; for the other entry points it goes to the
// handler set WithPanicHandler (by default it is logged). WithCrashOnPanic
// lets panics crash the program instead. A task that calls runtime.Goexit
// ends its worker, which is replaced as work (or WithMinWorkers) needs;
// its Task reports ErrGoexit.
//
// # Groups and results
//
// Group runs related tasks on a pool with errgroup's semantics: the first
// error cancels the group's context and tasks still queued for it never
// start. ResultGroup, Map, MapErr and ForEach (and their iter.Seq forms)
// return results in submission order; Do returns a typed Future; Stream
// runs tasks concurrently and their callbacks one at a time, in order.
// A group never holds a pool worker while it waits for its own limit.
//
// # Observability
//
// Every option here is off by default, and a pool without them runs the
// same code. WithName labels a pool's workers for pprof and runtime/trace;
// WithHooks calls functions on task start and finish, panics, drops and
// worker start and retirement; WithLatency keeps queue-wait and run-time
// histograms (Pool.Latency); WithLogger logs through log/slog. Hooks and
// latency cost about 100-150 ns and one allocation per task.
//
// # Costs
//
// Go allocates nothing and costs tens of nanoseconds per task (19-25 ns
// on two cores in the dispatch benchmark in quiet minutes, 30-70 in slower
// ones, up to about 90 while the shared VM passes cache lines between its
// cores slowly; whether the pool allows 2 or 200,000 workers): workers
// pull tasks from sharded queues instead of being handed each one, and a
// new worker is woken only when none is already looking for work, so tiny
// tasks run on a few workers while blocking tasks grow the pool towards
// its limit. A queued Go task costs about 8.4 bytes of heap. Submit costs
// three small allocations for its Task. BENCHMARKS.md has the
// measurements and the commands that made them.
package crew
