package jetstream

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
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

// HeaderAttempts is the header of a snoozed job that counts the attempts
// made before it was snoozed: see [WithSnooze] and [Msg.Attempt].
const HeaderAttempts = "Crew-Attempts"

// ackTimeout bounds the wait for a DoubleAck and a dead-letter publish.
const ackTimeout = 5 * time.Second

// prepared is a message decoded for its handler, or the way to settle it
// when it cannot be handled.
type prepared[T any] struct {
	msg  Msg[T]
	meta *natsjs.MsgMetadata
	fail func() // settles a message that cannot be handled; nil if it can
}

// prepare decodes the message of d.
func (r *run[T]) prepare(d *delivery) *prepared[T] {
	meta, err := d.msg.Metadata()
	if err != nil {
		return &prepared[T]{fail: func() {
			r.report(fmt.Errorf("jetstream: message metadata: %w", err))
			r.settle(d, d.msg.Term, &r.c.n.terminated)
		}}
	}
	p := &prepared[T]{msg: Msg[T]{Subject: d.msg.Subject(), Header: d.msg.Headers(), Metadata: *meta, Raw: d.msg}, meta: meta}
	if d.msg.Headers().Get(natsjs.ScheduleHeader) != "" {
		p.fail = func() { r.skipSchedule(d, meta) }
		return p
	}
	if err := recovered(func() error { return r.s.codec.Unmarshal(d.msg.Data(), &p.msg.Value) }); err != nil {
		p.fail = func() { r.giveUp(d, meta, fmt.Errorf("decode: %w", err)) }
	}
	return p
}

// task returns the Submit task of d: it runs process with a context that
// ends with the task's own, which ends with the pool's, or at a hard stop.
func (r *run[T]) task(d *delivery, p *prepared[T]) func(context.Context) error {
	return func(tctx context.Context) error {
		ctx, cancel := context.WithCancel(r.hardCtx)
		stop := context.AfterFunc(tctx, cancel)
		defer func() {
			stop()
			cancel()
		}()
		r.process(ctx, d, p)
		return nil
	}
}

// process runs on the executor: it decodes the message unless p holds it
// decoded, calls the handler with ctx and settles the message by the
// outcome.
func (r *run[T]) process(ctx context.Context, d *delivery, p *prepared[T]) {
	d.started.Store(true)
	r.mu.Lock()
	if r.closed || d.settled.Load() { // handed back by a hard stop
		r.mu.Unlock()
		return
	}
	r.running++
	r.mu.Unlock()
	finished := false
	owned := true // this goroutine settles d: false once its handler is abandoned
	defer func() {
		if !finished { // the handler called runtime.Goexit
			if owned = r.claim(d); owned {
				r.settle(d, d.msg.Nak, &r.c.n.nacked)
			}
		}
		r.mu.Lock()
		if owned { // an abandoned handler was no longer counted
			r.running--
		}
		r.checkLocked()
		r.mu.Unlock()
	}()

	if p == nil {
		p = r.prepare(d)
	}
	if p.fail != nil {
		p.fail()
		finished = true
		return
	}
	hctx, unwatch := r.watch(ctx, d, p)
	defer unwatch()
	err := recovered(func() error { return r.c.handler(r.s.handlerContext(hctx, p.msg.Header), p.msg) })
	finished = true
	if owned = r.claim(d); owned {
		r.settleOutcome(ctx, d, p.meta, p.msg.Attempt(), err)
	}
}

