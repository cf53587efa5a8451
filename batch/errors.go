package batch

import (
	"errors"
	"fmt"

	"github.com/gocrew/crew"
)

var (
	// ErrClosed is returned by Add, Flush and Close once Close has been called.
	ErrClosed = errors.New("batch: batcher closed")

	// ErrFull is returned by Add when the pending bound set by WithMaxPending
	// is reached and the policy is Fail.
	ErrFull = errors.New("batch: too many pending items")

	// ErrDropped is the error the error handler receives with an item that
	// the DropOldest policy discarded to make room for a newer one.
	ErrDropped = errors.New("batch: item dropped to make room")
)

// invalid returns an error wrapping crew.ErrInvalid, the error of every
// invalid argument in crew, for New to panic with.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: batch."+format, append([]any{crew.ErrInvalid}, args...)...)
}
