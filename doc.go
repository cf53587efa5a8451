// Package crew runs work concurrently under control: a bounded pool of
// reusable worker goroutines with a queue in front of it, groups with
// typed results and errors, and layers that run tasks in order per key,
// by priority or at a bounded rate.
//
//	p := crew.New(64)    // at most 64 tasks run at once
//	defer p.Stop()       // refuse new work, run what is queued, wait
//	p.Go(func() { ... }) // fire and forget: Go allocates nothing
//	t := p.Submit(func(ctx context.Context) error { ... })
//	err := t.Wait()      // the task's error, or a *PanicError
//
// # One grammar
//
// Every type that accepts work offers the same three forms:
//
//   - the plain call ([Pool.Go], [Pool.Submit], [FuncPool.Invoke],
//     [Keyed.Go], ...) waits for room when a bounded queue is full, or
//     fails with [ErrQueueFull] on a pool built [WithNonBlocking];
//   - the Try form ([Pool.TryGo], [Pool.TrySubmit], [FuncPool.TryInvoke],
//     ...) never waits, and reports whether the work was taken;
//   - the Context form ([Pool.GoContext], [Pool.SubmitContext],
//     [FuncPool.InvokeContext], ...) waits until its context ends.
//
// Go takes a func() and reports only whether the task was queued; Submit
// takes a func(context.Context) error and returns a [Task] to wait on;
// the generic [Submit] returns a typed [Future]. A [Group], whose Go never
// waits, has a TryGo with errgroup's meaning: start only within the
// group's limit.
//
// One [Option] type configures every pool ([New], [NewFunc],
// [NewFuncWithState]); groups take a [GroupOption], and the layers their
// own ([KeyedOption], [PriorityOption]). No option panics when called: the
// constructor that is given an invalid or nil option panics with an error
// wrapping [ErrInvalid] that names it, as make does for a negative size,
// and the functions that return an error ([Map], [ForEach], ...) return
// that error instead.
//
// # Stopping
//
// [Pool.Wait] waits until the pool is idle and leaves it running.
// [Pool.Stop] refuses new work ([ErrStopped]), runs everything queued and
// returns when every worker has exited. [Pool.Shutdown] does the same but,
// when its context ends, cancels the tasks' context, drops the tasks that
// have not started and reports exactly how many in a [*ShutdownError].
// Groups and layers drop what they hold for a pool that has ended, and
// report it: nothing accepted is lost without a trace.
//
// From inside one of the pool's own tasks, where waiting for the pool means
// waiting for the caller too, these calls do not hang: Wait panics with an
// error wrapping [ErrInsideTask], Stop closes the pool and returns at once,
// Shutdown closes it and returns ErrInsideTask. Go and Submit from inside
// a task wait for room like any caller, unless every worker is a task
// doing the same; then they fail with ErrQueueFull. The Wait of a [Keyed],
// [Priority] or [RateLimited] likewise panics with ErrInsideTask when
// called from inside one of that layer's own tasks; any other task may
// wait for a layer.
//
// # Panics
//
// A panic in a task is recovered by default: a Submit task's Wait returns
// it as a [*PanicError] with the stack; a Go task's goes to the handler
// set [WithPanicHandler] (by default it is logged). [WithCrashOnPanic]
// lets panics crash the program instead. A task that calls [runtime.Goexit]
// ends its worker, which is replaced as work needs; its Task reports
// [ErrGoexit].
//
// # Groups, results and layers
//
// [Group] runs related tasks on a pool with errgroup's semantics: the
// first error cancels the group's context and tasks still queued for it
// never start. [ResultGroup], [Map], [MapErr] and [ForEach] (and their
// [iter.Seq] forms) return results in submission order; [Stream] runs tasks
// concurrently and their callbacks one at a time, in order. A group never
// holds a pool worker while it waits for its own limit, and its Wait runs
// queued tasks itself in a slot of the pool's, so groups nest on one pool
// without deadlock and never run more tasks at once than the pool's limit.
//
// [Keyed] runs the tasks of one key one at a time, in order; [Priority]
// starts the most urgent task first, with aging; [RateLimited] starts
// tasks at a bounded rate. Each runs on an [Executor] (a pool, or a
// RateLimited), so they stack.
//
// # Observability
//
// Every option here is off by default, and a pool without them runs the
// same code. [WithName] labels a pool's workers for [runtime/pprof] and
// [runtime/trace]; [WithHooks] calls functions on task start and finish,
// panics, drops and worker start and retirement ([Hooks]); [WithLatency]
// keeps queue-wait and run-time histograms; [WithLogger] logs through
// [log/slog]. Hooks and histograms cost a few clock reads per task (and,
// on a Pool, one allocation).
//
// # Cost
//
// Go allocates nothing and costs tens of nanoseconds per task, whether the
// pool allows 2 or 200,000 workers: workers pull tasks from one queue (or,
// in pools of 16 workers or more, sharded queues) instead of being handed
// each one, and a new worker is woken only when none is already looking
// for work, so tiny tasks run on a few workers while blocking tasks grow
// the pool towards its limit. Submit costs three small allocations for its
// Task. BENCHMARKS.md has the measurements and the commands that make
// them.
package crew
