package crew

import "context"

// A Task is the handle of a function submitted with Pool.Submit.
type Task struct {
	fn   func(context.Context) error
	done chan struct{}
	err  error // set before done is closed
}

// Wait blocks until the task has finished and returns its error: the
// function's own, a *PanicError if it panicked, or the error that kept it
// from running (ErrStopped, ErrQueueFull, ErrDropped, ErrNilTask).
func (t *Task) Wait() error {
	<-t.done
	return t.err
}

// Done returns a channel that is closed when the task has finished, for use
// in a select; Wait then returns at once.
func (t *Task) Done() <-chan struct{} { return t.done }

func (t *Task) finish(err error) {
	t.err = err
	t.fn = nil
	close(t.done)
}
