package crew

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
)

// A FuncPool runs one function, given to NewFunc, on values of type T:
// Invoke(v) queues v itself, not a closure, so submitting allocates
// nothing. It is the typed counterpart of ants' PoolWithFuncGeneric, with
// the Pool's queue, lifecycle and panic policy: Invoke waits for room only
// in a bounded queue, Wait waits for idle without stopping, Shutdown drops
// what its deadline leaves and says how many.
//
// The function's errors go to the handler set WithErrorHandler (if any)
// and are counted in Stats().Failed; a panic goes to the pool's panic
// handler (see WithPanicHandler), or crashes the program WithCrashOnPanic.
// The function receives the pool's context (see Context).
//
// A FuncPool must be made with NewFunc; its methods are safe for concurrent
// use.
type FuncPool[T any] struct {
	c funcCore[T]
}

// A FuncOption configures a FuncPool or a WorkerPool: every Option that
// configures a Pool is also a FuncOption, and so is WithErrorHandler.
type FuncOption interface {
	applyFunc(*funcConfig)
}

type funcConfig struct {
	config
	onError func(error)
}

func (o Option) applyFunc(c *funcConfig) { o(&c.config) }

type errorHandler func(error)

func (h errorHandler) applyFunc(c *funcConfig) { c.onError = h }

// WithErrorHandler sets the function that receives the non-nil errors
// returned by a FuncPool's or WorkerPool's function (and, for a
// WorkerPool, the errors of its state constructor). It runs on the worker
// that ran the task, before that worker takes another task; it may be
// called from several workers at once. Without it, errors are only counted
// in Stats().Failed. WithErrorHandler panics with an error wrapping
// ErrInvalid if h is nil.
func WithErrorHandler(h func(error)) FuncOption {
	if h == nil {
		panic(fmt.Errorf("%w: WithErrorHandler(nil)", ErrInvalid))
	}
	return errorHandler(h)
}

// NewFunc returns a pool that runs fn on each value given to Invoke, at
// most maxWorkers at a time. It accepts the Pool's Options that shape the
// queue and the workers (WithQueueSize, WithNonBlocking, WithIdleTimeout,
// WithMinWorkers, WithPanicHandler, WithCrashOnPanic, WithContext) and
// WithErrorHandler.
//
// NewFunc panics with an error wrapping ErrInvalid if maxWorkers is less
// than 1, fn is nil or an option is invalid, like New; the observability
// options (WithName, WithHooks, WithLatency, WithLogger), which a FuncPool
// does not support yet, are invalid here.
func NewFunc[T any](maxWorkers int, fn func(ctx context.Context, v T) error, opts ...FuncOption) *FuncPool[T] {
	if fn == nil {
		panic(fmt.Errorf("%w: NewFunc: nil function", ErrInvalid))
	}
	p := new(FuncPool[T])
	c := &p.c
	fc := c.configure("NewFunc", maxWorkers, opts)
	ctx, fail := c.ctx, c.fail
	c.start(maxWorkers, fc, engine.Config[T]{
		Run: func(v T) {
			if err := fn(ctx, v); err != nil {
				fail(err)
			}
		},
	})
	return p
}

// Invoke queues v for the pool's function and returns without waiting for
// it to run. It allocates nothing (beyond what a growing queue needs, once)
// and costs about what Pool.Go does: BENCHMARKS.md compares it with ants'
// PoolWithFuncGeneric.Invoke.
//
// If the queue is bounded and full, Invoke waits for room, or returns
// ErrQueueFull WithNonBlocking. It returns ErrStopped once Stop or Shutdown
// has begun.
func (p *FuncPool[T]) Invoke(v T) error { return p.core().invoke(v) }

// TryInvoke queues v if that needs no waiting, and reports whether it did.
// It returns false when a bounded queue is full and after Stop or Shutdown
// has begun.
func (p *FuncPool[T]) TryInvoke(v T) bool { return p.core().tryInvoke(v) }

// InvokeCtx queues v, waiting while a bounded queue is full. It gives up
// with ctx's error when ctx ends first, or is already done; it waits even
// WithNonBlocking. It returns ErrStopped once Stop or Shutdown has begun,
// and an error wrapping ErrInvalid for a nil ctx.
func (p *FuncPool[T]) InvokeCtx(ctx context.Context, v T) error {
	return p.core().invokeCtx(ctx, v)
}

// Wait blocks until no value is queued or being processed, without
// stopping the pool. See Pool.Wait.
func (p *FuncPool[T]) Wait() { p.core().wait() }

// Stop refuses new values (ErrStopped), processes every value already
// queued, and returns when every worker has exited. See Pool.Stop.
func (p *FuncPool[T]) Stop() { p.core().stop() }

// Shutdown stops the pool like Stop, but when ctx ends first it cancels the
// pool's context, drops the queued values and returns a *ShutdownError
// with their number. A nil ctx waits like Stop. See Pool.Shutdown.
func (p *FuncPool[T]) Shutdown(ctx context.Context) error { return p.core().shutdown(ctx) }

// Resize changes the worker limit to n; see Pool.Resize. It returns an
// error wrapping ErrInvalid if n < 1.
func (p *FuncPool[T]) Resize(n int) error { return p.core().resize(n) }

// Stats returns a snapshot of the pool's counters. Failed counts the calls
// of the function that returned an error, panicked or called
// runtime.Goexit.
func (p *FuncPool[T]) Stats() Stats { return p.core().stats() }

