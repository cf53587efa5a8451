package crew

import (
	"errors"
	"fmt"
	"time"
)

// ErrGroupDone is returned by Go on a [Group], [ResultGroup] or [Stream]
// whose Wait has returned. Go during Wait is allowed (Wait waits for that
// task too); once Wait has returned, the group is finished and its context
// cancelled.
var ErrGroupDone = errors.New("crew: group is done: Go after Wait returned")

// errZeroGroup is returned by the methods of a Group, ResultGroup or Stream
// not made by its constructor, or nil.
var errZeroGroup = invalidf("groups and streams must be made with their New functions")

// A GroupOption configures a [Group], [ResultGroup] or [Stream], or a call
// of [Map], [MapErr], [ForEach] or their Seq forms. Like an [Option], it
// never panics when called: the constructor it is given to panics with an
// error wrapping [ErrInvalid] for a nil or invalid option, and the
// functions that return an error return that one.
type GroupOption func(*groupConfig)

type groupConfig struct {
	limit    int           // 0: no limit of the group's own
	timeout  time.Duration // per-task deadline; 0: none
	retry    *Retry        // WithRetry; nil: a task is called once
	limitSet bool
	timeSet  bool
	all      bool // collect every error; errors do not cancel unless cancelOn
	cancelOn bool // WithCancelOnError: with all, the first error cancels too
	repanic  bool // Wait re-panics the first recovered panic
}

// apply sets c from opts and reports nil and invalid options. c lives in
// the group, already on the heap: a config built in a local would escape
// to it at every call.
func (c *groupConfig) apply(opts []GroupOption) error {
	errs := applyOptions(c, "group", opts)
	errs = append(errs, problems(
		problem(c.limitSet && c.limit < 1, func() error {
			return invalidf("WithLimit(%d): limit must be at least 1", c.limit)
		}),
		problem(c.timeSet && c.timeout <= 0, func() error {
			return invalidf("WithTaskTimeout(%v): timeout must be positive", c.timeout)
		}),
		problem(c.retry != nil && c.retry.check() != nil, func() error {
			return fmt.Errorf("WithRetry: %w", c.retry.check())
		}),
	)...)
	return errors.Join(errs...)
}

// WithLimit lets at most n tasks of the group run at once, below the pool's
// own limit. Tasks beyond it wait in the group's queue, holding no worker,
// and start as earlier ones finish; [Group.Go] does not wait for a free
// slot (and [Group.TryGo] refuses a task that would). For a [Stream], n is
// also its window (see [NewStream]). n must be at least 1.
func WithLimit(n int) GroupOption {
	return func(c *groupConfig) { c.limit, c.limitSet = n, true }
}

// WithAllErrors makes [Group.Wait] return every task's error, joined with
// [errors.Join] in submission order, instead of the first one. Errors and
// panics then do not cancel the group, unless [WithCancelOnError]: every
// task runs. (Cancelling the
// parent context still skips the tasks that have not started; Wait then
// adds the context's cause.)
func WithAllErrors() GroupOption {
	return func(c *groupConfig) { c.all = true }
}

// WithCancelOnError makes the first error (or panic) cancel the group's
// context even with [WithAllErrors]: the tasks that have not started are
// skipped, as without it, while [Group.Wait] still returns the error of
// every task that ran, joined in submission order (the first error is the
// cancellation's cause, and is not added twice). Without WithAllErrors it
// changes nothing: the first error cancels the group by default.
func WithCancelOnError() GroupOption {
	return func(c *groupConfig) { c.cancelOn = true }
}

// WithTaskTimeout gives each task a context whose deadline is d after the
// task starts (not after [Group.Go]). The task's context is a child of the
// group's, so the first error still cancels it too. It costs a context and
// a timer per task. d must be positive.
func WithTaskTimeout(d time.Duration) GroupOption {
	return func(c *groupConfig) { c.timeout, c.timeSet = d, true }
}

// WithRepanic makes [Group.Wait] panic, once every task has finished, with
// the [*PanicError] of the first task that panicked (its Value and the
// stack of the panic), instead of returning it as an error: the behaviour
// of sourcegraph/conc. Without it a panic is an error like any other. The
// panics of later tasks go to the pool's panic handler (see Group.Wait).
// (A pool built [WithCrashOnPanic] does not recover group tasks at all.)
func WithRepanic() GroupOption {
	return func(c *groupConfig) { c.repanic = true }
}

// WithRetry calls a task of the group that returns an error again, as r
// says (see [Retry]), before its error counts: Wait, the error policy and
// a ResultGroup's result see only the last call. Between calls the task
// waits for its delay holding no worker and no slot of the group's limit
// (a timer puts it back in the group's queue), so other tasks run
// meanwhile. It is not called again once the group is cancelled (an
// error, WithCancelOnError, ctx, or its pool's Stop or Shutdown, which do
// not wait for a task's delay): a task waiting for
// its delay then ends at once with its last error, and Wait does not wait
// for the delay. A task that panics, or returns an error wrapped with
// [Permanent], is not called again. Each call gets r.Timeout's deadline,
// within [WithTaskTimeout]'s if both are set. Cost: a timer and a map
// entry per task while it waits; nothing for a task that succeeds.
// [NewStream] refuses it: a Stream's tasks return no error.
func WithRetry(r Retry) GroupOption {
	return func(c *groupConfig) { c.retry = &r }
}
