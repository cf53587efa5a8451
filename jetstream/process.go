package jetstream

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// Headers added to a dead letter: see [WithDeadLetter].
const (
	HeaderError    = "Crew-Error"    // why the message was given up on
	HeaderStream   = "Crew-Stream"   // the stream it came from
	HeaderSequence = "Crew-Sequence" // its stream sequence
	HeaderSubject  = "Crew-Subject"  // the subject it was published to
	HeaderDelivery = "Crew-Delivery" // the delivery that failed
)

// ackTimeout bounds the wait for a DoubleAck and a dead-letter publish.
const ackTimeout = 5 * time.Second

// process runs on the pool: it decodes the message, calls the handler and
// settles the message by the outcome.
func (r *run[T]) process(d *delivery) {
	r.mu.Lock()
	if r.closed || d.settled.Load() { // handed back by a hard stop
		r.mu.Unlock()
		return
	}
	r.running++
	r.mu.Unlock()
	finished := false
	defer func() {
		if !finished { // the handler called runtime.Goexit
			r.settle(d, d.msg.Nak, &r.c.n.nacked)
		}
		r.mu.Lock()
		r.running--
		r.checkLocked()
		r.mu.Unlock()
	}()

	meta, err := d.msg.Metadata()
	if err != nil {
		r.report(fmt.Errorf("jetstream: message metadata: %w", err))
		r.settle(d, d.msg.Term, &r.c.n.terminated)
		finished = true
		return
	}
	m := Msg[T]{Subject: d.msg.Subject(), Header: d.msg.Headers(), Metadata: *meta, Raw: d.msg}
	if err := recovered(func() error { return r.s.codec.Unmarshal(d.msg.Data(), &m.Value) }); err != nil {
		r.giveUp(d, meta, fmt.Errorf("decode: %w", err))
		finished = true
		return
	}
	err = recovered(func() error { return r.c.handler(r.hardCtx, m) })
	r.settleOutcome(d, meta, err)
	finished = true
}

