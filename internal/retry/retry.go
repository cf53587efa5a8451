// Package retry holds the arithmetic of crew's retry policy, shared by the
// crew package's Retry and the batch package's flushes.
package retry

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Check reports what is wrong with a policy, or "" if nothing is.
func Check(attempts int, delay, maxDelay, timeout time.Duration) string {
	switch {
	case attempts < 1:
		return "Attempts must be at least 1"
	case delay < 0 || maxDelay < 0 || timeout < 0:
		return "durations must not be negative"
	case maxDelay != 0 && maxDelay < delay:
		return "MaxDelay must be 0 (no bound) or at least Delay"
	}
	return ""
}

// Backoff returns how long to wait after the given failed attempt (1 for
// the first call): delay doubled attempt-1 times, bounded by maxDelay
// unless it is 0 or less, then drawn at random from its upper half, so that
// callers failing together do not retry together.
func Backoff(attempt int, delay, maxDelay time.Duration) time.Duration {
	if delay <= 0 {
		return 0 // no delay, or an invalid one: never a panic
	}
	bound := maxDelay
	if bound <= 0 {
		bound = 1<<63 - 1
	}
	d := min(delay, bound)
	for i := 1; i < attempt && d < bound; i++ {
		if d > bound/2 {
			d = bound
			break
		}
		d *= 2
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Permanent is the error crew.Permanent wraps an error in: a retry stops
// at it, and reports Err.
type Permanent struct{ Err error }

func (e *Permanent) Error() string { return e.Err.Error() }
func (e *Permanent) Unwrap() error { return e.Err }

// IsPermanent reports whether err, or an error it wraps, is a Permanent.
func IsPermanent(err error) bool {
	var p *Permanent
	return errors.As(err, &p)
}

// Unwrap returns the error inside a Permanent at the top of err, or err.
func Unwrap(err error) error {
	if p, ok := err.(*Permanent); ok {
		return p.Err
	}
	return err
}
