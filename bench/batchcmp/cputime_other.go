//go:build !unix

package batchcmp

import "time"

// cpuTime returns 0: getrusage is not available here.
func cpuTime() time.Duration { return 0 }
