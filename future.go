package crew

import "context"

// A Future is the typed result of a function submitted with [Submit]: a
// value of type T and an error, available once the function has returned.
type Future[T any] struct {
	t   *Task
	fn  func(context.Context) (T, error)
	val T // written by the task before t is done
}

// Submit queues task to run on p, as [Pool.Submit] does, and returns a
// [Future] for its result at once, without waiting for it to run. task
// receives a context of its own, as with Pool.Submit.
//
// Submit follows Pool.Submit's rules: it waits for room in a full bounded
// queue (fails with [ErrQueueFull] on a pool built [WithNonBlocking]), and
// never fails silently: when task cannot be queued ([ErrStopped],
// ErrQueueFull, [ErrNilTask], or an error wrapping [ErrInvalid] for a nil
// or zero pool) the Future is already done with that error, and a queued
// task that [Pool.Shutdown] drops completes with [ErrDropped]. A panic in
// task completes the Future with a [*PanicError], unless p crashes on
// panics ([WithCrashOnPanic]). Submit costs a Future and a closure on top
// of Pool.Submit's allocations.
func Submit[T any](p *Pool, task func(ctx context.Context) (T, error)) *Future[T] {
	fu := &Future[T]{fn: task}
	run := fu.run
	if task == nil {
		run = nil // Pool.Submit reports ErrNilTask
	}
	fu.t = p.Submit(run)
	return fu
}

func (fu *Future[T]) run(ctx context.Context) error {
	v, err := fu.fn(ctx)
	fu.val = v
	return err
}

// Wait blocks until the function has returned, or until it is known that
// it never will run, and returns its result: what it returned, or the zero
// value and the error that kept it from returning (a [*PanicError],
// [ErrGoexit], [ErrDropped], [context.Canceled] after [Future.Cancel], or
// a submission error). Wait may be called any
// number of times, from any goroutine.
//
// Called from inside a task of the same pool, Wait lends that task's slot
// while it waits, as [Task.Wait] does, so that the function can run even
// when every worker is a task waiting for a Future.
func (fu *Future[T]) Wait() (T, error) {
	if fu == nil || fu.t == nil {
		var zero T
		return zero, errZeroFuture
	}
	err := fu.t.Wait()
	return fu.val, err
}

// Done returns a channel that is closed when the Future is done, for use in
// a select; [Future.Wait] then returns at once.
func (fu *Future[T]) Done() <-chan struct{} {
	if fu == nil || fu.t == nil {
		return closedChan
	}
	return fu.t.Done()
}

// Cancel keeps the function from starting if no worker has begun it, and
// reports whether it did: Wait then returns the zero value and
// [context.Canceled]. Cancel of a function that is running cancels the
// context it received and returns false. See [Task.Cancel], whose
// contract it follows.
func (fu *Future[T]) Cancel() bool {
	if fu == nil {
		return false
	}
	return fu.t.Cancel()
}

// errZeroFuture is returned by the Wait of a Future not made by Submit, nil
// included, as a nil *Task's Wait reports one not made by a Submit method.
var errZeroFuture = invalidf("a Future must be made by crew.Submit")
