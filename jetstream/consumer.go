package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// A Handler processes one message for a [Consumer]. Returning nil
// acknowledges the message; an error hands it back for redelivery after a
// backoff ([WithBackoff]), or gives it up when it is [Permanent] or the
// consumer's MaxDeliver is reached; a panic gives it up at once. ctx is
// cancelled when the drain timeout of [Consumer.Run] passes, the context
// of the pool that runs it ([crew.Pool.Context]) ends, or the job timeout
// ([WithJobTimeout]) passes; a handler that ignores it runs on, unless a
// job timeout abandons it.
type Handler[T any] func(ctx context.Context, m Msg[T]) error

// A Consumer feeds the messages of a JetStream pull consumer
// ([natsjs.Consumer]) to a [crew.Executor]: a [crew.Pool], or a
// [crew.Subpool] or [crew.RateLimited] in front of one, optionally through
// a [crew.Keyed] ([WithKeyed]) or a [crew.Priority] ([WithPriority]), so
// that a pool's limit, a Subpool's share, a rate, per-key order and
// priorities apply to consumed messages as to local tasks. Make one with
// [NewConsumer] and start it with [Consumer.Run].
//
// It fetches only as many messages as it has room for ([WithMaxInFlight],
// by default the executor's limit up to [DefaultMaxInFlight]), so that
// the server's redelivery accounting, MaxAckPending and other consumers see
// the messages this one cannot start yet. Each message is decoded with the
// [Codec] into a [Msg] and passed to the [Handler] on the executor; its
// outcome settles it:
//
//   - nil: Ack (DoubleAck [WithDoubleAck]);
//   - an error: NakWithDelay with the backoff for its delivery count
//     ([WithBackoff]), or, on the last delivery MaxDeliver allows, give up;
//   - a [Permanent] error, a panic, or a body the Codec cannot decode: give up;
//   - a [Snooze] error: run it again later without counting an attempt
//     ([WithSnooze]);
//   - still running a job timeout after its context was cancelled
//     ([WithJobTimeout]): handed back with the backoff, or given up on the
//     last delivery, and reported wrapping [ErrJobStuck].
//
// Attempts, which the backoff and MaxDeliver count, are deliveries that
// did not snooze ([Msg.Attempt]). A message that is a message schedule
// (it has a Nats-Schedule header; see [Queue]) rather than a job is not
// handled: it is reported and handed back with the longest backoff, since
// the consumer's filter should not match it.
//
// Giving up publishes the message to the dead-letter subject, if one is set
// ([WithDeadLetter]), then terminates it (Term) so that it is not
// redelivered, and reports a [MessageError] to the error handler
// ([WithErrorHandler]).
//
// While a message is held, from its arrival through the executor's or a
// layer's queue to the end of its handler, the consumer sends InProgress
// heartbeats for it ([WithHeartbeat]), so that neither a long task nor a
// long wait gets it redelivered to another consumer.
//
// The consumer must be a durable or named pull consumer with the explicit
// ack policy ([natsjs.AckExplicitPolicy]). Any number of Consumers, in this
// process or others, may share it; the server spreads the messages among
// them. Its MaxAckPending (1000 by default) bounds the messages they all
// hold unacknowledged together: it is the concurrency limit across the
// cluster, while the executor and WithMaxInFlight bound one Consumer.
type Consumer[T any] struct {
	cons    natsjs.Consumer
	ex      executor
	route   *msgRoute[T] // WithKeyed or WithPriority; nil: tasks go to ex
	handler Handler[T]
	s       consumerSettings
	running atomic.Bool
	n       counters
}

// NewConsumer returns a [Consumer] that runs handler on ex for the
// messages of cons, configured by opts ([ConsumerOption]). ex is a
// [*crew.Pool] (a *Pool passes as it is), a [*crew.Subpool] or a
// [*crew.RateLimited]; [WithKeyed] and [WithPriority] route the messages
// through a layer built on it. Nothing happens until [Consumer.Run].
//
// NewConsumer panics, with an error wrapping [crew.ErrInvalid], if an
// argument or an option is nil, an option is invalid, [WithPulls] above 1
// is given with WithKeyed or WithPriority, or ex is a zero Pool or Subpool,
// which take no task (a Pool not made by [crew.New] is recognized by its
// [crew.Pool.Stats], which report no worker limit). A zero RateLimited or
// layer is reported by Run, which stops with the error of the first
// submission it refuses.
func NewConsumer[T any](cons natsjs.Consumer, ex crew.Executor, handler Handler[T], opts ...ConsumerOption) *Consumer[T] {
	c, err := newConsumer(cons, ex, handler, opts)
	if err != nil {
		panic(err)
	}
	return c
}

