// Package clock is the one monotonic clock of crew and its engine: time as
// nanoseconds since a fixed point, one clock read per call (time.Now reads
// the wall clock too), comparable across every pool and layer in the
// process.
package clock

import "time"

var epoch = time.Now()

// Now returns the time since the process's epoch on the monotonic clock,
// in nanoseconds.
func Now() int64 { return int64(time.Since(epoch)) }
