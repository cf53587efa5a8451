package batch

import (
	"context"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/retry"
)

// wait sleeps for r's delay after the given failed attempt and reports
// whether it did so fully; it returns false as soon as ctx ends.
func wait(ctx context.Context, r crew.Retry, attempt int) bool {
	t := time.NewTimer(r.Backoff(attempt))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// again reports whether a flush that failed with err as the given
// attempt is called again.
func again(r crew.Retry, attempt int, err error) bool {
	return attempt < r.Attempts && !retry.IsPermanent(err)
}
