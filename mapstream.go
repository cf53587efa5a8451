package crew

import (
	"context"
	"iter"
)

// MapStream is [MapErrStream] with an fn that cannot fail: the errors it
// yields are a [*PanicError] where fn panicked, and the reason the values
// left when the stream ended early were not processed.
func MapStream[T, R any](ctx context.Context, p *Pool, seq iter.Seq[T], fn func(context.Context, T) R, opts ...GroupOption) iter.Seq2[R, error] {
	if fn == nil {
		return MapErrStream[T, R](ctx, p, seq, nil, opts...)
	}
	return MapErrStream(ctx, p, seq, func(ctx context.Context, v T) (R, error) { return fn(ctx, v), nil }, opts...)
}

// MapErrStream returns an iterator that calls fn for every value seq
// yields, concurrently on p, and yields each call's result and error in the
// order of seq, as soon as it and those before it are done. Nothing runs
// until the iterator is ranged over, and each range runs the calls anew.
//
// Memory is bounded: at most a window of values are pulled from seq and
// not yet yielded, the [WithLimit] limit if given (which also bounds the
// calls running at once), else the pool's worker limit, and at most 65,536. While the window
// is full, or the next result is not done, the ranging goroutine waits,
// running calls itself meanwhile in a slot of p's, as [Group.Wait] does.
// A slow head of the line therefore holds back the calls after it: the
// window is also the most results that wait for it. As with Group.Wait, a
// call must not wait for something the loop's body does after it: the
// ranging goroutine may be the one running it.
//
// Errors: without [WithAllErrors], the first error (or panic, yielded as a
// [*PanicError]) cancels the context the other calls receive, and the
// stream ends after yielding the first element whose error is not nil, in
// the order of seq (an element that was running then may yield the
// context's error). [WithAllErrors] yields every element with its own
// error and goes on; add [WithCancelOnError] to cancel on the first error
// all the same. Once the context is cancelled (by an error, or ctx), the
// values not yet started are skipped: the first of them is yielded with
// the cancellation's cause and the stream ends. A pool that stops ends it
// likewise with [ErrStopped]. [WithRepanic] re-panics on the ranging
// goroutine, at the panicked element's turn, instead of yielding it.
// [WithTaskTimeout] gives each call a deadline.
//
// When the loop over the iterator breaks (or panics, or seq panics), the
// calls still running see their context cancelled, the values not yet
// started never run, and the iterator returns once every call has
// returned; panics of calls whose results were not yielded go to the
// pool's panic handler. No goroutine is left behind.
//
// Bad input is yielded as the stream's only element: [ErrNilTask] for a
// nil fn or seq, an error wrapping [ErrInvalid] for a nil ctx or an
// invalid option, or for a nil or zero pool. Cost: a group and a window of
// result slots per range, nothing per element beyond [Group.Go]'s.
func MapErrStream[T, R any](ctx context.Context, p *Pool, seq iter.Seq[T], fn func(context.Context, T) (R, error), opts ...GroupOption) iter.Seq2[R, error] {
	return func(yield func(R, error) bool) {
		var zero R
		if fn == nil || seq == nil {
			yield(zero, ErrNilTask)
			return
		}
		s := &resultStream[T, R]{fn: fn}
		c := &s.c
		c.exec = s.exec
		c.unset = s.unset
		c.hooks = &coreHooks{settle: s.settle, until: s.headReady}
		if err := c.init(ctx, p, opts, nil); err != nil {
			yield(zero, err)
			return
		}
		window := c.cfg.limit
		if window == 0 {
			window = p.maxWorkers()
		}
		s.slots = make([]streamResult[R], min(window, maxStreamWindow))
		s.run(seq, yield)
	}
}

// maxStreamWindow bounds the window of MapErrStream, whatever the limits.
const maxStreamWindow = 1 << 16

// resultStream is a range over MapErrStream's iterator: a group whose
// results wait in a ring of slots, indexed by their sequence number modulo
// the window, until the ranging goroutine yields them in order.
type resultStream[T, R any] struct {
	c      core[T]
	fn     func(context.Context, T) (R, error)
	slots  []streamResult[R] // guarded by c.mu, except r while its task runs
	head   int               // the sequence number of the next result to yield; guarded by c.mu
	pushed int               // values pushed into the group
}

