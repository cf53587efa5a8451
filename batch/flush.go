package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/retry"
)

// A flushWaiter is a Flush call waiting for the batches sealed before it.
type flushWaiter struct {
	before uint64        // it waits for the batches numbered below this
	done   chan struct{} // closed when they are finished
	err    error         // the first failure among them, set before done closes
}

// outcome is what happened to one batch.
type outcome struct {
	err        error         // nil if flushed
	attempts   int           // flush calls made
	began      time.Time     // when the last call began
	latency    time.Duration // duration of the last call
	handedOver bool          // flushed, or given to the error handler
}

// A launch is how to start the flusher that startLocked counted.
type launch uint8

const (
	noLaunch     launch = iota // no flusher to start
	launchOnPool               // submit it to the pool; it is counted in queued
	launchHere                 // run it on the caller's goroutine: the pool gave up
)

// startLocked reports whether a flusher should be started, and counts it
// if so: when batches wait, no flusher is starting already (one that is
// will take them, and starts the next if more wait) and the concurrency
// limit allows. Flushers thus start one after the other while a backlog
// lasts, like the Go scheduler wakes one spinning thread at a time.
func (b *Batcher[T]) startLocked() launch {
	if b.head == len(b.ready) || b.flushing != len(b.inflight) || b.flushing == b.maxFlushes {
		return noLaunch
	}
	b.flushing++
	if b.poolGone {
		return launchHere
	}
	b.queued++
	return launchOnPool
}

// dispatch starts the flusher that startLocked counted. If the pool
// refuses it because it stopped, the flusher runs here instead, so that no
// batch is left behind.
func (b *Batcher[T]) dispatch(l launch) {
	if b.submitFlusher(l) {
		b.drain(false)
	}
}

// dispatchAside is dispatch for Flush and Close, which watch a context
// meanwhile: a flusher that the pool will not run goes on a goroutine of
// its own, so that they can give up on it as on one the pool runs.
func (b *Batcher[T]) dispatchAside(l launch) {
	if b.submitFlusher(l) {
		go b.drain(false)
	}
}

// submitFlusher submits l's flusher to the pool, and reports whether the
// caller must run it instead: the pool gave up, or stopped. One that the
// full queue of a pool built WithNonBlocking refuses runs on a goroutine
// of its own: an Add must not wait for flushes, other producers' included.
func (b *Batcher[T]) submitFlusher(l launch) (runHere bool) {
	if l != launchOnPool {
		return l == launchHere
	}
	err := b.pool.Go(b.drainFn)
	switch {
	case err == nil || !b.unqueue():
		return false
	case errors.Is(err, crew.ErrQueueFull):
		go b.drain(false)
		return false
	}
	return true
}

// unqueue counts out of queued a flusher that the pool refused, and
// reports whether it still counts as a flusher: poolGaveUp may have
// written it off meanwhile, and then started one in its place if batches
// wait.
func (b *Batcher[T]) unqueue() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.poolGone {
		return false
	}
	b.queued--
	return true
}

// poolGaveUp runs once a pool given by WithPool has given up on its queue
// (Shutdown's deadline dropped it): the flushers still queued on it, or
// being submitted, will never begin, so they no longer count, and a
// flusher of the caller's own takes their batches, as for a stopped pool.
// One that a worker took just before the drop and begins late finds
// itself written off and leaves the batches to that one.
func (b *Batcher[T]) poolGaveUp() {
	b.mu.Lock()
	b.poolGone = true
	b.flushing -= b.queued
	b.queued = 0
	start := b.startLocked()
	b.drainedLocked()
	b.mu.Unlock()
	b.dispatch(start)
}

