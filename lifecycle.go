package crew

import (
	"context"
	"fmt"

	"github.com/gocrew/crew/internal/engine"
)

// The stop and shutdown sequences shared by Pool and the function pools.

// stopEngine closes e, waits for its tasks, then for its workers to exit
// and for exited (if not nil), calls cancel and reports true. Called from
// inside one of e's tasks, which could never finish while Stop waits, or
// from a worker's own code as it retires (a WorkerPool's closeState), which
// Exit would wait for, it returns false after closing e: the queued tasks
// still run, and a stop from outside the pool waits for them.
func stopEngine[T any](e *engine.Engine[T], cancel context.CancelFunc, exited func()) bool {
	e.Close()
	if e.Wait(nil) != nil || e.InWorker() {
		return false
	}
	exit(e, exited)
	cancel()
	return true
}

func exit[T any](e *engine.Engine[T], exited func()) {
	e.Exit()
	if exited != nil {
		exited()
	}
}

// shutdownEngine is stopEngine with a deadline. When ctx ends first, it
// calls dropping (if not nil), drops the queued tasks, calls dropMore (if
// not nil) for tasks the caller tracks itself, calls cancel so that the
// running ones can see it, waits for them, then calls dropMore again, final,
// which adds the tasks it dropped that the engine did not. It reports the
// drop as a *ShutdownError.
func shutdownEngine[T any](ctx context.Context, e *engine.Engine[T], cancel context.CancelFunc, dropping func(), dropMore func(final bool) int, exited func()) error {
	e.Close()
	err := e.Wait(ctx)
	if err == nil && e.InWorker() {
		err = engine.ErrInWorker // a worker's own code, as it retires (see stopEngine)
	}
	dropped := 0
	switch {
	case err == engine.ErrInWorker:
		return fmt.Errorf("%w: Shutdown cannot wait for the task that called it; the pool is closed and its queued tasks still run", err)
	case err != nil:
		// Drain before cancelling: a worker freed by the cancellation must
		// not start a task that is about to be dropped.
		if dropping != nil {
			dropping()
		}
		dropped = dropQueued(e, cancel, dropMore)
	}
	exit(e, exited)
	cancel()
	if err != nil {
		return &ShutdownError{Dropped: dropped, Err: err}
	}
	return nil
}

// dropQueued is Shutdown once its deadline has passed: it drops the
// queued tasks, calls dropMore for those the caller tracks, cancels the
// running ones and waits for them, and returns how many tasks it dropped.
// A Drop hook that panics in the drain (which Hooks forbids) still leaves
// every dropped task counted and completed, and no task running, before
// the panic reaches the caller: a later Stop then stops the pool.
func dropQueued[T any](e *engine.Engine[T], cancel context.CancelFunc, dropMore func(final bool) int) (dropped int) {
	defer func() {
		if dropMore != nil {
			dropMore(false) // before the wait: running tasks may wait for them
		}
		cancel()
		e.Wait(nil)
		if dropMore != nil {
			dropped += dropMore(true) // no worker is left to start them
		}
	}()
	return e.Drain() // a concurrent Shutdown drains the rest, if any
}

// waitEngine is Wait: it blocks until e is idle, and panics when called
// from inside one of e's tasks, which would wait for itself forever.
func waitEngine[T any](e *engine.Engine[T]) {
	if err := e.Wait(nil); err != nil {
		panic(fmt.Errorf("%w: Wait would wait for the task that called it", err))
	}
}