// streamResult is the outcome of one call, written by its task (r) and by
// settle (err, ready), cleared when it is yielded.
type streamResult[R any] struct {
	r       R
	err     error
	ready   bool
	skipped bool // the call never ran: err is the cancellation's cause
}

func (s *resultStream[T, R]) exec(ctx context.Context, seq int, v T) error {
	r, err := s.fn(ctx, v)
	s.slots[seq%len(s.slots)].r = r // the slot is the task's until settle
	return err
}

// unset clears the result of a call that panicked or called
// runtime.Goexit, in place of an earlier call's (WithRetry).
func (s *resultStream[T, R]) unset(seq int) {
	var zero R
	s.slots[seq%len(s.slots)].r = zero
}

// settle marks a call's result ready, and returns the error to cancel the
// group with: the first error, unless every error is yielded and none
// cancels. Called under c.mu.
func (s *resultStream[T, R]) settle(seq int, err error, skipped bool) error {
	sl := &s.slots[seq%len(s.slots)]
	sl.err, sl.ready, sl.skipped = err, true, skipped
	if err != nil && (!s.c.cfg.all || s.c.cfg.cancelOn) {
		return err
	}
	return nil
}

// headReady reports whether the next result to yield is done. Called under
// c.mu, as await's condition.
func (s *resultStream[T, R]) headReady() bool {
	return s.head < s.pushed && s.slots[s.head%len(s.slots)].ready
}

// run pulls values from seq into the group and yields the results in
// order, keeping at most a window of values pulled and not yielded.
func (s *resultStream[T, R]) run(seq iter.Seq[T], yield func(R, error) bool) {
	c := &s.c
	defer s.close()
	var refused error // the pool's refusal of a value
	for v := range seq {
		cancelled := c.ctx.Err() != nil
		if refused = c.push(v, false); refused != nil {
			break
		}
		c.mu.Lock()
		s.pushed++
		c.mu.Unlock()
		if cancelled {
			break // v is skipped: its turn yields why, and ends the stream
		}
		for s.head < s.pushed {
			if s.pushed-s.head < len(s.slots) && !s.ready() {
				break // room to pull the next value
			}
			if !s.yieldNext(yield) {
				return
			}
		}
	}
	for s.head < s.pushed {
		if !s.yieldNext(yield) {
			return
		}
	}
	if refused != nil {
		var zero R
		yield(zero, refused)
	}
}

// ready reports whether the next result is done, without waiting.
func (s *resultStream[T, R]) ready() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.headReady()
}

// yieldNext waits for the next result, helping as Group.Wait does, and
// yields it. It reports whether the stream goes on: the consumer did not
// stop, and the result's error does not end the stream.
func (s *resultStream[T, R]) yieldNext(yield func(R, error) bool) bool {
	c := &s.c
	c.await(0) // every pushed call unfinished until settled: the head is ready
	c.mu.Lock()
	sl := &s.slots[s.head%len(s.slots)]
	r, err, skipped := sl.r, sl.err, sl.skipped
	*sl = streamResult[R]{}
	s.head++
	c.mu.Unlock()
	if pe, ok := err.(*PanicError); ok && c.cfg.repanic {
		panic(pe) // close, deferred, waits for the other calls
	}
	// After a skipped value nothing runs: the stream ends with its cause.
	return yield(r, err) && (err == nil || c.cfg.all && !skipped)
}

// close ends the range: it cancels the calls still running or queued,
// waits for them, and hands the panics of results never yielded to the
// pool's panic handler.
func (s *resultStream[T, R]) close() {
	c := &s.c
	if c.crashing.Load() {
		return // a call is crashing the program: it never finishes
	}
	c.cancel(context.Canceled)
	c.mu.Lock()
	c.hooks.until = nil // finish waits for every call, not for the next result
	c.mu.Unlock()
	c.finish(true) // settle took every outcome: finish has no panic of its own to hand over
	var unseen []*PanicError
	for i := s.head; i < s.pushed; i++ {
		if pe, ok := s.slots[i%len(s.slots)].err.(*PanicError); ok {
			unseen = append(unseen, pe)
		}
	}
	c.handOver(unseen)
}
