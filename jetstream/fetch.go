package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// Bounds of the wait between pulls after pulls failed in a row.
const (
	pullRetryBase = 50 * time.Millisecond
	pullRetryMax  = 2 * time.Second
)

// pullLoop sends pull requests, each for as many messages as there is room
// for, until fetching must stop. The messages of each pull are read by a
// goroutine of its own, so the next pull can be sent while one is open.
func (r *run[T]) pullLoop() {
	for {
		if f := r.failures.Load(); f > 0 && !r.pause(retryDelay(int(f))) {
			return
		}
		select {
		case r.pulls <- struct{}{}:
		case <-r.loopCtx.Done():
			return
		}
		n := r.acquire()
		if n == 0 {
			<-r.pulls
			return
		}
		// The pull lives until it expires, even while stopping, so that
		// every message the server sends for it is received and handed
		// back rather than left to wait for its AckWait. Only a hard
		// stop cancels it.
		fctx, cancel := context.WithTimeout(r.hardCtx, r.s.fetchWait)
		batch, err := r.c.cons.Fetch(n, natsjs.FetchContext(fctx))
		if err != nil {
			cancel()
			r.release(n)
			<-r.pulls
			r.pullFailed(err)
			continue
		}
		r.mu.Lock()
		r.readers++
		r.mu.Unlock()
		go r.read(batch, n, cancel)
	}
}

// read takes the messages of one pull for which n credits were taken.
func (r *run[T]) read(batch natsjs.MessageBatch, n int, cancel context.CancelFunc) {
	got := 0
	for m := range batch.Messages() {
		got++
		r.c.n.fetched.Add(1)
		r.accept(m)
	}
	cancel()
	r.release(n - got)
	<-r.pulls
	switch err := batch.Error(); {
	case err == nil || errors.Is(err, context.DeadlineExceeded):
		r.failures.Store(0)
	case errors.Is(err, context.Canceled): // hard stop
	default:
		r.pullFailed(err)
	}
	r.mu.Lock()
	r.readers--
	r.checkLocked()
	r.mu.Unlock()
}

// pullFailed stops the run if err means fetching cannot succeed again, and
// otherwise reports it and makes the next pull wait.
func (r *run[T]) pullFailed(err error) {
	if errors.Is(err, nats.ErrNoResponders) && r.consumerGone() {
		err = natsjs.ErrConsumerNotFound
	}
	if fatalPullError(err) {
		r.fail(fmt.Errorf("jetstream: pull: %w", err))
		return
	}
	if r.loopCtx.Err() == nil {
		r.report(fmt.Errorf("jetstream: pull failed, retrying: %w", err))
	}
	r.failures.Add(1)
}

// consumerGone reports whether the server says the consumer does not
// exist: a pull for a missing consumer has no responders, as has one sent
// while JetStream is briefly unavailable.
func (r *run[T]) consumerGone() bool {
	ctx, cancel := context.WithTimeout(r.loopCtx, r.s.fetchWait)
	defer cancel()
	_, err := r.c.cons.Info(ctx)
	return errors.Is(err, natsjs.ErrConsumerNotFound)
}

// fatalPullError reports whether a failed pull cannot succeed if retried.
func fatalPullError(err error) bool {
	return errors.Is(err, natsjs.ErrConsumerDeleted) ||
		errors.Is(err, natsjs.ErrConsumerNotFound) ||
		errors.Is(err, natsjs.ErrBadRequest) ||
		errors.Is(err, nats.ErrConnectionClosed)
}

// accept takes a message that arrived: it hands it back if the run is
// stopping, and submits it to the executor, or its route, otherwise.
func (r *run[T]) accept(m natsjs.Msg) {
	d := &delivery{msg: m, last: time.Now()}
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		if err := m.Nak(); err != nil {
			r.opFailed("nak while stopping", err)
		}
		r.c.n.nacked.Add(1)
		r.release(1)
		return
	}
	r.held[d] = struct{}{}
	r.c.n.held.Add(1)
	r.mu.Unlock()
	var err error
	if p := r.c.ex.pool; p != nil && r.c.route == nil {
		// A pool drops a queued task only when its context ends, which
		// Run watches: no Task is needed to notice it.
		err = p.GoContext(r.hardCtx, func() { r.process(r.hardCtx, d, nil) })
	} else {
		err = r.submit(d)
	}
	if err != nil {
		// Hand it back: the pool stopped, a hard stop ended the wait for
		// room, or the executor cannot take tasks. Only a hard stop leaves
		// the run to go on draining.
		r.settle(d, m.Nak, &r.c.n.nacked)
		if r.hardCtx.Err() == nil || errors.Is(err, crew.ErrStopped) {
			r.fail(fmt.Errorf("jetstream: submit: %w", err))
		}
	}
}

// submit queues the task of d with a [crew.Task], through the route if
// there is one, and returns the error of a submission refused. The Task
// lets reclaim notice a task dropped later.
func (r *run[T]) submit(d *delivery) error {
	var t *crew.Task
	if r.c.route == nil {
		t = r.c.ex.submit.SubmitContext(r.hardCtx, r.task(d, nil))
	} else {
		p := r.prepare(d)
		if p.fail == nil {
			var bad error // the message's key or priority cannot route it
			if err := recovered(func() error {
				t, bad = r.c.route.submit(r.hardCtx, &p.msg, r.task(d, p))
				return nil
			}); err != nil {
				r.c.n.panicked.Add(1)
				p.fail = func() { r.giveUp(d, p.meta, fmt.Errorf("%s: %w", r.c.route.name, err)) }
			} else if bad != nil {
				p.fail = func() { r.giveUp(d, p.meta, bad) }
			}
		}
		if t == nil { // give it up on the executor, without a key or priority
			t = r.c.ex.submit.SubmitContext(r.hardCtx, r.task(d, p))
		}
	}
	select {
	case <-t.Done():
		if err := t.Wait(); err != nil && !d.started.Load() {
			return err
		}
	default:
		r.mu.Lock()
		d.task = t
		r.mu.Unlock()
	}
	return nil
}

// retryDelay returns the wait before the next pull after f failures in a
// row: exponential from pullRetryBase to pullRetryMax.
func retryDelay(f int) time.Duration {
	d := pullRetryBase
	for i := 1; i < f && d < pullRetryMax; i++ {
		d *= 2
	}
	return min(d, pullRetryMax)
}

// pause waits for d, or until fetching must stop, and reports whether
// fetching may go on.
func (r *run[T]) pause(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(r.loopCtx, d)
	defer cancel()
	<-ctx.Done()
	return r.loopCtx.Err() == nil
}
