package crew

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"
)

// An Option configures a pool. [New], [NewFunc] and [NewFuncWithState]
// take the same options, and every option works on each of them.
//
// An option never panics when it is called: the constructor it is given
// to checks the values of all its options, and panics with an error
// wrapping [ErrInvalid] that names each invalid one, as it does for a nil
// Option and for options that contradict each other.
type Option func(*config)

type config struct {
	queueSize   int // < 0: unbounded
	queueSet    bool
	nonBlocking bool
	idleTimeout time.Duration
	minWorkers  int
	onPanic     func(*PanicError)
	handlerSet  bool // WithPanicHandler was given
	onError     func(error)
	errorSet    bool // WithErrorHandler was given
	crash       bool
	ctx         context.Context

	// Observability (see observe.go); all off by default.
	name      string
	hooks     Hooks
	latency   bool
	logger    *slog.Logger
	loggerSet bool
}

// DefaultIdleTimeout is how long an idle worker waits for a task before it
// retires, unless [WithIdleTimeout] says otherwise.
const DefaultIdleTimeout = time.Second

// configure applies opts for the constructor named what and checks them
// against the worker limit. It panics with an error wrapping ErrInvalid
// that names every problem: a limit below 1, a nil option, an invalid
// value, a contradiction.
func configure(what string, maxWorkers int, opts []Option) config {
	c := config{queueSize: -1, idleTimeout: DefaultIdleTimeout, onPanic: logPanic, ctx: context.Background()}
	errs := applyOptions(&c, what, opts)
	errs = append(errs, c.check(maxWorkers)...)
	if maxWorkers < 1 {
		errs = append(errs, invalidf("%s(%d): worker limit must be at least 1", what, maxWorkers))
	}
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	return c
}

// check returns what is wrong with c's values.
func (c *config) check(maxWorkers int) []error {
	return problems(
		problem(c.queueSet && c.queueSize < 0, func() error {
			return invalidf("WithQueueSize(%d): size must be at least 0", c.queueSize)
		}),
		problem(c.idleTimeout <= 0, func() error {
			return invalidf("WithIdleTimeout(%v): timeout must be positive", c.idleTimeout)
		}),
		problem(c.minWorkers < 0, func() error {
			return invalidf("WithMinWorkers(%d): count must be at least 0", c.minWorkers)
		}),
		problem(maxWorkers >= 1 && c.minWorkers > maxWorkers, func() error {
			return invalidf("WithMinWorkers(%d) exceeds the worker limit %d", c.minWorkers, maxWorkers)
		}),
		problem(c.onPanic == nil, func() error { return invalidf("WithPanicHandler(nil)") }),
		problem(c.errorSet && c.onError == nil, func() error { return invalidf("WithErrorHandler(nil)") }),
		problem(c.ctx == nil, func() error { return invalidf("WithContext(nil)") }),
		problem(c.loggerSet && c.logger == nil, func() error { return invalidf("WithLogger(nil)") }),
		problem(c.crash && c.handlerSet, func() error {
			return invalidf("WithCrashOnPanic and WithPanicHandler contradict each other")
		}),
		problem(c.nonBlocking && !c.queueSet, func() error {
			return invalidf("WithNonBlocking needs WithQueueSize: an unbounded queue is never full")
		}),
	)
}

// applyOptions applies opts to c in order, and returns an error for each
// nil one. It serves every constructor that takes options of a func type.
func applyOptions[C any, O ~func(*C)](c *C, what string, opts []O) []error {
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, invalidf("%s: option %d is nil", what, i))
			continue
		}
		o(c)
	}
	return errs
}

// problem returns why() if bad, and nil otherwise: a constructor's checks
// build no error, and box no value, while the options are valid.
func problem(bad bool, why func() error) error {
	if !bad {
		return nil
	}
	return why()
}

// problems returns the errors that are not nil.
func problems(errs ...error) []error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func logPanic(p *PanicError) { log.Print(p.Error()) }

