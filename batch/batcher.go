package batch

import (
	"context"
	"errors"
	"log"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/queue"
)

// A Batcher collects items into batches and flushes them. All its methods
// are safe for concurrent use. Create one with [New] and call
// [Batcher.Close] when done: until then it may hold unflushed items. The
// methods of a zero Batcher, or of a nil *Batcher, accept nothing and
// report an error wrapping [crew.ErrInvalid]: [Batcher.Add],
// [Batcher.Flush] and Close return it, [Batcher.TryAdd] reports false and
// [Batcher.Stats] zeros.
type Batcher[T any] struct {
	// Set by New, read-only afterwards.
	flushFn    func(context.Context, []T) error
	sizeFn     func(T) int
	onError    func(context.Context, []T, error)
	maxItems   int
	maxBytes   int
	maxWait    time.Duration
	maxPending int
	onFull     FullPolicy
	maxFlushes int
	maxFree    int // flushed slices kept for reuse
	retry      crew.Retry
	pool       *crew.Pool
	ownPool    bool
	drainFn    func()          // b.drain(true), made once so that dispatching does not allocate
	flushCtx   context.Context // passed to flushes; canceled when Close gives up
	cancel     context.CancelFunc
	handlerCtx context.Context // passed to the error handler; never canceled

	mu       sync.Mutex
	buf      []T       // the open batch
	bufBytes int       // its size by sizeFn (see dropOldestLocked)
	bufStart time.Time // when its first item arrived
	timer    *time.Timer
	seq      uint64      // sequence number the open batch gets when sealed
	ready    []sealed[T] // sealed batches waiting for a flusher, from head on
	head     int
	free     [][]T          // emptied batch slices for reuse, at most maxFree
	inflight []uint64       // sequence numbers of the batches being flushed
	flushing int            // flusher goroutines started and not finished
	queued   int            // of those, flushers submitted to the pool and not begun (see poolGaveUp)
	poolGone bool           // WithPool: the pool gave up on its queue (see poolGaveUp)
	unlink   func() bool    // WithPool: undoes the link to the pool's end
	handlers int            // error handler calls under way (see dropOldestLocked)
	drop     dropState      // what becomes of dropped (Close waits for noDrop)
	dropped  [1]T           // the item DropOldest dropped and has not handed over
	pending  int            // items accepted and not finished
	space    chan struct{}  // closed when pending drops or a drop is handed over; made by the first waiter
	waiters  []*flushWaiter // Flush calls waiting for their batches
	closed   bool
	drained  chan struct{} // made by Close, closed when the last flusher and hand-over end
	closeErr error         // first failure of a batch finished after Close began
	stats    Stats

	giveUpHook func() // tests only: run by Close when ctx has ended, before it gives up
}

// A dropState says where the item DropOldest dropped last is on its way
// to the error handler. There is at most one: see dropOldestLocked.
type dropState uint8

const (
	noDrop      dropState = iota // none: the last one was handed over
	dropWaits                    // it waits for a handler call under way to end
	dropHanding                  // it is being handed over
)

// sealed is a batch handed over for flushing.
type sealed[T any] struct {
	items []T
	seq   uint64
}

