package jetstream

import (
	"errors"
	"fmt"
	"time"

	"github.com/gocrew/crew"
)

var (
	// ErrRunning is returned by [Consumer.Run] while another Run of the
	// same [Consumer] is in progress.
	ErrRunning = errors.New("jetstream: consumer already running")

	// ErrDrainTimeout is wrapped by the error [Consumer.Run] returns when
	// the drain timeout ([WithDrainTimeout]) passed before every message in
	// flight was finished: the unfinished ones were handed back to the
	// server (Nak) for redelivery.
	ErrDrainTimeout = errors.New("jetstream: drain timeout")

	// ErrDuplicate is wrapped by the error [Queue.Enqueue] returns when the
	// stream dropped the job as a duplicate of one with the same unique id
	// ([WithUniqueID]) stored within its duplicate window.
	ErrDuplicate = errors.New("jetstream: duplicate job")

	// ErrJobStuck is wrapped by the Err of the [MessageError] a [Consumer]
	// reports when it abandons a handler still running the job timeout
	// ([WithJobTimeout]) after its context was cancelled: the handler
	// ignored its context, and its message was handed back or given up.
	ErrJobStuck = errors.New("jetstream: job stuck")
)

// Snooze returns the error with which a [Handler] asks for its job to be
// run again d later without counting an attempt: see [WithSnooze] for how
// the [Consumer] does it, and what it does without that option. For a
// negative d, Snooze returns an error wrapping [crew.ErrInvalid] instead,
// which the Consumer takes as a failed attempt.
func Snooze(d time.Duration) error {
	if d < 0 {
		return invalid("Snooze(%v): d must not be negative", d)
	}
	return &snoozeError{d}
}

// SnoozeDelay reports whether err is or wraps an error made by [Snooze],
// and its delay.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *snoozeError
	if !errors.As(err, &s) {
		return 0, false
	}
	return s.d, true
}

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("jetstream: snoozed for %v", e.d) }

// Permanent marks err as a failure that retrying cannot fix. A [Handler]
// that returns it (or an error wrapping it) has its message dead-lettered,
// if a dead-letter subject is set ([WithDeadLetter]), and terminated at once
// instead of being redelivered. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err is or wraps an error made by [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// invalid returns an error wrapping crew.ErrInvalid, the error of every
// invalid argument in crew.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: jetstream."+format, append([]any{crew.ErrInvalid}, args...)...)
}

// A MessageError reports, to the error handler ([WithErrorHandler]), a
// message the [Consumer] gave up on: it was dead-lettered if
// [WithDeadLetter] is set, and terminated. Err is why: the handler's error,
// a *[crew.PanicError], a decoding error, or the error of a delivery beyond
// the consumer's MaxDeliver. It also reports a message whose handler the
// Consumer abandoned ([WithJobTimeout]; Err wraps [ErrJobStuck]): given
// up on its last delivery, or, with HandedBack set, handed back for
// redelivery.
type MessageError struct {
	Stream       string // the stream the message is stored in
	Sequence     uint64 // its stream sequence
	Subject      string // the subject it was published to
	Delivery     int    // the delivery that failed, 1 for the first
	DeadLettered bool   // whether it was published to the dead-letter subject
	HandedBack   bool   // whether it was handed back for redelivery (Nak) rather than terminated
	Err          error
}

// Error describes the message, what became of it and why, for the error
// handler ([WithErrorHandler]). A nil *MessageError's is "<nil>".
func (e *MessageError) Error() string {
	if e == nil {
		return "<nil>"
	}
	verb := "terminated"
	switch {
	case e.HandedBack:
		verb = "handed back"
	case e.DeadLettered:
		verb = "dead-lettered"
	}
	return fmt.Sprintf("jetstream: message %s/%d (%s) %s after delivery %d: %v", e.Stream, e.Sequence, e.Subject, verb, e.Delivery, e.Err)
}

// Unwrap returns Err, for [errors.Is] and [errors.As]: nil for a nil
// *MessageError.
func (e *MessageError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}