// recovered calls f, turning a panic into a *crew.PanicError: a codec's or
// a handler's panic settles the message like an error, and the worker goes
// on.
func recovered(f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &crew.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

// settleOutcome acknowledges, hands back or gives up a message by its
// handler's error.
func (r *run[T]) settleOutcome(d *delivery, meta *natsjs.MsgMetadata, err error) {
	var pe *crew.PanicError
	delivered := int(meta.NumDelivered)
	switch {
	case err == nil:
		r.settle(d, r.ack(d.msg), &r.c.n.acked)
	case errors.As(err, &pe):
		r.c.n.panicked.Add(1)
		r.giveUp(d, meta, err)
	case IsPermanent(err):
		r.giveUp(d, meta, err)
	case r.hardCtx.Err() != nil:
		// Stopping: let another consumer have it at once.
		r.settle(d, d.msg.Nak, &r.c.n.nacked)
	case r.maxDeliver > 0 && delivered >= r.maxDeliver:
		r.giveUp(d, meta, fmt.Errorf("last of %d deliveries failed: %w", r.maxDeliver, err))
	default:
		delay := r.s.backoff(delivered)
		r.settle(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
	}
}

// ack returns the acknowledgement to send for m.
func (r *run[T]) ack(m natsjs.Msg) func() error {
	if !r.s.doubleAck {
		return m.Ack
	}
	return func() error {
		ctx, cancel := context.WithTimeout(r.hardCtx, ackTimeout)
		defer cancel()
		return m.DoubleAck(ctx)
	}
}

// giveUp dead-letters the message if so configured, terminates it and
// reports it. If the dead-letter publish fails, the message is handed back
// for redelivery instead, unless this was the last delivery MaxDeliver
// allows: the server would not redeliver it, so it is terminated and the
// failure reported.
func (r *run[T]) giveUp(d *delivery, meta *natsjs.MsgMetadata, cause error) {
	me := &MessageError{
		Stream:   meta.Stream,
		Sequence: meta.Sequence.Stream,
		Subject:  d.msg.Subject(),
		Delivery: int(meta.NumDelivered),
		Err:      cause,
	}
	if r.s.deadJS != nil {
		err := r.deadLetter(d.msg, me)
		switch {
		case err == nil:
			me.DeadLettered = true
		case r.maxDeliver > 0 && me.Delivery >= r.maxDeliver:
			r.report(fmt.Errorf("jetstream: dead-letter %s/%d to %s failed on its last delivery, terminating it without one: %w", me.Stream, me.Sequence, r.s.deadSubject, err))
		default:
			r.report(fmt.Errorf("jetstream: dead-letter %s/%d to %s, handing it back: %w", me.Stream, me.Sequence, r.s.deadSubject, err))
			delay := r.s.backoff(me.Delivery)
			r.settle(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
			return
		}
	}
	reason := cause.Error()
	if len(reason) > 200 {
		reason = reason[:200]
	}
	if r.settle(d, func() error { return d.msg.TermWithReason(reason) }, &r.c.n.terminated) && me.DeadLettered {
		r.c.n.deadLettered.Add(1)
	}
	r.report(me)
}

// deadLetter publishes a copy of m to the dead-letter subject and waits
// for the server to store it.
func (r *run[T]) deadLetter(m natsjs.Msg, me *MessageError) error {
	h := nats.Header{}
	for k, v := range m.Headers() {
		h[k] = append([]string(nil), v...)
	}
	h.Del(natsjs.MsgIDHeader)
	errText := me.Err.Error()
	if len(errText) > 1024 {
		errText = errText[:1024]
	}
	h.Set(HeaderError, errText)
	h.Set(HeaderStream, me.Stream)
	h.Set(HeaderSequence, strconv.FormatUint(me.Sequence, 10))
	h.Set(HeaderSubject, me.Subject)
	h.Set(HeaderDelivery, strconv.Itoa(me.Delivery))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hardCtx), ackTimeout)
	defer cancel()
	id := me.Stream + "." + strconv.FormatUint(me.Sequence, 10)
	_, err := r.s.deadJS.PublishMsg(ctx, &nats.Msg{Subject: r.s.deadSubject, Header: h, Data: m.Data()}, natsjs.WithMsgID(id))
	return err
}

// settle settles d with op, once: it reports whether this call did, and
// then counts it, forgets d and frees its slot.
func (r *run[T]) settle(d *delivery, op func() error, count *atomic.Uint64) bool {
	if !d.settled.CompareAndSwap(false, true) {
		return false
	}
	if err := op(); err != nil {
		r.opFailed("settling message", err)
	}
	count.Add(1)
	r.mu.Lock()
	delete(r.held, d)
	r.c.n.held.Add(-1)
	r.checkLocked()
	r.mu.Unlock()
	r.release(1)
	return true
}

// heartbeats sends InProgress for every message held for about an
// interval, each interval, until stop is closed.
func (r *run[T]) heartbeats(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if r.beatEvery <= 0 {
		<-stop
		return
	}
	t := time.NewTicker(r.beatEvery)
	defer t.Stop()
	var due []*delivery
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		due = due[:0]
		r.mu.Lock()
		for d := range r.held {
			if now.Sub(d.last) >= r.beatEvery/2 {
				d.last = now
				due = append(due, d)
			}
		}
		r.mu.Unlock()
		for _, d := range due {
			if d.settled.Load() {
				continue
			}
			if err := d.msg.InProgress(); err != nil {
				r.opFailed("heartbeat", err)
				continue
			}
			r.c.n.heartbeats.Add(1)
		}
		clear(due)
	}
}

// opFailed handles the failure of an ack, nak, term or heartbeat: a closed
// connection stops the run, since nothing it holds can be settled any
// more; other failures are reported.
func (r *run[T]) opFailed(what string, err error) {
	switch {
	case errors.Is(err, natsjs.ErrMsgAlreadyAckd):
	case errors.Is(err, nats.ErrConnectionClosed):
		r.fail(fmt.Errorf("jetstream: %s: %w", what, err))
	default:
		r.report(fmt.Errorf("jetstream: %s: %w", what, err))
	}
}
