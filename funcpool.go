package crew

import (
	"context"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/engine"
)

// A FuncPool runs one function, given to [NewFunc] or [NewFuncWithState],
// on values of type T: Invoke(v) queues v itself, not a closure, so
// submitting allocates nothing. It is the typed counterpart of ants'
// PoolWithFuncGeneric, with the [Pool]'s queue, lifecycle, options and
// observability: [FuncPool.Invoke] waits for room only in a bounded queue,
// [FuncPool.TryInvoke] never waits, [FuncPool.InvokeContext] waits until
// its context ends, [FuncPool.Wait] waits for idle without stopping,
// [FuncPool.Shutdown] drops what its deadline leaves and says how many.
//
// The function's errors go to the handler set [WithErrorHandler] (if any)
// and are counted in [Stats].Failed; a panic goes to the pool's panic
// handler (see [WithPanicHandler]), or crashes the program
// [WithCrashOnPanic]. The function receives the pool's context (see
// [FuncPool.Context]).
//
// A FuncPool must be made with NewFunc or NewFuncWithState; its methods
// are safe for concurrent use. A zero FuncPool's methods report an error
// wrapping [ErrInvalid], as a zero Pool's do.
type FuncPool[T any] struct {
	c poolCore[item[T]]
}

// item is a value in a function pool's queue.
type item[T any] struct {
	v  T
	at int64 // its submission time (clock.Now), when the pool times its tasks
}

// NewFunc returns a pool that runs fn on each value given to
// [FuncPool.Invoke], at most maxWorkers at a time. It takes the same
// options as [New].
//
// NewFunc panics with an error wrapping [ErrInvalid] if maxWorkers is less
// than 1, fn is nil or an option is invalid, like New.
func NewFunc[T any](maxWorkers int, fn func(ctx context.Context, v T) error, opts ...Option) *FuncPool[T] {
	if fn == nil {
		panic(invalidf("crew.NewFunc: nil function"))
	}
	cfg := configure("crew.NewFunc", maxWorkers, opts)
	p := new(FuncPool[T])
	c := &p.c
	call := func(v T) error {
		err := fn(c.ctx, v)
		if err != nil {
			c.fail(err)
		}
		return err
	}
	p.start(cfg, maxWorkers, call, nil)
	return p
}

// start makes the engine of a function pool. Its workers run call, or with
// worker state the call that newCall makes for each worker as it starts
// (with done, run as the worker retires). A call runs the function on a
// value and returns its error, once reported.
func (p *FuncPool[T]) start(cfg config, maxWorkers int, call func(T) error, newCall func() (call func(T) error, done func())) {
	c := &p.c
	c.failOnPanic = true
	timed := cfg.hooks.timed() || cfg.latency // then c.obs is set before a worker starts
	runner := func(call func(T) error) func(item[T]) {
		if timed {
			return func(it item[T]) { runObserved(c.obs, call, it.v, nil, it.at) }
		}
		return func(it item[T]) { call(it.v) }
	}
	var ec engine.Config[item[T]]
	if newCall == nil {
		ec.Run = runner(call)
	} else {
		ec.NewRunner = func() (func(item[T]), func()) {
			call, done := newCall()
			return runner(call), done
		}
	}
	c.start(cfg, maxWorkers, ec, stampItem[T])
}

// stampItem is a function pool's stamp: a value carries its submission
// time, and the worker observes the call as it runs it.
func stampItem[T any](_ *observer, it item[T], _ *Task) item[T] {
	it.at = clock.Now()
	return it
}

// Invoke queues v for the pool's function and returns without waiting for
// it to run. It allocates nothing.
//
// If the queue is bounded and full, Invoke waits for room, or returns
// [ErrQueueFull] on a pool built [WithNonBlocking]. Called from inside one
// of the pool's own calls it waits too, unless every worker is a call
// waiting like it: then no room can ever come, and Invoke returns an error
// wrapping ErrQueueFull. It returns [ErrStopped] once [FuncPool.Stop] or
// [FuncPool.Shutdown] has begun.
func (p *FuncPool[T]) Invoke(v T) error { return p.core().push(item[T]{v: v}, nil) }

// TryInvoke queues v if that needs no waiting, and reports whether it did.
// It returns false when a bounded queue is full and once [FuncPool.Stop]
// or [FuncPool.Shutdown] has begun.
func (p *FuncPool[T]) TryInvoke(v T) bool { return p.core().tryPush(item[T]{v: v}, nil) == nil }

// InvokeContext queues v, waiting while a bounded queue is full until ctx
// ends; it waits even on a pool built [WithNonBlocking]. It returns ctx's
// error if ctx ends first (or has ended), [ErrStopped] once [FuncPool.Stop]
// or [FuncPool.Shutdown] has begun, and an error wrapping [ErrInvalid] for
// a nil ctx.
func (p *FuncPool[T]) InvokeContext(ctx context.Context, v T) error {
	return p.core().pushContext(ctx, item[T]{v: v}, nil)
}

// Wait blocks until no value is queued or being processed, without
// stopping the pool; see [Pool.Wait].
func (p *FuncPool[T]) Wait() { p.core().wait() }

// Pause stops the workers from starting on queued values until
// [FuncPool.Resume]; see [Pool.Pause].
func (p *FuncPool[T]) Pause() { p.core().pause() }

// Resume lets a paused pool's workers take queued values again.
func (p *FuncPool[T]) Resume() { p.core().resume() }

// Paused reports whether the pool is paused; see [Pool.Paused].
func (p *FuncPool[T]) Paused() bool { return p.core().paused() }

// Stop refuses new values ([ErrStopped]), processes every value already
// queued, and returns when every worker has exited (and, with worker
// state, closed its state); see [Pool.Stop].
func (p *FuncPool[T]) Stop() { p.core().stop() }

// Shutdown stops the pool like [FuncPool.Stop], but when ctx ends first it
// cancels the pool's context, drops the queued values and returns a
// [*ShutdownError] with their number. A nil ctx waits like Stop. See
// [Pool.Shutdown].
func (p *FuncPool[T]) Shutdown(ctx context.Context) error { return p.core().shutdown(ctx) }

// Resize changes the worker limit to n; see [Pool.Resize]. Workers beyond
// the limit close their state, if any, as they retire. It returns
// [ErrStopped] once the pool has ended, and an error wrapping [ErrInvalid]
// if n < 1.
func (p *FuncPool[T]) Resize(n int) error { return p.core().resize(n) }

// Stats returns a snapshot of the pool's counters. Failed counts the calls
// of the function that returned an error, panicked or called
// [runtime.Goexit], and the values not processed because their worker's
// state could not be made.
func (p *FuncPool[T]) Stats() Stats { return p.core().stats() }

// Context returns the context the function (and a state constructor)
// receives; see [Pool.Context].
func (p *FuncPool[T]) Context() context.Context { return p.core().context() }

// Done returns a channel that is closed once the pool will process none of
// the values it has queued; see [Pool.Done].
func (p *FuncPool[T]) Done() <-chan struct{} { return p.core().done() }

// Name returns the name given [WithName], or "".
func (p *FuncPool[T]) Name() string { return p.core().poolName() }

// Latency returns the queue-wait and run-time histograms of a pool built
// [WithLatency], and false for any other pool.
func (p *FuncPool[T]) Latency() (LatencySnapshot, bool) { return p.core().latency() }

// core returns p's core, nil for a nil FuncPool.
func (p *FuncPool[T]) core() *poolCore[item[T]] {
	if p == nil {
		return nil
	}
	return &p.c
}
