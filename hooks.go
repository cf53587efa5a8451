package crew

import "time"

// Hooks are functions that a pool built [WithHooks] calls when something
// happens to its tasks and workers: a [Pool], or a function pool
// ([FuncPool]), for which a task is one call of its function. Every field
// is optional: a nil hook costs nothing, and a pool with no hooks at all
// runs exactly the code it would without WithHooks.
//
// Hooks run synchronously on the goroutine where the event happens (the
// worker, for task and worker events; the submitter, for a refused task),
// so they must be fast, must not block and must be safe for concurrent
// use: several workers call them at once. They must not panic: a panic in
// a task hook is handled like a panic in its task, one in Drop reaches
// the submitter (or [Pool.Shutdown]'s caller, once the drop is complete,
// with the calls for the tasks after it skipped), and one in WorkerStart
// or WorkerRetire crashes the program.
//
// Task hooks see the tasks submitted with every form of [Pool.Go] and
// [Pool.Submit], and a function pool's calls. A [Group], [ResultGroup],
// [Stream] or [Map] runs its tasks inside steps it submits to the pool, so
// for those the hooks see the steps (one or more group tasks each); time a
// group's own tasks with [Latency.Track]. [Keyed], [Priority] and
// [RateLimited] submit steps too. A step that the pool refuses fires Drop,
// but the group's or layer's task is not lost: it stays queued there for a
// later step, or its submitter gets the error.
type Hooks struct {
	// TaskStart is called on the worker just before a task runs. Wait is
	// how long the task waited since it was submitted.
	TaskStart func(TaskEvent)
	// TaskFinish is called on the worker when a task has returned,
	// panicked or called runtime.Goexit, with Wait, Run (the time from
	// start to finish) and Err: nil for a Go task that returned, the
	// returned error of a Submit task or a function pool's call, a
	// *PanicError, or ErrGoexit. The
	// pool counts the task as finished (for Wait, Stop and Stats) only
	// after TaskFinish returns, but a Submit task's own Wait may return
	// first.
	TaskFinish func(TaskEvent)
	// Panic is called, before TaskFinish, for a task that panicked, with
	// Err the *PanicError. For a Go task or a function pool's call it
	// comes before the pool's panic handler; a Submit task's Wait also
	// returns it.
	// A pool built WithCrashOnPanic recovers nothing, so Panic is not
	// called: TaskFinish sees ErrGoexit as the panic unwinds, then the
	// program crashes.
	Panic func(TaskEvent)
	// Drop is called for each task that will never run: refused on
	// submission because the queue was full (Err wraps ErrQueueFull: test
	// it with errors.Is) or the pool was stopping (ErrStopped), or dropped
	// by Shutdown (ErrDropped; Wait is then zero). A dropped task is
	// reported on Shutdown's goroutine, or on the worker that was taking
	// it as Shutdown dropped it. A nil task, a zero pool, a Context form
	// whose context ended and a Task that Task.Cancel kept from starting
	// are not drops.
	Drop func(TaskEvent)
	// WorkerStart is called on a new worker goroutine before it takes its
	// first task.
	WorkerStart func(WorkerEvent)
	// WorkerRetire is called on a worker goroutine as it exits: after the
	// idle timeout, a Resize, the end of Stop or Shutdown, or a task's
	// runtime.Goexit (the pool then starts a replacement if tasks wait or
	// WithMinWorkers wants one). Lifetime is how long the worker lived.
	WorkerRetire func(WorkerEvent)
}

// TaskEvent describes a task to a [Hooks] function. Fields that do not
// apply to an event are zero.
type TaskEvent struct {
	Pool string        // the pool's name (WithName), or ""
	Wait time.Duration // time from submission to start
	Run  time.Duration // time from start to finish (TaskFinish, Panic)
	Err  error         // see the hook
}

// WorkerEvent describes a worker to a [Hooks] function.
type WorkerEvent struct {
	Pool     string        // the pool's name (WithName), or ""
	Lifetime time.Duration // WorkerRetire: time since the worker started
}

// timed reports whether any hook needs each task's times.
func (h *Hooks) timed() bool {
	return h.TaskStart != nil || h.TaskFinish != nil || h.Panic != nil
}
