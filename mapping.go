package crew

import (
	"context"
	"iter"
	"sync"
)

// indexFIFOs are the queues that finished slice helpers hand on to new
// ones: their tasks are just their indexes.
var indexFIFOs sync.Pool

// Map calls fn for every element of items on p, concurrently, and returns
// the results in the order of items. It is [MapErr] with an fn that cannot
// fail: the error is a [*PanicError] if fn panicked, or the cause of ctx if
// ctx was cancelled before every element started (those are skipped).
func Map[T, R any](ctx context.Context, p *Pool, items []T, fn func(context.Context, T) R, opts ...GroupOption) ([]R, error) {
	if fn == nil {
		return nil, ErrNilTask
	}
	return MapErr(ctx, p, items, func(ctx context.Context, v T) (R, error) { return fn(ctx, v), nil }, opts...)
}

// MapErr calls fn for every element of items on p, concurrently, and returns
// the results in the order of items: out[i] is what fn returned for
// items[i], even with an error; the zero value if fn panicked or never ran.
// It blocks until every call has returned, running calls itself meanwhile
// in a slot of p's, as [Group.Wait] does.
//
// Errors follow [Group]'s policy: the first error (or panic) cancels the
// context the other calls receive and skips the elements that have not
// started; [WithAllErrors] runs them all and joins every error in the
// order of items. [WithLimit] bounds the calls running at once,
// [WithTaskTimeout] gives each a deadline. MapErr allocates the result
// slice and a group; nothing per element. It returns [ErrNilTask] if fn is
// nil, and an error wrapping [ErrInvalid] if ctx is nil or an option is
// nil or invalid. [Map], [ForEach] and the Seq forms ([MapSeq],
// [MapErrSeq], [ForEachSeq]) follow the same rules.
func MapErr[T, R any](ctx context.Context, p *Pool, items []T, fn func(context.Context, T) (R, error), opts ...GroupOption) ([]R, error) {
	if fn == nil {
		return nil, ErrNilTask
	}
	out := make([]R, len(items))
	var c core[struct{}]
	c.exec = func(ctx context.Context, i int, _ struct{}) error {
		var err error
		out[i], err = fn(ctx, items[i])
		return err
	}
	c.unset = func(i int) {
		var zero R
		out[i] = zero
	}
	if err := c.init(ctx, p, opts, &indexFIFOs); err != nil {
		return nil, err
	}
	c.pushN(len(items))
	return out, c.wait()
}

// ForEach calls fn for every element of items on p, concurrently, and
// returns when every call has returned, with [MapErr]'s error policy and
// options.
func ForEach[T any](ctx context.Context, p *Pool, items []T, fn func(context.Context, T) error, opts ...GroupOption) error {
	if fn == nil {
		return ErrNilTask
	}
	var c core[struct{}]
	c.exec = func(ctx context.Context, i int, _ struct{}) error { return fn(ctx, items[i]) }
	if err := c.init(ctx, p, opts, &indexFIFOs); err != nil {
		return err
	}
	c.pushN(len(items))
	return c.wait()
}

// MapSeq is [Map] over an iterator: see [MapErrSeq].
func MapSeq[T, R any](ctx context.Context, p *Pool, seq iter.Seq[T], fn func(context.Context, T) R, opts ...GroupOption) ([]R, error) {
	if fn == nil {
		return nil, ErrNilTask
	}
	return MapErrSeq(ctx, p, seq, func(ctx context.Context, v T) (R, error) { return fn(ctx, v), nil }, opts...)
}

// MapErrSeq is [MapErr] over an iterator: it calls fn for every value seq
// yields and returns the results in the order they were yielded.
//
// It pulls values from seq on the calling goroutine only as fast as they
// are processed: at most a window of values is pulled and not yet done,
// the [WithLimit] limit if given, else the pool's worker limit when
// MapErrSeq starts. While the window is full it waits, running calls
// itself in a slot of p's, as [Group.Wait] does. Once the group is
// cancelled (by an error or ctx) it stops pulling, and if that left a
// value unprocessed the error says why (the first error, or the
// cancellation's cause: ctx's, or [ErrStopped]). The results grow in
// chunks and are copied once into the returned slice, which is nil if seq
// yields nothing (MapErr returns an empty slice for empty items).
//
// If seq panics or calls [runtime.Goexit], MapErrSeq waits for the calls
// already started, passes their panics to the pool's panic handler (there
// is no result to report them in), and lets seq's panic or Goexit go on.
func MapErrSeq[T, R any](ctx context.Context, p *Pool, seq iter.Seq[T], fn func(context.Context, T) (R, error), opts ...GroupOption) ([]R, error) {
	if fn == nil {
		return nil, ErrNilTask
	}
	var out slots[R]
	var c core[T]
	c.exec = func(ctx context.Context, i int, v T) error {
		r, err := fn(ctx, v)
		*out.at(i) = r
		return err
	}
	c.grow = out.grow
	c.unset = out.unset
	if err := c.init(ctx, p, opts, nil); err != nil {
		return nil, err
	}
	feed(&c, seq)
	err := c.wait()
	return out.collect(c.seq), err
}

// ForEachSeq calls fn for every value seq yields, concurrently on p, and
// returns when every call has returned. It pulls values as [MapErrSeq]
// does, so it processes an iterator of any length in bounded memory, deals
// with a seq that panics as MapErrSeq does, and has [MapErr]'s error policy
// and options.
func ForEachSeq[T any](ctx context.Context, p *Pool, seq iter.Seq[T], fn func(context.Context, T) error, opts ...GroupOption) error {
	if fn == nil {
		return ErrNilTask
	}
	var c core[T]
	c.exec = func(ctx context.Context, _ int, v T) error { return fn(ctx, v) }
	if err := c.init(ctx, p, opts, nil); err != nil {
		return err
	}
	feed(&c, seq)
	return c.wait()
}

// feed pushes the values of seq into c, keeping at most a window of them
// pulled and unfinished: it waits for room before it pulls the next. Once
// the group is cancelled, the next value pulled is the last: it does not
// run, and the group's outcome reports the cancellation's cause. Should
// seq panic or call runtime.Goexit, feed cancels the group and waits for
// the calls already started before the unwind goes on, so that none runs
// after its caller has returned; that panic, not one of the calls', goes
// on, and the calls' panics go to the pool's panic handler. (A call that
// feed ran itself and that crashes the program is not waited for: it
// never finishes.)
func feed[T any](c *core[T], seq iter.Seq[T]) {
	if seq == nil {
		c.fail(ErrNilTask)
		return
	}
	window := c.cfg.limit
	if window == 0 {
		window = c.p.maxWorkers()
	}
	returned := false
	defer func() {
		if !returned && !c.crashing.Load() {
			c.cancel(context.Canceled)
			_, _, unseen := c.finish(true)
			c.handOver(unseen)
		}
	}()
	for v := range seq {
		if c.ctx.Err() != nil {
			// v, and whatever seq had left, never run: Wait reports why,
			// as it does for queued tasks the cancellation skipped.
			c.mu.Lock()
			c.skipped++
			c.mu.Unlock()
			break
		}
		if c.push(v, false) != nil {
			break
		}
		c.await(window - 1)
	}
	returned = true
}
