package crew

import (
	"context"
	"fmt"
)

// A Future is the typed result of a function submitted with Do: a value of
// type T and an error, available once the function has returned.
type Future[T any] struct {
	t   *Task
	fn  func(context.Context) (T, error)
	val T // written by the task before t is done
	cfg groupConfig
}

// Do submits f to run on p and returns a Future for its result. f receives
// the pool's context (see Pool.Context), or WithTaskTimeout a child of it
// with a deadline; of the GroupOptions only WithTaskTimeout and WithRepanic
// apply to a single task.
//
// Do submits like Pool.Submit, whose rules it follows: it waits for room in
// a bounded queue (fails with ErrQueueFull WithNonBlocking), and never fails
// silently: when f cannot be queued (ErrStopped, ErrQueueFull, ErrNilTask,
// or an error wrapping ErrInvalid for a nil or zero pool) the Future is
// already done with that error, and a queued f that Shutdown drops
// completes with ErrDropped. A panic in f completes the Future with a
// *PanicError, unless p crashes on panics (WithCrashOnPanic). Do costs
// five small allocations: the Future, a closure and the three of Submit.
func Do[T any](p *Pool, f func(ctx context.Context) (T, error), opts ...GroupOption) *Future[T] {
	fu := &Future[T]{fn: f}
	fu.cfg.apply(opts)
	task := fu.run
	if f == nil {
		task = nil // Submit reports ErrNilTask
	}
	if p == nil {
		p = new(Pool) // a zero pool: Submit reports the error
	}
	fu.t = p.Submit(task)
	return fu
}

func (fu *Future[T]) run(ctx context.Context) error {
	if fu.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fu.cfg.timeout)
		defer cancel()
	}
	v, err := fu.fn(ctx)
	fu.val = v
	return err
}

// Wait blocks until f has returned, or until it is known that it never
// will run, and returns its result: what f returned, or the zero value and
// the error that kept it from returning (a *PanicError, ErrGoexit,
// ErrDropped, or a submission error). WithRepanic, Wait panics with the
// *PanicError instead. Wait may be called any number of times, from any
// goroutine.
//
// Unlike Group.Wait, Wait never runs f itself: a task that waits for a
// Future of its own pool holds its worker meanwhile, and if every worker
// does, none is left to run the Futures. Inside tasks, prefer a Group or a
// ResultGroup, whose Wait runs the queued tasks.
func (fu *Future[T]) Wait() (T, error) {
	if fu == nil || fu.t == nil {
		var zero T
		return zero, errZeroFuture
	}
	err := fu.t.Wait()
	if pe, ok := err.(*PanicError); ok && fu.cfg.repanic {
		panic(pe)
	}
	return fu.val, err
}

// Done returns a channel that is closed when the Future is done, for use in
// a select; Wait then returns at once.
func (fu *Future[T]) Done() <-chan struct{} {
	if fu == nil || fu.t == nil {
		return closedChan
	}
	return fu.t.Done()
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// errZeroFuture is returned by the Wait of a Future not made by Do, nil
// included, as a nil *Task's Wait reports one not made by Submit.
var errZeroFuture = fmt.Errorf("%w: Future must be made by crew.Do", ErrInvalid)
