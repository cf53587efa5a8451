package crew

import (
	"errors"
	"fmt"

	"github.com/gocrew/crew/internal/engine"
)

var (
	// ErrStopped is returned for work submitted after Stop or Shutdown began.
	ErrStopped = engine.ErrStopped

	// ErrQueueFull is returned when a bounded queue has no room and the call
	// may not wait: the plain forms (Go, Submit, Invoke) on a pool built
	// WithNonBlocking, and a Go or Submit from inside a task when every
	// worker waits for room. (A Try form reports it as false, and a
	// TrySubmit's Task as its error; a Context form waits for its context.)
	ErrQueueFull = engine.ErrFull

	// ErrInsideTask is wrapped by the errors of calls that cannot work from
	// inside one of the pool's own tasks because they would wait for the
	// calling task itself: Wait panics with it, Shutdown returns it. The
	// Wait of a Keyed, Priority, RateLimited, Subpool or Retrying panics
	// with it when called from inside one of that layer's own tasks, and a
	// Subpool's Shutdown returns it.
	ErrInsideTask = engine.ErrInWorker

	// ErrNilTask is returned when the task function is nil.
	ErrNilTask = errors.New("crew: nil task")

	// ErrDropped completes a submitted Task that never started because the
	// pool stopped: Shutdown removed it from the queue, or it waited in a
	// layer (a RateLimited's token, say) that the stopped pool let go. A
	// Subpool's Shutdown drops the Subpool's tasks with it too.
	ErrDropped = errors.New("crew: task dropped: the pool stopped before it started")

	// ErrPaused is what the [*ShutdownError] of a paused pool's Shutdown
	// unwraps to: Shutdown dropped the queue at once (none, if nothing was
	// queued) and cancelled the running tasks' context (see [Pool.Pause]).
	ErrPaused = errors.New("crew: the pool is paused")

	// ErrGoexit completes a Task whose function called runtime.Goexit.
	ErrGoexit = errors.New("crew: task called runtime.Goexit")

	// ErrInvalid is wrapped by the errors (and construction panics) that
	// report an invalid argument, such as a worker limit below 1.
	ErrInvalid = errors.New("crew: invalid argument")
)

// PanicError is a panic recovered from a task, with the stack of the
// goroutine at the moment of the panic.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack, as runtime/debug.Stack
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("crew: task panicked: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value if it is an error, so that [errors.Is] and
// [errors.As] see through a recovered panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ShutdownError reports that [Pool.Shutdown]'s context ended before every
// task had returned, or that the pool was paused: Dropped queued tasks
// never started (none, if only running tasks were left), and the running
// ones saw the pool's context cancelled. It unwraps to the context's
// error, or to [ErrPaused]. [Subpool.Shutdown] reports one likewise, for
// the Subpool's tasks, and cancels no context.
type ShutdownError struct {
	Dropped int   // queued tasks this call removed without running; steps count as tasks (see Stats)
	Err     error // the context's error, or ErrPaused
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("crew: shutdown: %v: dropped %d queued tasks", e.Err, e.Dropped)
}

func (e *ShutdownError) Unwrap() error { return e.Err }
