package crew

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/notify"
)

var (
	// ErrNoState is wrapped, together with the constructor's own error, by
	// the error a WorkerPool reports for a value it could not process
	// because the worker's state could not be made.
	ErrNoState = errors.New("crew: worker state could not be made")

	// ErrDiscardState may be wrapped by the error a WorkerPool's function
	// returns to say that the worker's state is broken (a connection
	// reset, say): the worker closes it and makes a new one for its next
	// value.
	ErrDiscardState = errors.New("crew: worker state discarded")
)

// A WorkerPool is a FuncPool whose workers each own a value of type S (a
// connection, a buffer, a model) that the function receives with every
// value of type T it processes. A worker makes its state with the
// constructor given to NewWorkerPool when it takes its first value, uses it
// for every value it processes, and closes it when it retires (after the
// idle timeout, when Resize shrinks the pool, at Stop and Shutdown). Since a
// worker runs one value at a time, a state is never used by two running
// calls at once, and needs no lock. It costs nothing per value beyond
// FuncPool's: Invoke allocates nothing.
//
// When the constructor fails, the value that needed the state is not
// processed: its error, wrapping ErrNoState and the constructor's error,
// goes to the error handler (see WithErrorHandler) and is counted in
// Stats().Failed, and the worker tries again with its next value. Retry
// inside the constructor (it receives the pool's context) to wait out
// short outages instead. A constructor that panics is treated like a task
// that panics.
//
// A state is closed and made anew when the function returns an error
// wrapping ErrDiscardState, and when the function panics or calls
// runtime.Goexit with it (a panic may have left it half-updated).
//
// A WorkerPool must be made with NewWorkerPool; its methods are safe for
// concurrent use. Everything else follows FuncPool.
type WorkerPool[S, T any] struct {
	c          funcCore[T]
	newState   func(context.Context) (S, error)
	closeState func(S)
	fn         func(context.Context, S, T) error

	// Workers whose state may be open. The engine's Exit returns once every
	// worker has left its loop, which can be just before the worker's
	// retire has closed its state; Stop and Shutdown wait for this count
	// too, so that no state outlives them.
	live    atomic.Int64
	retired notify.Cond
}

// NewWorkerPool returns a pool that runs fn on each value given to Invoke,
// at most maxWorkers at a time, each worker with a state of its own made
// by newState and closed by closeState (which may be nil). A panic in
// closeState goes to the pool's panic handler; closeState must not call
// runtime.Goexit, as it may run while a panic of fn unwinds, which would
// end with it. NewWorkerPool accepts the same options as NewFunc. It
// panics with an error wrapping ErrInvalid if maxWorkers is less than 1,
// newState or fn is nil, or an option is invalid.
func NewWorkerPool[S, T any](maxWorkers int, newState func(ctx context.Context) (S, error), closeState func(S), fn func(ctx context.Context, state S, v T) error, opts ...FuncOption) *WorkerPool[S, T] {
	if newState == nil || fn == nil {
		panic(fmt.Errorf("%w: NewWorkerPool: nil constructor or function", ErrInvalid))
	}
	p := &WorkerPool[S, T]{newState: newState, closeState: closeState, fn: fn}
	fc := p.c.configure("NewWorkerPool", maxWorkers, opts)
	p.c.exited = func() { p.retired.Wait(nil, func() bool { return p.live.Load() == 0 }) }
	p.c.start(maxWorkers, fc, engine.Config[T]{
		NewRunner: func() (func(T), func()) {
			p.live.Add(1)
			w := &stateWorker[S, T]{p: p}
			return w.run, w.retire
		},
	})
	return p
}

// stateWorker is one worker's state. Only its worker touches it.
type stateWorker[S, T any] struct {
	p    *WorkerPool[S, T]
	s    S
	made bool // s was made and is not closed
}

