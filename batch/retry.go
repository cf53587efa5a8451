package batch

import (
	"context"
	"math/rand/v2"
	"time"
)

// retryPolicy says how often and how patiently a failed flush is retried.
type retryPolicy struct {
	attempts int           // calls in all, at least 1
	base     time.Duration // delay before the second call, before jitter
	maxDelay time.Duration // bound on the delay, before jitter
}

// delay returns how long to wait after the given failed attempt (1 for the
// first call): base doubled attempt-1 times, capped at maxDelay, then drawn
// at random from its upper half so that batchers failing together do not
// retry together.
func (r retryPolicy) delay(attempt int) time.Duration {
	d := r.base
	for i := 1; i < attempt && d < r.maxDelay; i++ {
		if d > r.maxDelay/2 {
			d = r.maxDelay
			break
		}
		d *= 2
	}
	d = min(d, r.maxDelay)
	half := d / 2
	return half + rand.N(d-half+1)
}

// wait sleeps for the delay after the given failed attempt and reports
// whether it did so fully; it returns false as soon as ctx ends.
func (r retryPolicy) wait(ctx context.Context, attempt int) bool {
	t := time.NewTimer(r.delay(attempt))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
