package batch

import (
	"context"
	"fmt"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/retry"
)

// Defaults used by [New] for what no option sets.
const (
	// DefaultMaxItems is the number of items that seals a batch.
	DefaultMaxItems = 100
	// DefaultMaxWait is how long the first item of a batch waits at most
	// before the batch is sealed.
	DefaultMaxWait = 100 * time.Millisecond
)

// An Option configures a [Batcher]; pass options to [New]. An option never
// panics when called: New panics with an error wrapping [crew.ErrInvalid]
// that names each nil or invalid option (a non-positive size, a nil
// function, an unknown policy).
type Option func(*settings)

// FullPolicy says what [Batcher.Add] does when the pending bound set by
// [WithMaxPending] is reached.
type FullPolicy int

const (
	// Block makes Add wait until a flush finishes and makes room, or until
	// its context ends. TryAdd returns false.
	Block FullPolicy = iota
	// Fail makes Add return ErrFull at once. TryAdd returns false.
	Fail
	// DropOldest discards the oldest item not yet being flushed, hands it
	// to the error handler with ErrDropped, and accepts the new one.
	//
	// Nothing is dropped when every pending item is being flushed, nor
	// while the item dropped last is on its way to the handler (until the
	// handler has returned for it): then Add waits as with Block (until a
	// flush finishes or that hand-over ends) and TryAdd returns false. So
	// a handler that adds back with TryAdd the item it was given is
	// refused at the bound, rather than dropping the next item, and so on
	// without end.
	//
	// The dropped item goes to the handler from the goroutine of the Add
	// or TryAdd that dropped it, once it has accepted the new item; but if
	// a handler call was under way then (for a failed batch, or the one
	// this Add or TryAdd was called from), from the goroutine of the first
	// such call to return, after it returns. An Add or TryAdd called from
	// the handler thus never hands it a dropped item itself.
	DropOldest
)

// String returns the policy's name.
func (p FullPolicy) String() string {
	switch p {
	case Block:
		return "Block"
	case Fail:
		return "Fail"
	case DropOldest:
		return "DropOldest"
	}
	return fmt.Sprintf("FullPolicy(%d)", int(p))
}

// settings collects what the options set. The fields typed any hold
// functions of the item type, checked against it by New.
type settings struct {
	maxItems   int
	maxBytes   int
	sizeFn     any // func(T) int
	maxWait    time.Duration
	maxFlushes int
	pool       *crew.Pool
	maxPending int
	onFull     FullPolicy
	retry      crew.Retry
	onError    any // func(context.Context, []T, error)
	errs       []error
}

func defaultSettings() settings {
	return settings{
		maxItems:   DefaultMaxItems,
		maxWait:    DefaultMaxWait,
		maxFlushes: 1,
		retry:      crew.Retry{Attempts: 1},
	}
}

// WithMaxItems seals a batch as soon as it holds n items. n must be
// positive; the default is [DefaultMaxItems].
func WithMaxItems(n int) Option {
	return positive("WithMaxItems", n, func(s *settings) { s.maxItems = n })
}

// positive is an option that applies set if n, its argument, is positive,
// and records an invalid value naming option otherwise.
func positive(option string, n int, set func(*settings)) Option {
	return func(s *settings) {
		if n <= 0 {
			s.errs = append(s.errs, invalid("%s(%d): n must be positive", option, n))
			return
		}
		set(s)
	}
}

// WithMaxBytes bounds a batch to n bytes as measured by size, which must be
// a cheap, pure function of the item (it is called once per Add, outside the
// batcher's lock). An item that would take the batch over n seals the batch
// first and starts the next one; an item larger than n on its own is
// flushed alone. n must be positive and size not nil; T must be the
// [Batcher]'s item type. size must not return a negative size:
// [Batcher.Add] returns an error wrapping [crew.ErrInvalid] for such an
// item, and [Batcher.TryAdd] false.
// There is no byte bound by default.
func WithMaxBytes[T any](n int, size func(T) int) Option {
	return func(s *settings) {
		switch {
		case n <= 0:
			s.errs = append(s.errs, invalid("WithMaxBytes(%d): n must be positive", n))
		case size == nil:
			s.errs = append(s.errs, invalid("WithMaxBytes: nil size function"))
		default:
			s.maxBytes, s.sizeFn = n, size
		}
	}
}

// WithMaxWait seals a batch when its first item has waited d, however few
// items it holds. One timer is armed when a batch gets its first item;
// nothing runs while the batcher is idle. d must be positive; the default
// is [DefaultMaxWait].
func WithMaxWait(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.errs = append(s.errs, invalid("WithMaxWait(%v): d must be positive", d))
			return
		}
		s.maxWait = d
	}
}