// drain is a flusher: it flushes queued batches until there is none left.
// fromPool says that the pool started it, rather than the caller running
// it in place of one the pool refused. Taking a batch, it starts another
// flusher if more batches wait; if the pool cannot take that one at once,
// this flusher gets through the backlog alone. Should the flush function
// or the error handler call runtime.Goexit (t.FailNow in a test), the
// batch fails with crew.ErrGoexit and another flusher takes the rest, so
// that nothing waits for ever.
func (b *Batcher[T]) drain(fromPool bool) {
	var (
		s        sealed[T] // the batch being delivered
		o        outcome
		returned bool
	)
	defer func() {
		if returned {
			return
		}
		defer func() { // also if the handler calls Goexit again
			clear(s.items)
			b.mu.Lock()
			b.finishLocked(s, o)
			b.flushing--
			start := b.startLocked()
			b.drainedLocked()
			b.mu.Unlock()
			b.dispatch(start)
		}()
		if !o.handedOver { // the flush function called Goexit, or a pool hook
			if o.attempts > 0 {
				o.latency = time.Since(o.began)
			}
			o.err = crew.ErrGoexit
			o.handedOver = true
			b.handOver(s.items, o.err)
		}
	}()
	b.mu.Lock()
	if fromPool {
		if b.queued == 0 { // written off by poolGaveUp
			b.mu.Unlock()
			returned = true
			return
		}
		b.queued--
	}
	for b.head < len(b.ready) {
		s, o = b.takeLocked(), outcome{}
		b.inflight = append(b.inflight, s.seq)
		next := b.startLocked()
		if next == launchHere { // the pool gave up: this flusher goes on alone
			b.flushing--
		}
		b.mu.Unlock()
		if next == launchOnPool && !b.pool.TryGo(b.drainFn) && b.unqueue() {
			b.mu.Lock()
			b.flushing-- // this flusher goes on alone
			b.mu.Unlock()
		}
		b.deliver(s.items, &o)
		clear(s.items)
		b.mu.Lock()
		b.finishLocked(s, o)
	}
	b.flushing--
	b.drainedLocked()
	b.mu.Unlock()
	returned = true
}

// takeLocked removes the oldest sealed batch from the queue, which must not
// be empty, and returns it.
func (b *Batcher[T]) takeLocked() sealed[T] {
	s := b.ready[b.head]
	b.ready[b.head] = sealed[T]{}
	b.head++
	if b.head == len(b.ready) {
		b.ready, b.head = b.ready[:0], 0
	}
	return s
}

// drainedLocked closes drained, once Close has made it, when no flusher is
// under way and no dropped item is on its way to the error handler.
func (b *Batcher[T]) drainedLocked() {
	if b.flushing == 0 && b.drop == noDrop && b.drained != nil {
		select {
		case <-b.drained:
		default:
			close(b.drained)
		}
	}
}

// deliver flushes items, retrying as the policy says, and hands them to
// the error handler if the last attempt fails.
func (b *Batcher[T]) deliver(items []T, o *outcome) {
	for {
		o.attempts++
		o.began = time.Now()
		err := b.call(items)
		o.latency = time.Since(o.began)
		if err == nil {
			o.handedOver = true // nothing to hand over
			return
		}
		if _, panicked := err.(*crew.PanicError); panicked || !again(b.retry, o.attempts, err) ||
			b.flushCtx.Err() != nil || !wait(b.flushCtx, b.retry, o.attempts) {
			o.err = retry.Unwrap(err)
			break // finishLocked records this attempt's latency
		}
		b.mu.Lock()
		b.stats.Latency.observe(o.latency) // an attempt before the last
		b.mu.Unlock()
	}
	o.handedOver = true // if the handler calls Goexit, it has the items
	b.handOver(items, o.err)
}

// call calls the flush function once, turning a panic into a
// *crew.PanicError, panic(nil) under GODEBUG=panicnil=1 included: recover
// returns nil for it as for runtime.Goexit, whose unwinding goes on.
func (b *Batcher[T]) call(items []T) (err error) {
	returned := false
	defer func() {
		if !returned {
			err = &crew.PanicError{Value: recover(), Stack: debug.Stack()}
		}
	}()
	ctx := b.flushCtx
	if b.retry.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.retry.Timeout)
		defer cancel()
	}
	err = b.flushFn(ctx, items)
	returned = true
	return err
}