func (w *stateWorker[S, T]) run(v T) {
	p := w.p
	c := &p.c
	if !w.made {
		s, err := p.newState(c.ctx)
		if err != nil {
			c.fail(fmt.Errorf("%w: %w", ErrNoState, err))
			return
		}
		w.s, w.made = s, true
	}
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit may have left s half-updated
			w.closeRecovered()
		}
	}()
	err := p.fn(c.ctx, w.s, v)
	returned = true
	if err != nil {
		if errors.Is(err, ErrDiscardState) {
			// After the error is reported (a closeState that panics must
			// not lose it), even if the error handler panics.
			defer w.closeRecovered()
		}
		c.fail(err)
	}
}

func (w *stateWorker[S, T]) close() {
	if !w.made {
		return
	}
	s := w.s
	var zero S
	w.s, w.made = zero, false
	if w.p.closeState != nil {
		w.p.closeState(s)
	}
}

// retire closes the state when the worker exits.
func (w *stateWorker[S, T]) retire() {
	p := w.p
	defer func() {
		if p.live.Add(-1) == 0 {
			p.retired.Broadcast()
		}
	}()
	w.closeRecovered()
}

// closeRecovered closes the state, recovering a panic of closeState itself
// and passing it to the pool's panic handler (unless the pool crashes on
// panics): it runs outside the worker's loop as the worker retires, and as
// a call of the function unwinds, whose own panic must go on.
func (w *stateWorker[S, T]) closeRecovered() {
	c := &w.p.c
	if c.crash {
		w.close()
		return
	}
	var pe *PanicError
	func() {
		returned := false
		defer func() {
			if !returned {
				// A panic, recovered here; or runtime.Goexit, and then
				// this goroutine ends before pe is reported.
				pe = &PanicError{Value: recover(), Stack: debug.Stack()}
			}
		}()
		w.close()
		returned = true
	}()
	if pe != nil {
		// Also panic(nil) under GODEBUG=panicnil=1, which recovers as nil.
		c.onPanic(pe)
	}
}

// Invoke queues v and returns without waiting for it; see FuncPool.Invoke.
// It allocates nothing.
func (p *WorkerPool[S, T]) Invoke(v T) error { return p.core().invoke(v) }

// TryInvoke queues v if that needs no waiting, and reports whether it did;
// see FuncPool.TryInvoke.
func (p *WorkerPool[S, T]) TryInvoke(v T) bool { return p.core().tryInvoke(v) }

// InvokeCtx queues v, waiting while a bounded queue is full, until ctx
// ends; see FuncPool.InvokeCtx.
func (p *WorkerPool[S, T]) InvokeCtx(ctx context.Context, v T) error {
	return p.core().invokeCtx(ctx, v)
}

// Wait blocks until no value is queued or being processed, without
// stopping the pool.
func (p *WorkerPool[S, T]) Wait() { p.core().wait() }

// Stop refuses new values, processes every queued one, and returns when
// every worker has exited and closed its state.
func (p *WorkerPool[S, T]) Stop() { p.core().stop() }

// Shutdown stops the pool like Stop, but when ctx ends first it cancels the
// pool's context, drops the queued values and returns a *ShutdownError
// with their number; every state is closed when it returns. See
// FuncPool.Shutdown.
func (p *WorkerPool[S, T]) Shutdown(ctx context.Context) error { return p.core().shutdown(ctx) }

// Resize changes the worker limit to n; workers beyond it close their
// state as they retire. It returns an error wrapping ErrInvalid if n < 1.
func (p *WorkerPool[S, T]) Resize(n int) error { return p.core().resize(n) }

// Stats returns a snapshot of the pool's counters. Failed also counts the
// values not processed because their worker's state could not be made.
func (p *WorkerPool[S, T]) Stats() Stats { return p.core().stats() }

// Context returns the context that the constructor and the function
// receive; see FuncPool.Context.
func (p *WorkerPool[S, T]) Context() context.Context { return p.core().context() }

func (p *WorkerPool[S, T]) core() *funcCore[T] {
	if p == nil {
		return nil
	}
	return &p.c
}
