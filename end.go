package crew

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gocrew/crew/internal/notify"
)

// An end marks the moment a pool will start nothing more of what it has
// queued: Stop has run everything and is returning, or Shutdown's deadline
// has passed and its queue is being dropped. The layers and groups that
// keep tasks of their own for the pool drop them then, and Stop and
// Shutdown return only once they have.
//
// The vocabulary: a pool is over once it has ended (over reads it without
// a lock); done is the context that close cancels, which holders link
// to; a holder holds the end while it has tasks to drop, and releases it
// once they are dropped; close ends the pool and settle waits for every
// hold to be released.
type end struct {
	isOver atomic.Bool
	holds  atomic.Int64

	mu     sync.Mutex
	closed bool            // close has run: done is cancelled
	ctx    context.Context // made by the first done, cancelled by close
	cancel context.CancelFunc

	released notify.Cond
}

// over reports whether the pool has ended.
func (d *end) over() bool { return d.isOver.Load() }

// mark ends the pool without cancelling done yet: Shutdown's deadline has
// passed, and a task that a step would run inline meanwhile must be
// dropped instead. The caller holds the end until it has dropped what it
// took.
func (d *end) mark() {
	d.isOver.Store(true)
	d.hold()
}

// close ends the pool and cancels done, which starts the holders' drops.
func (d *end) close() {
	d.mu.Lock()
	d.isOver.Store(true)
	d.closed = true
	if d.cancel != nil {
		d.cancel()
	}
	d.mu.Unlock()
}

// settle waits until every hold has been released.
func (d *end) settle() {
	d.released.Wait(nil, func() bool { return d.holds.Load() == 0 })
}

// done returns a context cancelled by close: a mark alone leaves it be,
// since a worker may still start a queued task until the drain that
// follows it. A first done after close returns it cancelled.
func (d *end) done() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil {
		d.ctx, d.cancel = context.WithCancel(context.Background())
		if d.closed {
			d.cancel()
		}
	}
	return d.ctx
}

// hold keeps settle waiting until a matching release.
func (d *end) hold() { d.holds.Add(1) }

// release counts out one hold.
func (d *end) release() {
	if d.holds.Add(-1) == 0 {
		d.released.Broadcast()
	}
}
