package crew

import (
	"errors"
	"fmt"
	"time"
)

// ErrGroupDone is returned by Go on a Group, ResultGroup or Stream whose Wait
// has returned. Go during Wait is allowed (Wait waits for that task too);
// once Wait has returned, the group is finished and its context cancelled.
var ErrGroupDone = errors.New("crew: group is done: Go after Wait returned")

// errZeroGroup is returned by the methods of a Group, ResultGroup or Stream
// not made by its constructor, or nil.
var errZeroGroup = fmt.Errorf("%w: groups and streams must be made with their New functions", ErrInvalid)

// A GroupOption configures a Group, ResultGroup, Stream, the Map and
// ForEach helpers, or a Future made by Do.
type GroupOption func(*groupConfig)

type groupConfig struct {
	limit   int           // 0: no limit of the group's own
	all     bool          // collect every error; errors do not cancel
	timeout time.Duration // per-task deadline; 0: none
	repanic bool          // Wait re-panics the first recovered panic
}

// apply sets c from opts. c lives in the group or Future, already on the
// heap: a config built in a local would escape to it at every call.
func (c *groupConfig) apply(opts []GroupOption) {
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
}

// WithLimit lets at most n tasks of the group run at once, below the pool's
// own limit. Tasks beyond it wait in the group's queue, holding no worker,
// and start as earlier ones finish; Go does not wait for a free slot. For a
// Stream, n is also its window (see NewStream). WithLimit panics with an
// error wrapping ErrInvalid if n < 1.
func WithLimit(n int) GroupOption {
	if n < 1 {
		panic(fmt.Errorf("%w: WithLimit(%d): limit must be at least 1", ErrInvalid, n))
	}
	return func(c *groupConfig) { c.limit = n }
}

// WithAllErrors makes Wait return every task's error, joined with
// errors.Join in submission order, instead of the first one. Errors and
// panics then do not cancel the group: every task runs. (Cancelling the
// parent context still skips the tasks that have not started; Wait then
// adds the context's cause.)
func WithAllErrors() GroupOption {
	return func(c *groupConfig) { c.all = true }
}

// WithTaskTimeout gives each task a context whose deadline is d after the
// task starts (not after Go). The task's context is a child of the group's,
// so the first error still cancels it too. It costs a context and a timer
// per task. WithTaskTimeout panics with an error wrapping ErrInvalid if
// d <= 0.
func WithTaskTimeout(d time.Duration) GroupOption {
	if d <= 0 {
		panic(fmt.Errorf("%w: WithTaskTimeout(%v): timeout must be positive", ErrInvalid, d))
	}
	return func(c *groupConfig) { c.timeout = d }
}

// WithRepanic makes Wait panic, once every task has finished, with the
// *PanicError of the first task that panicked (its Value and the stack of
// the panic), instead of returning it as an error: the behaviour of
// sourcegraph/conc. Without it a panic is an error like any other. The
// panics of later tasks go to the pool's panic handler (see Group.Wait).
// (A pool built WithCrashOnPanic does not recover group tasks at all.)
func WithRepanic() GroupOption {
	return func(c *groupConfig) { c.repanic = true }
}