// New returns a [Batcher] that passes each batch to flush. flush is called
// with a context that is canceled only when [Batcher.Close] gives up
// waiting; it must not keep the slice after it returns, because the slice
// is reused. A flush that returns an error, or panics (the error is then a
// [*crew.PanicError]), is retried and then handed to the error handler
// (see [WithRetry] and [WithErrorHandler]). flush must not call
// [Batcher.Flush] or Close on its Batcher, nor [Batcher.Add] at the
// pending bound: they would wait for it to return, for ever.
//
// By default a batch is sealed at [DefaultMaxItems] items or after
// [DefaultMaxWait], batches are flushed one at a time on a crew pool of
// the Batcher's own, a failed flush is not retried, and Add blocks while
// 4*(flushes+1)*maxItems items are pending (see [WithMaxPending]).
//
// New panics, with an error wrapping [crew.ErrInvalid], if flush is nil,
// an option is invalid, or a function given to [WithMaxBytes] or
// WithErrorHandler is for another item type than T.
func New[T any](flush func(ctx context.Context, items []T) error, opts ...Option) *Batcher[T] {
	s := defaultSettings()
	if flush == nil {
		s.errs = append(s.errs, invalid("New: nil flush function"))
	}
	for i, opt := range opts {
		if opt == nil {
			s.errs = append(s.errs, invalid("New: option %d is nil", i))
			continue
		}
		opt(&s)
	}
	sizeFn, ok := s.sizeFn.(func(T) int)
	if s.sizeFn != nil && !ok {
		s.errs = append(s.errs, invalid("WithMaxBytes: size function is %T, want %v", s.sizeFn, reflect.TypeFor[func(T) int]()))
	}
	onError, ok := s.onError.(func(context.Context, []T, error))
	if s.onError != nil && !ok {
		s.errs = append(s.errs, invalid("WithErrorHandler: handler is %T, want %v", s.onError, reflect.TypeFor[func(context.Context, []T, error)]()))
	}
	if len(s.errs) > 0 {
		panic(errors.Join(s.errs...))
	}
	if onError == nil {
		onError = logFailure[T]
	}
	b := &Batcher[T]{
		flushFn:    flush,
		sizeFn:     sizeFn,
		onError:    onError,
		maxItems:   s.maxItems,
		maxBytes:   s.maxBytes,
		maxWait:    s.maxWait,
		maxPending: s.maxPending,
		onFull:     s.onFull,
		maxFlushes: s.maxFlushes,
		retry:      s.retry,
		pool:       s.pool,
		inflight:   make([]uint64, 0, min(s.maxFlushes, maxFreeBatches)), // grows past that if need be
	}
	if b.maxPending == 0 {
		b.maxPending = defaultMaxPending(b.maxItems, b.maxFlushes)
	}
	// Keep every batch slice the bound lets exist, up to a limit (the +2
	// added after the min, which an unbounded maxPending would overflow).
	b.maxFree = min(b.maxPending/b.maxItems, maxFreeBatches-2) + 2
	if b.pool == nil {
		b.pool, b.ownPool = crew.New(s.maxFlushes), true
	}
	b.drainFn = func() { b.drain(true) }
	if !b.ownPool {
		b.unlink = context.AfterFunc(poolEnd{context.Background(), b.pool.Done()}, b.poolGaveUp)
	}
	b.flushCtx, b.cancel = context.WithCancel(context.Background())
	b.handlerCtx = context.WithoutCancel(b.flushCtx)
	return b
}

// poolEnd is a context that ends when a pool has ended (see
// crew.Pool.Done), for context.AfterFunc: the Batcher learns that the
// flushers it queued on the pool will never begin.
type poolEnd struct {
	context.Context // no deadline, no values
	done            <-chan struct{}
}

func (c poolEnd) Done() <-chan struct{} { return c.done }

func (c poolEnd) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// maxFreeBatches bounds the number of flushed slices kept for reuse.
const maxFreeBatches = 64

// defaultMaxPending returns the pending bound used when WithMaxPending is
// not given: four full batches for each flush slot and for the open batch,
// enough to keep the flushes busy.
func defaultMaxPending(maxItems, maxFlushes int) int {
	if maxFlushes >= math.MaxInt/8 || maxItems > math.MaxInt/4/(maxFlushes+1) {
		return math.MaxInt
	}
	return 4 * (maxFlushes + 1) * maxItems
}

// logFailure is the error handler used when none is set.
func logFailure[T any](_ context.Context, items []T, err error) {
	if !errors.Is(err, ErrDropped) {
		log.Printf("batch: %d items not flushed: %v", len(items), err)
	}
}

// errZeroBatcher is returned by the methods of a Batcher not made by New.
var errZeroBatcher = invalid("Batcher: not made by batch.New")

// errMustWait tells Add that there is no room for an item yet.
var errMustWait = errors.New("batch: must wait for room")

