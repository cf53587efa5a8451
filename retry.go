package crew

import (
	"context"
	"errors"
	"time"

	"github.com/gocrew/crew/internal/retry"
)

// A Retry says how a function that returns an error is called again: up
// to Attempts calls in all, waiting between them a delay that starts at
// Delay and doubles after each failure up to MaxDelay, drawn at random
// from the upper half of that value (jitter), so that callers failing
// together do not retry together. Each call gets a deadline of Timeout, if
// set. An error wrapped with [Permanent] is not retried, nor is a panic,
// nor a call whose context has ended.
//
// The same policy serves a group's tasks ([WithRetry]), the Submit tasks
// of a [Retrying] ([NewRetrying]), a call on the current goroutine
// ([Retry.Do]) and the flushes of a batch.Batcher (batch.WithRetry). A Retry is invalid when Attempts is below 1, a
// duration is negative, or MaxDelay is below Delay and not 0 (no bound);
// what takes it reports that with an error wrapping [ErrInvalid].
type Retry struct {
	Attempts int           // calls in all, the first one included: at least 1
	Delay    time.Duration // before the second call, before jitter; 0: none
	MaxDelay time.Duration // bound on the delay, before jitter; 0: no bound
	Timeout  time.Duration // each call's deadline; 0: none
}

// check returns an error wrapping ErrInvalid for an invalid policy.
func (r Retry) check() error {
	if why := retry.Check(r.Attempts, r.Delay, r.MaxDelay, r.Timeout); why != "" {
		return invalidf("%+v: %s", r, why)
	}
	return nil
}

// Backoff returns how long to wait after the given failed attempt (1 for
// the first call), jitter included: a value in [d/2, d] where d is Delay
// doubled attempt-1 times, bounded by MaxDelay. For an invalid r it
// returns 0 for a negative Delay and takes a negative MaxDelay as no
// bound.
func (r Retry) Backoff(attempt int) time.Duration {
	return retry.Backoff(attempt, r.Delay, r.MaxDelay)
}

// Do calls fn on the calling goroutine until it returns nil, returns an
// error wrapped with [Permanent] (Do returns the error inside), panics (the
// panic goes on), or the attempts are used up (Do returns the last error).
// It waits between calls as r says and stops waiting when ctx ends,
// returning the last error joined with ctx's cause (a call that fails
// once ctx has ended is not retried: Do returns its error); each call receives
// ctx, with Timeout's deadline if set. Do holds its goroutine, and in a
// pool's task that task's worker, while it waits: a group built
// [WithRetry] frees the worker instead. Do returns an error wrapping
// [ErrInvalid] for an invalid r, a nil ctx or a nil fn, without calling
// fn.
func (r Retry) Do(ctx context.Context, fn func(context.Context) error) error {
	switch {
	case ctx == nil:
		return invalidf("Retry.Do: nil context")
	case fn == nil:
		return invalidf("Retry.Do: nil function")
	}
	if err := r.check(); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := r.call(ctx, fn)
		if !r.again(ctx, attempt, err) {
			return unwrapPermanent(err)
		}
		t := time.NewTimer(r.Backoff(attempt))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, context.Cause(ctx))
		}
	}
}

// call calls fn once with ctx, bounded by r.Timeout.
func (r Retry) call(ctx context.Context, fn func(context.Context) error) error {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	return fn(ctx)
}

// again reports whether a call that returned err as the given attempt is
// to be called again.
func (r Retry) again(ctx context.Context, attempt int, err error) bool {
	return err != nil && attempt < r.Attempts && ctx.Err() == nil && !retry.IsPermanent(err)
}

// Permanent wraps err so that a [Retry] does not call the function again:
// the error is reported at once, as err itself (the wrapper goes). It
// returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &retry.Permanent{Err: err}
}

// unwrapPermanent returns the error inside a Permanent wrapper at the top
// of err, or err.
func unwrapPermanent(err error) error { return retry.Unwrap(err) }