// WithQueueSize bounds the number of tasks waiting for a worker to n. With
// n == 0 a task is accepted only when a worker can take it: a direct
// hand-off. A submission that finds the queue full waits for room
// ([Pool.Go], [Pool.Submit], [FuncPool.Invoke]), fails with [ErrQueueFull]
// (the same [WithNonBlocking]), or reports false ([Pool.TryGo],
// [Pool.TrySubmit], [FuncPool.TryInvoke]); the Context forms wait until
// their context ends. By default the queue is unbounded. n must not be
// negative.
//
// One exception: a group or a layer ([Keyed], [Priority], [RateLimited],
// [Subpool], [Retrying]) that holds a task it accepted without waiting for
// the pool's room ([Group.Go], a task behind a busy key, one whose token
// or retry delay came due) queues the step that runs it past a full
// queue's bound, as the task is held already. The queue may then hold
// more than n tasks for a while; until it has room again, submissions
// find it full.
func WithQueueSize(n int) Option {
	return func(c *config) { c.queueSize, c.queueSet = n, true }
}

// WithNonBlocking makes the plain submissions ([Pool.Go], [Pool.Submit],
// [FuncPool.Invoke]) return [ErrQueueFull] instead of waiting when a
// bounded queue is full; the Context forms still wait. It needs
// [WithQueueSize].
func WithNonBlocking() Option {
	return func(c *config) { c.nonBlocking = true }
}

// WithIdleTimeout sets how long an idle worker waits for a task before it
// retires ([DefaultIdleTimeout] if not set). d must be positive; one
// longer than the program runs, such as [math.MaxInt64], keeps idle workers
// until the pool stops. ([WithMinWorkers] keeps a number of them.)
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.idleTimeout = d }
}

// WithMinWorkers starts n workers with the pool and keeps them when idle,
// so that a burst after a quiet spell finds warm workers. n must be
// between 0 and the worker limit. While [Pool.Resize] holds the limit
// below n, the limit is the minimum; once it grows again, workers start up
// to n and idle ones retire down to it.
func WithMinWorkers(n int) Option {
	return func(c *config) { c.minWorkers = n }
}

// WithPanicHandler sets the function that receives the panics nobody
// else receives: those of tasks started with [Pool.Go], [Pool.TryGo] and
// [Pool.GoContext] (a [Pool.Submit] task's panic completes its [Task]
// instead), of a function pool's calls, and of group tasks that their
// group's Wait does not report (see [Group.Wait]). The handler runs on the
// worker that recovered the panic, before that worker takes another task;
// a group's, on the goroutine of the Wait that ends the group. It must
// return normally: a panic or [runtime.Goexit] in it may take the place of
// the panic being reported. The default handler logs the panic and its
// stack with package [log]. h must not be nil, and contradicts
// [WithCrashOnPanic].
func WithPanicHandler(h func(*PanicError)) Option {
	return func(c *config) { c.onPanic, c.handlerSet = h, true }
}

// WithCrashOnPanic lets panics in tasks crash the program, as they would in
// a plain goroutine, instead of recovering them. Use it when a panic means
// the process state can no longer be trusted.
func WithCrashOnPanic() Option {
	return func(c *config) { c.crash = true }
}

// WithErrorHandler sets a function that receives every non-nil error that
// a task returns to the pool: the errors of a function pool's calls (and
// of its state constructor, wrapped with [ErrNoState]), and those of
// [Pool.Submit] tasks, which their [Task] reports as well. These are the
// failures that [Stats].Failed counts, panics aside, which go to the panic
// handler or the Task. The handler runs on the worker that ran the task,
// after the task, and may be called from several workers at once. h must
// not be nil.
func WithErrorHandler(h func(error)) Option {
	return func(c *config) { c.onError, c.errorSet = h, true }
}

// WithContext sets the parent of the pool's context, the one its
// [Pool.Submit] tasks and function calls receive (see [Pool.Context]).
// Cancelling parent cancels that context; it does not stop the pool.
// parent must not be nil.
func WithContext(parent context.Context) Option {
	return func(c *config) { c.ctx = parent }
}