// watch returns the context to run the handler of d with, ctx with the
// job timeout if one is set, and the function to call once the handler
// has returned, which cancels that context and stops the watch. Once the
// context ends, by the timeout or with ctx, a handler still running a job
// timeout later is abandoned.
func (r *run[T]) watch(ctx context.Context, d *delivery, p *prepared[T]) (context.Context, func()) {
	timeout := r.s.jobTimeout
	if timeout <= 0 {
		return ctx, func() {}
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	var mu sync.Mutex
	var grace *time.Timer
	returned := false
	unwatch := context.AfterFunc(hctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			grace = time.AfterFunc(timeout, func() { r.abandon(d, p) })
		}
	})
	return hctx, func() {
		unwatch()
		mu.Lock()
		returned = true
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// claim is called once the handler of d has returned, or was never
// called: it reports whether the handler's outcome settles d, which it
// does unless the handler was abandoned. The credit of an abandoned
// handler's message, kept while the handler ran, is freed.
func (r *run[T]) claim(d *delivery) bool {
	if r.s.jobTimeout <= 0 {
		return true // nothing abandons a handler
	}
	r.mu.Lock()
	d.returned = true
	abandoned, kept := d.abandoned, d.kept
	r.mu.Unlock()
	if kept {
		r.release(1)
	}
	return !abandoned
}

// abandon gives up on the handler of d, still running a job timeout after
// its context was cancelled, unless it has returned: d is settled as if
// the handler had failed (handed back with the backoff, or given up on
// its last delivery) unless a hard stop handed it back already, the
// abandonment is reported, and then the handler is no longer counted as
// running, so a drain does not wait for it. The handler's outcome will be
// ignored, and d's credit stays taken until it returns (see settle and
// claim).
func (r *run[T]) abandon(d *delivery, p *prepared[T]) {
	r.mu.Lock()
	if d.returned {
		r.mu.Unlock()
		return
	}
	d.abandoned = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running--
		r.checkLocked()
		r.mu.Unlock()
	}()
	r.c.n.abandoned.Add(1)
	meta, attempt := p.meta, p.msg.Attempt()
	err := fmt.Errorf("%w: the handler is still running %v after its context was cancelled; abandoned", ErrJobStuck, r.s.jobTimeout)
	if r.maxDeliver > 0 && attempt >= r.maxDeliver && r.giveUp(d, meta, fmt.Errorf("last of %d deliveries failed: %w", r.maxDeliver, err)) {
		return
	}
	delay := r.s.backoff(attempt)
	r.settle(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
	r.report(&MessageError{
		Stream:     meta.Stream,
		Sequence:   meta.Sequence.Stream,
		Subject:    d.msg.Subject(),
		Delivery:   int(meta.NumDelivered),
		HandedBack: true,
		Err:        err,
	})
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

// settleOutcome acknowledges, hands back, snoozes or gives up a message by
// the error of its handler, called with ctx; attempt is which attempt at
// the job it was.
func (r *run[T]) settleOutcome(ctx context.Context, d *delivery, meta *natsjs.MsgMetadata, attempt int, err error) {
	var pe *crew.PanicError
	snooze, snoozed := SnoozeDelay(err)
	switch {
	case err == nil:
		r.settle(d, r.ack(d.msg), &r.c.n.acked)
	case errors.As(err, &pe):
		r.c.n.panicked.Add(1)
		r.giveUp(d, meta, err)
	case IsPermanent(err):
		r.giveUp(d, meta, err)
	case snoozed:
		r.snooze(d, meta, attempt-1, snooze)
	case ctx.Err() != nil:
		// A hard stop, or the pool's end: let another consumer have it
		// at once.
		r.settle(d, d.msg.Nak, &r.c.n.nacked)
	case r.maxDeliver > 0 && attempt >= r.maxDeliver:
		r.giveUp(d, meta, fmt.Errorf("last of %d deliveries failed: %w", r.maxDeliver, err))
	default:
		delay := r.s.backoff(attempt)
		r.settle(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
	}
}

// snooze has the job of d run again delay later, not counting this
// delivery: attempts is the attempts made so far. With WithSnooze, it
// publishes a schedule of a copy of the job and acknowledges d; without,
// or if the publish fails, it hands d back with NakWithDelay. It does
// nothing if d was settled already (a hard stop handed it back): it claims
// d before it publishes, so that the job is not both handed back and
// scheduled again.
func (r *run[T]) snooze(d *delivery, meta *natsjs.MsgMetadata, attempts int, delay time.Duration) {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	nak := func() error { return d.msg.NakWithDelay(delay) }
	if r.s.snoozeJS == nil {
		r.settleClaimed(d, nak, &r.c.n.snoozed)
		return
	}
	if err := r.reschedule(d.msg, meta, attempts, delay); err != nil {
		r.report(fmt.Errorf("jetstream: snooze %s/%d, handing it back instead: %w", meta.Stream, meta.Sequence.Stream, err))
		r.settleClaimed(d, nak, &r.c.n.snoozed)
		return
	}
	r.settleClaimed(d, r.ack(d.msg), &r.c.n.snoozed)
}

// reschedule publishes a schedule that publishes a copy of m, with
// attempts in its HeaderAttempts header, to m's subject delay from now, and
// waits for the server to store it. The server's own headers (Nats-) are
// not copied: they would make the copy a different kind of message.
func (r *run[T]) reschedule(m natsjs.Msg, meta *natsjs.MsgMetadata, attempts int, delay time.Duration) error {
	h := nats.Header{}
	for k, v := range m.Headers() {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			h[k] = append([]string(nil), v...)
		}
	}
	h.Set(HeaderAttempts, strconv.Itoa(attempts))
	h.Set(natsjs.ScheduleHeader, "@at "+time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	h.Set(natsjs.ScheduleTargetHeader, m.Subject())
	seq := strconv.FormatUint(meta.Sequence.Stream, 10)
	subj := scheduleSubject(m.Subject(), "snooze-"+seq)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hardCtx), ackTimeout)
	defer cancel()
	_, err := r.s.snoozeJS.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: m.Data()},
		natsjs.WithMsgID("snooze."+meta.Stream+"."+seq))
	return err
}

