package crew

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"

	"github.com/gocrew/crew/internal/notify"
)

var (
	// ErrNoState is wrapped, together with the constructor's own error, by
	// the error a pool made by NewFuncWithState reports for a value it could
	// not process because the worker's state could not be made.
	ErrNoState = errors.New("crew: worker state could not be made")

	// ErrDiscardState may be wrapped by the error the function of a pool
	// made by NewFuncWithState returns to say that the worker's state is
	// broken (a connection reset, say): the worker closes it and makes a
	// new one for its next value.
	ErrDiscardState = errors.New("crew: worker state discarded")
)

// NewFuncWithState returns a function pool whose workers each own a value
// of type S (a connection, a buffer, a model) that fn receives with every
// value of type T it processes, at most maxWorkers at a time. A worker makes
// its state with newState when it takes its first value, uses it for every
// value it processes, and closes it with closeState (which may be nil)
// when it retires: after the idle timeout, when [FuncPool.Resize] shrinks
// the pool, at [FuncPool.Stop] and [FuncPool.Shutdown], which return once
// every state is closed. Since a worker runs one value at a time, a state
// is never used by two running calls at once, and needs no lock. A
// retiring worker closes its state after it has given up its place, so a
// new worker may make a state while closeState runs: more states than
// maxWorkers can be open for that while. It costs nothing per value:
// [FuncPool.Invoke] allocates nothing.
//
// When newState fails, the value that needed the state is not processed:
// its error, wrapping [ErrNoState] and the constructor's error, goes to the
// error handler (see [WithErrorHandler]) and is counted in [Stats].Failed,
// and the worker tries again with its next value. Retry inside newState
// (it receives the pool's context) to wait out short outages instead. A
// newState that panics is treated like a call that panics.
//
// A state is closed and made anew when fn returns an error wrapping
// [ErrDiscardState], and when fn panics or calls [runtime.Goexit] with it (a
// panic may have left it half-updated). A panic in closeState goes to the
// pool's panic handler, and is not counted in [Stats]; closeState must
// not call runtime.Goexit, as it may run while a panic of fn unwinds,
// which would end with it.
//
// NewFuncWithState takes the same options as [New], and panics with an
// error wrapping [ErrInvalid] if maxWorkers is less than 1, newState or fn
// is nil, or an option is invalid.
func NewFuncWithState[S, T any](maxWorkers int, newState func(ctx context.Context) (S, error), closeState func(S), fn func(ctx context.Context, state S, v T) error, opts ...Option) *FuncPool[T] {
	if newState == nil || fn == nil {
		panic(invalidf("crew.NewFuncWithState: nil constructor or function"))
	}
	cfg := configure("crew.NewFuncWithState", maxWorkers, opts)
	p := new(FuncPool[T])
	st := &states[S, T]{c: &p.c, newState: newState, closeState: closeState, fn: fn}
	p.c.exited = func() { st.retired.Wait(nil, func() bool { return st.live.Load() == 0 }) }
	p.start(cfg, maxWorkers, nil, func() (func(T) error, func()) {
		st.live.Add(1)
		w := &stateWorker[S, T]{st: st}
		return w.call, w.retire
	})
	return p
}

// states is what the workers of a pool with state share.
type states[S, T any] struct {
	c          *poolCore[item[T]]
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

// stateWorker is one worker's state. Only its worker touches it.
type stateWorker[S, T any] struct {
	st   *states[S, T]
	s    S
	made bool // s was made and is not closed
}

// call runs the function on v with the worker's state, made first if need
// be, and returns the error it reported.
func (w *stateWorker[S, T]) call(v T) error {
	st := w.st
	c := st.c
	if !w.made {
		s, err := st.newState(c.ctx)
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrNoState, err)
			c.fail(err)
			return err
		}
		w.s, w.made = s, true
	}
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit may have left s half-updated
			w.closeRecovered()
		}
	}()
	err := st.fn(c.ctx, w.s, v)
	returned = true
	if err != nil {
		if errors.Is(err, ErrDiscardState) {
			// After the error is reported (a closeState that panics must
			// not lose it), even if the error handler panics.
			defer w.closeRecovered()
		}
		c.fail(err)
	}
	return err
}

func (w *stateWorker[S, T]) close() {
	if !w.made {
		return
	}
	s := w.s
	var zero S
	w.s, w.made = zero, false
	if w.st.closeState != nil {
		w.st.closeState(s)
	}
}

// retire closes the state when the worker exits.
func (w *stateWorker[S, T]) retire() {
	st := w.st
	defer func() {
		if st.live.Add(-1) == 0 {
			st.retired.Broadcast()
		}
	}()
	w.closeRecovered()
}

// closeRecovered closes the state, recovering a panic of closeState itself
// and passing it to the pool's panic handler (unless the pool crashes on
// panics): it runs outside the worker's loop as the worker retires, and as
// a call of the function unwinds, whose own panic must go on.
func (w *stateWorker[S, T]) closeRecovered() {
	c := w.st.c
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