// Context returns the context the function receives: cancelled when
// Shutdown's deadline passes, when Stop or Shutdown returns and when the
// parent given WithContext is cancelled.
func (p *FuncPool[T]) Context() context.Context { return p.core().context() }

func (p *FuncPool[T]) core() *funcCore[T] {
	if p == nil {
		return nil
	}
	return &p.c
}

// funcCore is what FuncPool and WorkerPool share: an engine whose queue
// holds values of type T, and the Pool's lifecycle around it. Its methods
// accept a nil or zero receiver and report errZeroFuncPool.
type funcCore[T any] struct {
	e           *engine.Engine[T]
	ctx         context.Context
	cancel      context.CancelFunc
	nonBlocking bool
	crash       bool
	onPanic     func(*PanicError)
	onError     func(error)
	failed      atomic.Uint64
	exited      func() // if set, called after the engine's Exit (see WorkerPool)
}

// errZeroFuncPool is returned by the methods of a FuncPool or WorkerPool not
// made by its constructor.
var errZeroFuncPool = fmt.Errorf("%w: FuncPool and WorkerPool must be made with NewFunc and NewWorkerPool", ErrInvalid)

// configure validates the options like New and sets c up to the engine,
// which start makes.
func (c *funcCore[T]) configure(what string, maxWorkers int, opts []FuncOption) funcConfig {
	if maxWorkers < 1 {
		panic(fmt.Errorf("%w: crew.%s(%d): worker limit must be at least 1", ErrInvalid, what, maxWorkers))
	}
	fc := funcConfig{config: defaultConfig()}
	for _, o := range opts {
		if f, isOpt := o.(Option); o == nil || isOpt && f == nil {
			panic(fmt.Errorf("%w: crew.%s: nil option", ErrInvalid, what))
		}
		o.applyFunc(&fc)
	}
	fc.check(maxWorkers)
	if h := &fc.hooks; fc.name != "" || fc.latency || fc.logger != nil || h.timed() || h.Drop != nil || h.WorkerStart != nil || h.WorkerRetire != nil {
		// Rather than let them be ignored without a word.
		panic(fmt.Errorf("%w: crew.%s: WithName, WithHooks, WithLatency and WithLogger apply to a Pool, not yet to a FuncPool or WorkerPool", ErrInvalid, what))
	}
	c.nonBlocking, c.crash, c.onPanic, c.onError = fc.nonBlocking, fc.crash, fc.onPanic, fc.onError
	c.ctx, c.cancel = context.WithCancel(fc.ctx)
	return fc
}

// start makes the engine; cfg holds Run or NewRunner.
func (c *funcCore[T]) start(maxWorkers int, fc funcConfig, cfg engine.Config[T]) {
	cfg.MaxWorkers = maxWorkers
	cfg.MinWorkers = fc.minWorkers
	cfg.QueueSize = fc.queueSize
	cfg.IdleTimeout = fc.idleTimeout
	if !c.crash {
		cfg.OnPanic = func(_ T, v any, stack []byte) {
			c.failed.Add(1)
			c.onPanic(&PanicError{Value: v, Stack: stack})
		}
	}
	cfg.OnGoexit = func(T) { c.failed.Add(1) }
	c.e = engine.New(cfg)
}

// fail records an error of the function. The handler runs first: should it
// panic or call runtime.Goexit, the engine counts the failure instead.
func (c *funcCore[T]) fail(err error) {
	if c.onError != nil {
		c.onError(err)
	}
	c.failed.Add(1)
}

func (c *funcCore[T]) invoke(v T) error {
	switch {
	case c == nil || c.e == nil:
		return errZeroFuncPool
	case c.nonBlocking:
		return c.e.TryPush(v)
	}
	return c.e.Push(nil, v)
}

func (c *funcCore[T]) tryInvoke(v T) bool {
	return c != nil && c.e != nil && c.e.TryPush(v) == nil
}

func (c *funcCore[T]) invokeCtx(ctx context.Context, v T) error {
	switch {
	case c == nil || c.e == nil:
		return errZeroFuncPool
	case ctx == nil:
		return fmt.Errorf("%w: InvokeCtx: nil context", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.e.Push(ctx, v)
}

func (c *funcCore[T]) wait() {
	if c != nil && c.e != nil {
		waitEngine(c.e)
	}
}

func (c *funcCore[T]) stop() {
	if c == nil || c.e == nil {
		return
	}
	stopEngine(c.e, c.cancel, c.exited)
}

func (c *funcCore[T]) shutdown(ctx context.Context) error {
	if c == nil || c.e == nil {
		return errZeroFuncPool
	}
	return shutdownEngine(ctx, c.e, c.cancel, nil, nil, c.exited)
}

func (c *funcCore[T]) resize(n int) error {
	switch {
	case c == nil || c.e == nil:
		return errZeroFuncPool
	case n < 1:
		return fmt.Errorf("%w: Resize(%d): worker limit must be at least 1", ErrInvalid, n)
	}
	c.e.Resize(n)
	return nil
}

func (c *funcCore[T]) stats() Stats {
	if c == nil || c.e == nil {
		return Stats{}
	}
	return statsOf(c.e.Stats(), c.failed.Load(), 0)
}

func (c *funcCore[T]) context() context.Context {
	if c == nil || c.e == nil {
		return context.Background()
	}
	return c.ctx
}