// skipSchedule hands back, without running the handler, a message that is
// a schedule (it has a Nats-Schedule header), not a job: the server
// publishes the job when the schedule says, and the consumer's filter
// should not match the schedule's subject (see Queue). Acknowledging or
// terminating it would delete it from a work-queue stream, so it is handed
// back with the longest backoff, and reported.
func (r *run[T]) skipSchedule(d *delivery, meta *natsjs.MsgMetadata) {
	r.report(fmt.Errorf("jetstream: message %s/%d (%s) is a message schedule, not a job: not handled; the consumer's filter should not match its subject",
		meta.Stream, meta.Sequence.Stream, d.msg.Subject()))
	delay := r.s.backoff(max(int(meta.NumDelivered), 64))
	r.settle(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
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
// failure reported. giveUp claims d before it publishes, and does nothing
// and returns false if d was settled already (a hard stop handed it back),
// so that a message is not both handed back and dead-lettered.
func (r *run[T]) giveUp(d *delivery, meta *natsjs.MsgMetadata, cause error) bool {
	if !d.settled.CompareAndSwap(false, true) {
		return false
	}
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
			r.settleClaimed(d, func() error { return d.msg.NakWithDelay(delay) }, &r.c.n.nacked)
			return true
		}
	}
	reason := cause.Error()
	if len(reason) > 200 {
		reason = reason[:200]
	}
	r.settleClaimed(d, func() error { return d.msg.TermWithReason(reason) }, &r.c.n.terminated)
	if me.DeadLettered {
		r.c.n.deadLettered.Add(1)
	}
	r.report(me)
	return true
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
// then counts it, forgets d and frees its slot, unless d's handler was
// abandoned and still runs.
func (r *run[T]) settle(d *delivery, op func() error, count *atomic.Uint64) bool {
	if !d.settled.CompareAndSwap(false, true) {
		return false
	}
	r.settleClaimed(d, op, count)
	return true
}

// settleClaimed is settle for a d whose settled flag the caller has set:
// one that publishes before it settles (a dead letter, a snoozed copy)
// claims d first, so that a hard stop does not hand it back meanwhile.
func (r *run[T]) settleClaimed(d *delivery, op func() error, count *atomic.Uint64) {
	if err := op(); err != nil {
		r.opFailed("settling message", err)
	}
	count.Add(1)
	r.mu.Lock()
	delete(r.held, d)
	r.c.n.held.Add(-1)
	// An abandoned handler still running keeps the credit: its worker is
	// busy. It frees it when it returns (see claim).
	d.kept = d.abandoned && !d.returned
	kept := d.kept
	r.checkLocked()
	r.mu.Unlock()
	if !kept {
		r.release(1)
	}
}

// heartbeats sends InProgress for every message held for about an
// interval, each interval, and, when tasks are submitted with a
// [crew.Task], reclaims every fetch wait the messages whose tasks were
// dropped, until stop is closed.
func (r *run[T]) heartbeats(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var beat, watch <-chan time.Time
	if r.beatEvery > 0 {
		t := time.NewTicker(r.beatEvery)
		defer t.Stop()
		beat = t.C
	}
	if r.c.route != nil || r.c.ex.pool == nil {
		t := time.NewTicker(r.s.fetchWait)
		defer t.Stop()
		watch = t.C
	}
	var due []*delivery
	for {
		select {
		case <-stop:
			return
		case <-beat:
			due = r.beat(due)
		case <-watch:
			r.reclaim()
		}
	}
}

// beat sends InProgress for every message held for at least half an
// interval since its arrival or its last notice. due is scratch space,
// returned for the next call.
func (r *run[T]) beat(due []*delivery) []*delivery {
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
	return due
}

// reclaim hands back the messages whose tasks ended without starting, and
// stops the run: an executor drops the tasks it holds when it, or its
// pool, stops (a RateLimited's waiting for a token, a Keyed's of a paused
// key, a Subpool's not admitted), and then takes no new ones.
func (r *run[T]) reclaim() {
	var lost []*delivery
	r.mu.Lock()
	for d := range r.held {
		if d.task == nil || d.started.Load() {
			continue
		}
		select {
		case <-d.task.Done():
			lost = append(lost, d)
		default:
		}
	}
	r.mu.Unlock()
	for _, d := range lost {
		// Stop fetching first, so that the pulls open take fewer of the
		// messages handed back.
		r.fail(fmt.Errorf("jetstream: the executor dropped a message (%w): %w", d.task.Wait(), crew.ErrStopped))
		r.settle(d, d.msg.Nak, &r.c.n.nacked)
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