// newConsumer is NewConsumer returning the error instead of panicking.
func newConsumer[T any](cons natsjs.Consumer, ex crew.Executor, handler Handler[T], opts []ConsumerOption) (*Consumer[T], error) {
	e, argErr := newExecutor(ex)
	if cons == nil {
		argErr = errors.Join(invalid("NewConsumer: nil consumer"), argErr)
	}
	if handler == nil {
		argErr = errors.Join(argErr, invalid("NewConsumer: nil handler"))
	}
	s := defaultConsumerSettings()
	var route *msgRoute[T]
	err := optionsError("NewConsumer", &s, argErr, opts, ConsumerOption.applyConsumer, func(s *consumerSettings) error {
		if s.route == nil {
			return nil
		}
		var ok bool
		if route, ok = s.route.(*msgRoute[T]); !ok {
			return invalid("NewConsumer: the function given to %s takes a Msg[%s], the consumer's messages are Msg[%T]", s.route.option(), s.route.msgType(), *new(T))
		}
		if s.pullsSet && s.pulls > 1 {
			return invalid("NewConsumer: WithPulls(%d) with %s: a routed consumer keeps one pull open, so that messages are queued in the order the server sent them", s.pulls, route.name)
		}
		s.pulls = 1
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Consumer[T]{cons: cons, ex: e, route: route, handler: handler, s: s}, nil
}

// Run fetches messages and processes them until ctx is cancelled, then
// drains: it stops fetching, hands back (Nak) the messages that arrive from
// pulls still open, waits for the messages in flight, queued or running,
// to finish, and, if the drain timeout ([WithDrainTimeout]) passes first,
// cancels the handlers' context, hands back the unfinished messages (those
// still queued in a layer included, whose tasks then return at once) and
// waits for the handlers to return: for ever for one that ignores its
// context, unless a job timeout ([WithJobTimeout]) abandons it a job
// timeout later. The outcome of a handler whose message was handed back
// settles nothing: the message is not also acknowledged, dead-lettered or
// snoozed. Run returns nil after a clean drain,
// an error wrapping [ErrDrainTimeout] if messages were handed back
// unfinished, and, after the same drain, the error that stopped it
// otherwise: the consumer was deleted, the connection was closed (noticed
// at the next pull, acknowledgement or heartbeat), the pool was stopped
// or its context ended, or the executor dropped a message it had
// accepted, as a RateLimited, a Subpool or a layer does when it or its
// pool stops (an error wrapping [crew.ErrStopped]; the dropped message is
// handed back, noticed within a fetch wait, [WithFetchWait]), or the
// executor refused a message for another reason (its error; the message
// is handed back). Run watches a [crew.Pool] given to [NewConsumer] for
// its end; another executor's pool is noticed through the messages it
// refuses or drops. Pulls that fail for other reasons, such as a server
// restart, are reported to the error handler ([WithErrorHandler]) and
// retried with backoff; a connection that is reconnecting is waited for.
//
// A Consumer runs at most once at a time; Run returns [ErrRunning]
// otherwise. It may be run again after Run returns. Run returns an error
// wrapping [crew.ErrInvalid] for a nil ctx, and for a nil Consumer or one
// not made by [NewConsumer].
func (c *Consumer[T]) Run(ctx context.Context) error {
	if c == nil || c.cons == nil || c.ex.ex == nil || c.handler == nil {
		return invalid("Consumer.Run: consumer not made by NewConsumer")
	}
	if ctx == nil {
		return invalid("Consumer.Run: nil context")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	info := c.cons.CachedInfo()
	if info == nil {
		var err error
		if info, err = c.cons.Info(ctx); err != nil {
			return fmt.Errorf("jetstream: consumer info: %w", err)
		}
	}
	if info.Config.AckPolicy != natsjs.AckExplicitPolicy {
		return invalid("Consumer.Run: consumer %q has ack policy %v, want explicit", info.Name, info.Config.AckPolicy)
	}
	return newRun(c, info).run(ctx)
}

// Stats is a snapshot of a [Consumer]'s counters, over all its runs, as
// [Consumer.Stats] returns it.
type Stats struct {
	Fetched      uint64 // messages received from the server
	Acked        uint64 // handled successfully and acknowledged
	Nacked       uint64 // handed back for redelivery: failed, or not finished when stopping
	Terminated   uint64 // given up on (Term)
	DeadLettered uint64 // published to the dead-letter subject before Term
	Snoozed      uint64 // handed back or rescheduled because the handler returned Snooze
	Panicked     uint64 // panics recovered: of handlers, and of WithKeyed's and WithPriority's functions
	Heartbeats   uint64 // InProgress notices sent
	Abandoned    uint64 // handlers abandoned, still running a job timeout after their context was cancelled (WithJobTimeout)
	InFlight     int    // messages held now: fetched and not settled
}

// plus returns the sum of s and o, field by field.
func (s Stats) plus(o Stats) Stats {
	return Stats{
		Fetched:      s.Fetched + o.Fetched,
		Acked:        s.Acked + o.Acked,
		Nacked:       s.Nacked + o.Nacked,
		Terminated:   s.Terminated + o.Terminated,
		DeadLettered: s.DeadLettered + o.DeadLettered,
		Snoozed:      s.Snoozed + o.Snoozed,
		Panicked:     s.Panicked + o.Panicked,
		Heartbeats:   s.Heartbeats + o.Heartbeats,
		Abandoned:    s.Abandoned + o.Abandoned,
		InFlight:     s.InFlight + o.InFlight,
	}
}

// Stats returns a [Stats] snapshot of the Consumer's counters: zeros for a
// nil Consumer.
func (c *Consumer[T]) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return Stats{
		Fetched:      c.n.fetched.Load(),
		Acked:        c.n.acked.Load(),
		Nacked:       c.n.nacked.Load(),
		Terminated:   c.n.terminated.Load(),
		DeadLettered: c.n.deadLettered.Load(),
		Snoozed:      c.n.snoozed.Load(),
		Panicked:     c.n.panicked.Load(),
		Heartbeats:   c.n.heartbeats.Load(),
		Abandoned:    c.n.abandoned.Load(),
		InFlight:     int(c.n.held.Load()),
	}
}

type counters struct {
	fetched, acked, nacked, terminated, deadLettered, snoozed, panicked, heartbeats, abandoned atomic.Uint64
	held                                                                                       atomic.Int64
}

// heartbeatInterval returns the interval of InProgress notices for a
// consumer with the given configuration: a third of the shortest time the
// server waits for an ack.
func heartbeatInterval(cfg natsjs.ConsumerConfig) time.Duration {
	wait := cfg.AckWait
	if wait <= 0 {
		wait = 30 * time.Second // the server's default
	}
	for _, b := range cfg.BackOff {
		if b > 0 {
			wait = min(wait, b)
		}
	}
	return max(wait/3, time.Millisecond)
}

// delivery is a message the consumer holds, from its arrival until it is
// settled.
type delivery struct {
	msg     natsjs.Msg
	settled atomic.Bool
	started atomic.Bool // its task has begun
	last    time.Time   // arrival or last heartbeat; guarded by run.mu
	task    *crew.Task  // its task, if submitted with one; guarded by run.mu

	// With a job timeout (see abandon); guarded by run.mu.
	returned  bool // its handler returned: it is not abandoned
	abandoned bool // its handler was abandoned: its outcome is ignored
	kept      bool // settled while its abandoned handler runs: the handler's return frees its credit
}

// run is the state of one call of Run.
type run[T any] struct {
	c          *Consumer[T]
	s          *consumerSettings
	maxDeliver int
	beatEvery  time.Duration
	credits    credits       // messages the consumer may still take
	pulls      chan struct{} // one token per pull request open
	failures   atomic.Int32  // pulls failed in a row

	loopCtx    context.Context // ends when fetching must stop
	loopCancel context.CancelFunc
	hardCtx    context.Context // the handlers' context; ends at a hard stop
	hardCancel context.CancelFunc

	mu       sync.Mutex
	held     map[*delivery]struct{}
	readers  int  // pull requests whose messages are still being read
	running  int  // handlers running
	stopping bool // no new message may start
	closed   bool // hard stop: no handler may start
	fatal    error
	quiet    chan struct{} // closed when stopping and nothing is left
	isQuiet  bool
}

func newRun[T any](c *Consumer[T], info *natsjs.ConsumerInfo) *run[T] {
	s := c.s
	s.maxFetch = min(s.maxFetch, maxPull)
	if mrb := info.Config.MaxRequestBatch; mrb > 0 {
		s.maxFetch = min(s.maxFetch, mrb) // the server refuses bigger pulls
	}
	if mw := info.Config.MaxWaiting; mw > 0 {
		s.pulls = min(s.pulls, mw) // the server refuses more
	}
	r := &run[T]{
		c:          c,
		s:          &s,
		maxDeliver: info.Config.MaxDeliver,
		beatEvery:  c.s.heartbeat,
		pulls:      make(chan struct{}, s.pulls),
		held:       make(map[*delivery]struct{}),
		quiet:      make(chan struct{}),
	}
	if r.beatEvery < 0 {
		r.beatEvery = heartbeatInterval(info.Config)
	}
	limit := c.s.maxInFlight
	if limit == 0 {
		limit = min(c.ex.limit(), DefaultMaxInFlight)
	}
	r.credits.free = limit
	return r
}

func (r *run[T]) run(ctx context.Context) error {
	r.loopCtx, r.loopCancel = context.WithCancel(ctx)
	defer r.loopCancel()
	r.hardCtx, r.hardCancel = context.WithCancel(context.WithoutCancel(ctx))
	defer r.hardCancel()
	// A pool is watched; another executor's pool is noticed through the
	// tasks it refuses, drops (see dropped) or cancels.
	var poolDone <-chan struct{}
	if p := r.c.ex.pool; p != nil {
		poolDone = p.Context().Done()
		unwatch := context.AfterFunc(p.Context(), func() {
			r.fail(fmt.Errorf("jetstream: pool context ended: %w", crew.ErrStopped))
		})
		defer unwatch()
	}

	beatStop, beatDone := make(chan struct{}), make(chan struct{})
	go r.heartbeats(beatStop, beatDone)

	r.pullLoop()

	// Drain.
	r.mu.Lock()
	r.stopping = true
	r.checkLocked()
	r.mu.Unlock()
	timer := time.NewTimer(r.s.drainTimeout)
	defer timer.Stop()
	handedBack := 0
	select {
	case <-r.quiet:
	case <-timer.C:
		handedBack = r.hardStop()
	case <-poolDone:
		handedBack = r.hardStop()
	}
	<-r.quiet
	close(beatStop)
	<-beatDone

	r.mu.Lock()
	err := r.fatal
	r.mu.Unlock()
	if handedBack > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d messages handed back unfinished", ErrDrainTimeout, handedBack))
	}
	return err
}

// fail records the first error that must stop the run, and stops fetching.
func (r *run[T]) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.loopCancel()
}