// WithMaxConcurrentFlushes lets up to n flushes run at the same time. The
// default, 1, flushes batches one at a time in the order they were sealed.
// Without [WithPool], [New] creates a crew pool of n workers for the
// flushes and [Batcher.Close] stops it. n must be positive.
func WithMaxConcurrentFlushes(n int) Option {
	return positive("WithMaxConcurrentFlushes", n, func(s *settings) { s.maxFlushes = n })
}

// WithPool runs the flushes on p, a [crew.Pool] that may be shared with
// other work, instead of a pool of the [Batcher]'s own. The Batcher never
// stops p. A flusher goroutine takes batches one after the other; the
// first is submitted with p.Go ([crew.Pool.Go]) by the call that seals a
// batch ([Batcher.Add], [Batcher.Flush], [Batcher.Close] or the timer),
// which waits if p's queue is bounded and full ([crew.WithNonBlocking]:
// the flusher then runs on a goroutine of its own), and runs the flusher
// itself if p was stopped (Flush and Close run it on a goroutine of its
// own, so that their ctx can still end their wait). Further flushers, for
// a backlog, are submitted with p.TryGo ([crew.Pool.TryGo]) and skipped
// if p has no room. Should p's Shutdown ([crew.Pool.Shutdown]) drop a
// flusher queued on it, the Batcher learns of it when the deadline passes
// (see [crew.Pool.Done]; it keeps a goroutine that waits for that until
// Close) and flushes the batches on a goroutine of its own. p must not be
// nil, and must have been made by [crew.New] (a zero Pool runs nothing).
func WithPool(p *crew.Pool) Option {
	return func(s *settings) {
		switch {
		case p == nil:
			s.errs = append(s.errs, invalid("WithPool: nil pool"))
		case p.Stats().MaxWorkers == 0:
			s.errs = append(s.errs, invalid("WithPool: zero crew.Pool, not made by crew.New"))
		default:
			s.pool = p
		}
	}
}

// WithMaxPending bounds the items accepted but not finished (buffered,
// waiting for a flush, being flushed or retried) to n, and sets what
// [Batcher.Add] does at the bound ([Block], [Fail] or [DropOldest]). n
// should be at least the batch size, or batches are sealed by the timer
// only; [math.MaxInt] means no bound. n must be positive. Without this
// option the bound is 4*(flushes+1)*maxItems, four full batches for each
// flush slot and for the open batch, with Block.
func WithMaxPending(n int, policy FullPolicy) Option {
	return func(s *settings) {
		switch {
		case n <= 0:
			s.errs = append(s.errs, invalid("WithMaxPending(%d): n must be positive", n))
		case policy < Block || policy > DropOldest:
			s.errs = append(s.errs, invalid("WithMaxPending: unknown policy %v", policy))
		default:
			s.maxPending, s.onFull = n, policy
		}
	}
}

// WithRetry calls a failing flush again as r says (see [crew.Retry]): up
// to r.Attempts calls in all, waiting between them a delay that starts at
// r.Delay and doubles up to r.MaxDelay, with jitter, each call bounded by
// r.Timeout if set. A flush that returns an error wrapped with
// [crew.Permanent] or panics is not called again; the error handler then
// gets the error inside the wrapper. The flush keeps its concurrency slot
// while it waits. The default is a single attempt. An invalid r is
// reported like any invalid option.
func WithRetry(r crew.Retry) Option {
	return func(s *settings) {
		if why := retry.Check(r.Attempts, r.Delay, r.MaxDelay, r.Timeout); why != "" {
			s.errs = append(s.errs, invalid("WithRetry(%+v): %s", r, why))
			return
		}
		s.retry = r
	}
}

// WithErrorHandler sets the function that receives the items of a batch
// whose last flush attempt failed, with that attempt's error, and each
// item dropped by [DropOldest], with [ErrDropped]. It is called from the
// goroutine that flushed (or dropped, see DropOldest; [Batcher.Close]'s,
// for the batches a Close that gives up abandons), with a context that is
// never canceled, and must not keep items after it returns: the slice is
// reused. A panic in it is logged. It may add the items back for a later
// try with [Batcher.TryAdd], or with [Batcher.Add] and a deadline: at the
// pending bound, the room Add waits for may come only when this batch
// finishes, after the handler returns (a Flush or Close from the handler
// would wait for it likewise, for ever). With DropOldest, such an Add or
// TryAdd drops at most one item, which goes to the handler after this call
// returns (see DropOldest). The default handler logs failed flushes with
// the [log] package and ignores drops, which [Stats] counts. T must be the
// [Batcher]'s item type and h not nil.
func WithErrorHandler[T any](h func(ctx context.Context, items []T, err error)) Option {
	return func(s *settings) {
		if h == nil {
			s.errs = append(s.errs, invalid("WithErrorHandler: nil handler"))
			return
		}
		s.onError = h
	}
}