// Add adds item to the open batch, which it may seal and hand to a flush.
// It returns once the item is accepted, without waiting for the flush.
// It waits only when the pending bound is reached with the [Block] policy
// (or [DropOldest] with nothing to drop, see DropOldest), until a flush
// finishes or ctx ends, and then returns ctx.Err(). It returns [ErrFull]
// at the bound with the [Fail] policy, and [ErrClosed] once
// [Batcher.Close] has been called. It returns an error wrapping
// [crew.ErrInvalid], accepting nothing, for a nil ctx, for an item that
// the [WithMaxBytes] size function sizes below 0, and on a Batcher not
// made by [New]. With [WithPool], the Add that seals a batch may first
// wait for room in the pool's queue, whatever ctx (see WithPool).
func (b *Batcher[T]) Add(ctx context.Context, item T) error {
	switch {
	case !b.usable():
		return errZeroBatcher
	case ctx == nil:
		return invalid("Batcher.Add: nil context")
	}
	size, err := b.size(item)
	if err != nil {
		return err
	}
	b.mu.Lock()
	for {
		handOver, err := b.roomLocked()
		if err == nil {
			b.acceptLocked(item, size, handOver)
			return nil
		}
		if err != errMustWait {
			b.mu.Unlock()
			return err
		}
		space := b.spaceLocked()
		b.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
}

// TryAdd is [Batcher.Add] without waiting for room: it reports whether
// item was accepted. It returns false once [Batcher.Close] has been
// called, and at the pending bound unless the policy is [DropOldest] and
// an item could be dropped (see DropOldest). It returns false, too, where
// Add would return an error wrapping [crew.ErrInvalid]. (With [WithPool],
// the TryAdd that seals a batch may still wait for room in the pool's
// queue: see WithPool.)
func (b *Batcher[T]) TryAdd(item T) bool {
	if !b.usable() {
		return false
	}
	size, err := b.size(item)
	if err != nil {
		return false
	}
	b.mu.Lock()
	handOver, err := b.roomLocked()
	if err != nil {
		if err == errMustWait {
			b.stats.Rejected++
		}
		b.mu.Unlock()
		return false
	}
	b.acceptLocked(item, size, handOver)
	return true
}

// acceptLocked appends item, unlocks b.mu, hands over the item that
// DropOldest made room by dropping if handOver says so, and starts a flush
// if a batch was sealed.
func (b *Batcher[T]) acceptLocked(item T, size int, handOver bool) {
	start := b.appendLocked(item, size)
	b.mu.Unlock()
	if !handOver {
		b.dispatch(start)
		return
	}
	// The flusher goes to the pool before the hand-over, which may take
	// long; one that must run here runs after it.
	if b.submitFlusher(start) {
		defer b.drain(false)
	}
	b.handDropOver()
}

// Flush seals the open batch and waits until it and every batch sealed
// before it are finished: flushed, or handed to the error handler. Items
// added during the call may or may not be included. Flush returns nil if
// the batches that finished during the call were flushed, an error
// wrapping the first flush error among them otherwise (the items are with
// the error handler by then; a batch that had failed before the call was
// reported to the handler, not here), ctx.Err() if ctx ends first (the
// flushes go on), and [ErrClosed] once [Batcher.Close] has been called.
// Items that [DropOldest] discarded are in no batch and are not flush
// errors: they go to the error handler as DropOldest says, and Flush does
// not wait for that (Close does). Flush returns an error wrapping
// [crew.ErrInvalid], doing nothing, for a nil ctx and on a Batcher not
// made by [New]. With [WithPool], sealing may first wait for room in the
// pool's queue, whatever ctx (see WithPool).
func (b *Batcher[T]) Flush(ctx context.Context) error {
	switch {
	case !b.usable():
		return errZeroBatcher
	case ctx == nil:
		return invalid("Batcher.Flush: nil context")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	var start launch
	if len(b.buf) > 0 {
		start = b.sealLocked()
	}
	if b.lowestUnfinishedLocked() >= b.seq {
		b.mu.Unlock()
		return nil
	}
	w := &flushWaiter{before: b.seq, done: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	b.dispatchAside(start)
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.done: // finished meanwhile
			return w.err
		default:
		}
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
		return ctx.Err()
	}
}

// Close stops intake, flushes every item accepted, and waits for the
// flushes, retries and error handler calls to finish; then it stops the
// Batcher's own pool (never one given by [WithPool]). [Batcher.Add] and
// [Batcher.TryAdd] calls waiting for room return [ErrClosed]. Close
// returns nil if the last batches were flushed, an error wrapping the
// first flush error of a batch that finished during the call otherwise,
// and ErrClosed if Close was already called. It returns an error wrapping
// [crew.ErrInvalid], leaving the Batcher as it was, for a nil ctx and on a
// Batcher not made by [New].
//
// If ctx ends first, Close gives up: it cancels the context of the running
// flushes (which then skip their remaining retries and go to the error
// handler), hands the batches not yet started to the error handler with an
// error wrapping ErrClosed and ctx.Err(), and returns ctx.Err() without
// waiting for the running flush calls to return. Close returns ctx.Err()
// only when it gave up on a batch or a hand-over: one whose batches have
// all finished by the time it would give up returns their outcome, as
// above, even though ctx has ended. (With WithPool, the seal
// of the last batch may first wait for room in the pool's queue, whatever
// ctx: see WithPool.)
func (b *Batcher[T]) Close(ctx context.Context) error {
	switch {
	case !b.usable():
		return errZeroBatcher
	case ctx == nil:
		return invalid("Batcher.Close: nil context")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.closed = true
	if b.unlink != nil {
		defer b.unlink() // a Batcher closed for good no longer cares
	}
	var start launch
	if len(b.buf) > 0 {
		start = b.sealLocked()
	} else if b.timer != nil {
		b.timer.Stop()
	}
	if b.space != nil {
		close(b.space)
		b.space = nil
	}
	b.drained = make(chan struct{})
	b.drainedLocked()
	drained := b.drained
	b.mu.Unlock()
	b.dispatchAside(start)
	select {
	case <-drained:
	default: // prefer drained when ctx has ended too
		select {
		case <-drained:
		case <-ctx.Done():
			if b.abort(ctx) {
				return ctx.Err()
			}
		}
	}
	b.cancel()
	if b.ownPool {
		b.pool.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeErr
}

// Stats returns a snapshot of the Batcher's counters ([Stats]): zeros on a
// Batcher not made by [New].
func (b *Batcher[T]) Stats() Stats {
	if !b.usable() {
		return Stats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Pending = b.pending
	s.InFlight = len(b.inflight)
	return s
}

// usable reports whether New made b.
func (b *Batcher[T]) usable() bool { return b != nil && b.flushFn != nil }

// size returns the size of item for the byte bound, 0 without one, and an
// error for a negative size.
func (b *Batcher[T]) size(item T) (int, error) {
	if b.sizeFn == nil {
		return 0, nil
	}
	n := b.sizeFn(item)
	if n < 0 {
		return 0, invalid("WithMaxBytes: the size function returned %d, below 0", n)
	}
	return n, nil
}

// roomLocked makes room for one more item if the pending bound and its
// policy allow it without waiting, dropping the oldest item for
// DropOldest: then handOver says that the caller must hand the dropped
// item over (see dropOldestLocked). It returns errMustWait if the caller
// has to wait for room.
func (b *Batcher[T]) roomLocked() (handOver bool, err error) {
	switch {
	case b.closed:
		err = ErrClosed
	case b.maxPending == 0 || b.pending < b.maxPending:
	case b.onFull == Fail:
		b.stats.Rejected++
		err = ErrFull
	case b.onFull == DropOldest:
		if !b.dropOldestLocked() {
			err = errMustWait
		}
		handOver = err == nil && b.drop == dropHanding
	default:
		err = errMustWait
	}
	return handOver, err
}

// appendLocked adds an item of the given size to the open batch, sealing
// batches as the bounds say. It reports whether to start a flusher.
func (b *Batcher[T]) appendLocked(item T, size int) (start launch) {
	// bufBytes < maxBytes while the open batch is not empty, 0 when it
	// is: neither this nor the sum below can overflow.
	if b.maxBytes > 0 && len(b.buf) > 0 && size > b.maxBytes-b.bufBytes {
		start = b.sealLocked()
	}
	if len(b.buf) == 0 {
		if b.buf == nil {
			b.buf = b.newBufLocked()
		}
		b.bufStart = time.Now()
		if b.timer == nil {
			b.timer = time.AfterFunc(b.maxWait, b.onTimer)
		} else {
			b.timer.Reset(b.maxWait)
		}
	}
	b.buf = append(b.buf, item)
	b.bufBytes += size
	b.pending++
	b.stats.Added++
	if len(b.buf) >= b.maxItems || (b.maxBytes > 0 && b.bufBytes >= b.maxBytes) {
		if l := b.sealLocked(); l != noLaunch {
			start = l // at most one of the two seals counts a flusher
		}
	}
	return start
}

// newBufLocked returns an empty slice for a new batch, reusing a flushed
// one if it can.
func (b *Batcher[T]) newBufLocked() []T {
	if buf, ok := queue.PopLast(&b.free); ok {
		return buf
	}
	return make([]T, 0, b.bufCap())
}

// bufCap is the capacity of a new batch's slice.
func (b *Batcher[T]) bufCap() int { return min(b.maxItems, 1024) }

// sealLocked queues the open batch, which must not be empty, for flushing.
// It reports whether to start a flusher for it (see startLocked).
//
// A batch sealed at under a quarter of its slice's capacity (by the timer,
// the byte bound or Flush) that has to wait for a flush slot is queued as
// a copy of its items, and the open batch keeps the slice: while flushes
// are slow, items trickling in would otherwise seal many small batches
// that each hold a full batch's slice, and the bound on pending items
// would not bound memory.
func (b *Batcher[T]) sealLocked() launch {
	b.timer.Stop()
	if b.head > 0 && len(b.ready) == cap(b.ready) {
		n := copy(b.ready, b.ready[b.head:])
		clear(b.ready[n:])
		b.ready, b.head = b.ready[:n], 0
	}
	items, next := b.buf, []T(nil)
	waits := b.head < len(b.ready) || b.flushing >= b.maxFlushes
	if waits && len(items) < cap(items)/4 {
		items, next = slices.Clone(items), b.buf[:0]
		clear(b.buf)
	}
	b.ready = append(b.ready, sealed[T]{items: items, seq: b.seq})
	b.seq++
	b.buf, b.bufBytes = next, 0
	return b.startLocked()
}

// onTimer seals the open batch once its first item has waited maxWait. A
// call for an earlier batch finds a younger one and re-arms the timer.
func (b *Batcher[T]) onTimer() {
	b.mu.Lock()
	if len(b.buf) == 0 {
		b.mu.Unlock()
		return
	}
	if left := b.maxWait - time.Since(b.bufStart); left > 0 {
		b.timer.Reset(left)
		b.mu.Unlock()
		return
	}
	start := b.sealLocked()
	b.mu.Unlock()
	b.dispatch(start)
}

// dropOldestLocked removes the oldest item that no flush has taken yet,
// if no dropped item is still on its way to the error handler, and
// reports whether it did. A sealed batch that the drop empties is finished
// at once, so that the queue holds no empty batch: emptied ones would pile
// up, each with its slice, while the flushes are stalled.
//
// The item goes to dropped, to be handed over once b.mu is released: by
// the caller when no handler call is under way (drop is then dropHanding,
// and the call counted in handlers), else by the goroutine whose handler
// call ends first (dropWaits; see handOver). The caller may be an Add or
// TryAdd called from the handler: so a dropped item is never handed over
// from inside a handler call; and since one item is dropped at a time, a
// handler that adds back what it is given cannot drop item after item
// without end.
func (b *Batcher[T]) dropOldestLocked() bool {
	if b.drop != noDrop {
		return false
	}
	items := &b.buf
	if b.head < len(b.ready) {
		items = &b.ready[b.head].items // sealed batches are never empty
	}
	s := *items
	if len(s) == 0 {
		return false
	}
	b.dropped[0] = s[0]
	copy(s, s[1:])
	var zero T
	s[len(s)-1] = zero
	*items = s[:len(s)-1]
	b.pending--
	b.stats.Dropped++
	if items != &b.buf && len(*items) == 0 {
		b.finishLocked(b.takeLocked(), outcome{})
	}
	// The dropped item's bytes stay counted in bufBytes (sizeFn is not
	// called under the lock): the open batch may be sealed early, never
	// above the byte bound.
	if len(b.buf) == 0 {
		b.bufBytes = 0
	}
	if b.handlers == 0 {
		b.drop = dropHanding
		b.handlers++
	} else {
		b.drop = dropWaits
	}
	return true
}

// spaceLocked returns a channel closed when pending items finish, a
// dropped item has been handed over, or the Batcher closes.
func (b *Batcher[T]) spaceLocked() chan struct{} {
	if b.space == nil {
		b.space = make(chan struct{})
	}
	return b.space
}

// handOver gives items to the error handler, then hands over the item
// DropOldest dropped meanwhile, if it waits for a handler call to end (see
// dropOldestLocked).
func (b *Batcher[T]) handOver(items []T, err error) {
	b.mu.Lock()
	b.handlers++
	b.mu.Unlock()
	defer func() { // also if the handler calls runtime.Goexit
		b.mu.Lock()
		b.handlers--
		next := b.drop == dropWaits
		if next {
			b.drop = dropHanding
			b.handlers++
		}
		b.mu.Unlock()
		if next {
			b.handDropOver()
		}
	}()
	b.callHandler(items, err)
}

// handDropOver gives the dropped item to the error handler. The caller set
// drop to dropHanding and counted the call in handlers. No item is dropped
// meanwhile, so none waits when it ends.
func (b *Batcher[T]) handDropOver() {
	defer func() { // also if the handler calls runtime.Goexit
		b.mu.Lock()
		clear(b.dropped[:])
		b.drop = noDrop
		b.handlers--
		if b.space != nil { // an Add waiting may drop now
			close(b.space)
			b.space = nil
		}
		b.drainedLocked()
		b.mu.Unlock()
	}()
	b.callHandler(b.dropped[:], ErrDropped)
}

// callHandler calls the error handler, logging a panic in it.
func (b *Batcher[T]) callHandler(items []T, err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Printf("batch: error handler panicked with %d items: %v", len(items), v)
		}
	}()
	b.onError(b.handlerCtx, items, err)
}