// finishLocked records the outcome of batch s, recycles its slice and
// wakes whoever waits for it.
func (b *Batcher[T]) finishLocked(s sealed[T], o outcome) {
	n := len(s.items)
	b.pending -= n
	if o.attempts > 0 {
		b.stats.Latency.observe(o.latency)
		b.stats.Retries += uint64(o.attempts - 1)
	}
	switch {
	case o.err != nil:
		b.stats.FailedBatches++
		b.stats.Failed += uint64(n)
		err := fmt.Errorf("batch: %d items handed to the error handler: %w", n, o.err)
		for _, w := range b.waiters {
			if s.seq < w.before && w.err == nil {
				w.err = err
			}
		}
		if b.closed && b.closeErr == nil {
			b.closeErr = err
		}
	case o.attempts > 0:
		b.stats.Batches++
		b.stats.Flushed += uint64(n)
	}
	// From the end, keeping the order: abort lists the batches it
	// abandons last, in the reverse of the order it finishes them, so that
	// each is found and removed at once.
	for i := len(b.inflight) - 1; i >= 0; i-- {
		if b.inflight[i] == s.seq {
			b.inflight = slices.Delete(b.inflight, i, i+1)
			break
		}
	}
	if len(b.free) < b.maxFree && cap(s.items) >= b.bufCap() { // not a copy (see sealLocked)
		b.free = append(b.free, s.items[:0])
	}
	if b.space != nil && b.pending < b.maxPending {
		close(b.space)
		b.space = nil
	}
	if len(b.waiters) > 0 {
		b.wakeWaitersLocked()
	}
}

// lowestUnfinishedLocked returns the sequence number of the oldest batch
// not finished, the open batch's if all sealed ones are.
func (b *Batcher[T]) lowestUnfinishedLocked() uint64 {
	low := b.seq
	if b.head < len(b.ready) {
		low = b.ready[b.head].seq
	}
	for _, seq := range b.inflight {
		low = min(low, seq)
	}
	return low
}

// wakeWaitersLocked releases the Flush calls whose batches are finished.
func (b *Batcher[T]) wakeWaitersLocked() {
	low := b.lowestUnfinishedLocked()
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if w.before <= low {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
}

// abort is Close giving up when ctx ends: the running flushes are
// canceled and the batches no flusher took yet go to the error handler.
// It reports false, giving up on nothing, if the drain has completed
// meanwhile (or completed as ctx ended, select picking ctx.Done): every
// batch is finished, and Close reports their outcome.
func (b *Batcher[T]) abort(ctx context.Context) (gaveUp bool) {
	if b.giveUpHook != nil {
		b.giveUpHook()
	}
	b.mu.Lock()
	select {
	case <-b.drained:
		b.mu.Unlock()
		return false
	default:
	}
	left := slices.Clone(b.ready[b.head:])
	clear(b.ready)
	b.ready, b.head = b.ready[:0], 0
	for _, s := range slices.Backward(left) {
		b.inflight = append(b.inflight, s.seq)
	}
	b.mu.Unlock()
	// Cancel once the batches not yet started are taken: a flusher whose
	// flush the cancellation ends must not take one of them and call the
	// flush function with a context already cancelled.
	b.cancel()
	if b.ownPool {
		// The pool's workers end when the running flush calls return.
		defer func() { go b.pool.Stop() }() // even if a handler calls Goexit
	}
	b.abandon(left, fmt.Errorf("%w before the flush: %w", ErrClosed, ctx.Err()))
	return true
}

// abandon hands each batch in left to the error handler with err and
// finishes it. A handler that calls runtime.Goexit (t.FailNow in a test)
// ends the caller's goroutine, but not before every batch is finished: the
// rest goes on in a deferred call.
func (b *Batcher[T]) abandon(left []sealed[T], err error) {
	i, handing := 0, false
	defer func() {
		if handing { // the handler called runtime.Goexit
			b.finishAbandoned(left[i], err)
			b.abandon(left[i+1:], err)
		}
	}()
	for ; i < len(left); i++ {
		handing = true
		b.handOver(left[i].items, err)
		handing = false
		b.finishAbandoned(left[i], err)
	}
}

// finishAbandoned finishes a batch that abandon handed to the error
// handler with err.
func (b *Batcher[T]) finishAbandoned(s sealed[T], err error) {
	clear(s.items)
	b.mu.Lock()
	b.finishLocked(s, outcome{err: err})
	b.mu.Unlock()
}
