package jetstream

import (
	"math/rand/v2"
	"time"
)

// ExponentialBackoff returns a backoff function for [WithBackoff]: the
// delay after the n-th failed delivery is base doubled n-1 times, capped at
// max, and then drawn at random from its upper half, from d/2 to d, so that
// messages that failed together are not all redelivered together. It
// panics with an error wrapping [crew.ErrInvalid] unless 0 <= base <= max.
func ExponentialBackoff(base, max time.Duration) func(delivery int) time.Duration {
	if base < 0 || max < base {
		panic(invalid("ExponentialBackoff(%v, %v): want 0 <= base <= max", base, max))
	}
	return func(delivery int) time.Duration {
		d := base
		for i := 1; i < delivery && 0 < d && d < max; i++ {
			if d > max/2 {
				d = max
				break
			}
			d *= 2
		}
		d = min(d, max)
		half := d / 2
		return half + rand.N(d-half+1)
	}
}