// hardStop cancels the handlers' context and the open pulls, and hands
// back every message not settled yet. It returns how many it handed back.
func (r *run[T]) hardStop() int {
	r.mu.Lock()
	r.closed = true
	left := make([]*delivery, 0, len(r.held))
	for d := range r.held {
		left = append(left, d)
	}
	r.mu.Unlock()
	// Hand back first and cancel after, so that a handler that sees its
	// context cancelled finds its message handed back already.
	n := 0
	for _, d := range left {
		if r.settle(d, d.msg.Nak, &r.c.n.nacked) {
			n++
		}
	}
	r.hardCancel()
	return n
}

// checkLocked closes quiet once stopping has begun and no pull, message or
// handler is left.
func (r *run[T]) checkLocked() {
	if r.stopping && !r.isQuiet && r.readers == 0 && r.running == 0 && len(r.held) == 0 {
		r.isQuiet = true
		close(r.quiet)
	}
}

// acquire takes at least one credit, waiting for it, and as many more as
// are free, up to the fetch bound. It returns 0 if fetching must stop.
func (r *run[T]) acquire() int {
	if r.loopCtx.Err() != nil {
		return 0
	}
	return r.credits.take(r.loopCtx, r.s.maxFetch)
}

// release returns n credits.
func (r *run[T]) release(n int) { r.credits.put(n) }

// credits counts the messages a run may still take. It is a count, not a
// token per message, so that its cost does not depend on the bound.
type credits struct {
	mu   sync.Mutex
	free int
	wake chan struct{} // closed when credits are put back; nil while none waits
}

// take waits until a credit is free or ctx ends, and then takes as many as
// are free, up to most. It returns 0 if ctx ended first.
func (c *credits) take(ctx context.Context, most int) int {
	for {
		c.mu.Lock()
		if c.free > 0 {
			n := min(c.free, most)
			c.free -= n
			c.mu.Unlock()
			return n
		}
		if c.wake == nil {
			c.wake = make(chan struct{})
		}
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0
		}
	}
}

// put returns n credits and wakes the one waiting, if any.
func (c *credits) put(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	c.free += n
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
	c.mu.Unlock()
}

// report passes err to the error handler.
func (r *run[T]) report(err error) { r.s.onError(err) }
