package jetstream

import (
	"context"
	"fmt"

	"github.com/gocrew/crew"
)

// WithKeyed routes every message through k, a [crew.Keyed] that runs on
// the [Consumer]'s executor: messages whose key (key(m)) is the same are
// handled one at a time, in the order the consumer received them
// (WithKeyLimit(n): at most n at once, started in that order), while
// messages of different keys run in parallel under the executor's limit.
// k may be shared with other work that needs the same per-key order.
//
// The order is the consumer's local one. It holds for the messages one
// Consumer holds at a time: a message that fails is handed back for
// redelivery ([WithBackoff]) and the key's next message runs meanwhile,
// and several Consumers of one durable consumer, in this process or
// others, each receive some of a key's messages. For an order across the
// cluster, give the durable consumer a MaxAckPending of 1, or one subject
// per key and a consumer per subject.
//
// The message is decoded as it arrives, on the goroutine that reads its
// pull, and key is called there with it, before the message is queued: it
// must not block. A body the [Codec] cannot decode is given up on without
// a key, and a panic in key gives the message up like a handler's panic;
// so does a key that [crew.Keyed] refuses as no map can hold it (a NaN,
// or an interface value of a type that cannot be hashed), with an error
// wrapping [crew.ErrInvalid], counted as no panic.
// The messages waiting in k's queue for their key count against
// [WithMaxInFlight] and get heartbeats ([WithHeartbeat]) like running
// ones, so a message held behind a slow one of its key is not redelivered
// elsewhere; raise WithMaxInFlight above the executor's limit so that the
// consumer can read past a busy key to the messages of other keys.
//
// k and key must not be nil, at most one of WithKeyed and [WithPriority]
// may be given, and T must be the [Consumer]'s message type: NewConsumer
// reports each with an error wrapping [crew.ErrInvalid]. k must be built
// on the executor given to [NewConsumer] (or on a layer over it): the
// consumer bounds what it holds by that executor's limit.
func WithKeyed[T any, K comparable](k *crew.Keyed[K], key func(m Msg[T]) K) ConsumerOption {
	return consumerOption(func(s *consumerSettings) error {
		switch {
		case k == nil:
			return invalid("WithKeyed: nil Keyed")
		case key == nil:
			return invalid("WithKeyed: nil key function")
		}
		return s.setRoute(&msgRoute[T]{name: "WithKeyed", submit: func(ctx context.Context, m *Msg[T], task func(context.Context) error) (*crew.Task, error) {
			kv := key(*m)
			if err := checkKey(kv); err != nil {
				return nil, err
			}
			return k.SubmitContext(ctx, kv, task), nil
		}})
	})
}

// WithPriority routes every message through p, a [crew.Priority] that runs
// on the [Consumer]'s executor: whenever a worker comes free, the message
// held with the highest priority (prio(m)) starts first, with p's aging
// ([crew.WithAging]) so that low priorities are not starved. p may be
// shared with other work.
//
// Priorities order only the messages the consumer holds and has not
// started: with the default [WithMaxInFlight], the executor's limit, a
// message starts as soon as it arrives and there is nothing to choose
// from. Raise WithMaxInFlight above the limit to let a backlog of that
// size gather, as far as the server's MaxAckPending allows; messages
// still in the stream are not seen. Waiting messages get heartbeats
// ([WithHeartbeat]), so they are not redelivered elsewhere while they
// wait.
//
// The message is decoded as it arrives, on the goroutine that reads its
// pull, and prio is called there with it, before the message is queued:
// it must not block. A body the [Codec] cannot decode is given up on
// without a priority, and a panic in prio gives the message up like a
// handler's panic.
//
// p and prio must not be nil, at most one of [WithKeyed] and WithPriority
// may be given, and T must be the [Consumer]'s message type: NewConsumer
// reports each with an error wrapping [crew.ErrInvalid]. p must be built
// on the executor given to [NewConsumer] (or on a layer over it).
func WithPriority[T any](p *crew.Priority, prio func(m Msg[T]) int) ConsumerOption {
	return consumerOption(func(s *consumerSettings) error {
		switch {
		case p == nil:
			return invalid("WithPriority: nil Priority")
		case prio == nil:
			return invalid("WithPriority: nil priority function")
		}
		return s.setRoute(&msgRoute[T]{name: "WithPriority", submit: func(ctx context.Context, m *Msg[T], task func(context.Context) error) (*crew.Task, error) {
			return p.SubmitContext(ctx, prio(*m), task), nil
		}})
	})
}

// A msgRoute queues the task of a decoded message on a layer, by a
// property of the message: WithKeyed's key, WithPriority's priority.
type msgRoute[T any] struct {
	name   string // the option that made it
	submit func(ctx context.Context, m *Msg[T], task func(context.Context) error) (*crew.Task, error)
}

// checkKey returns an error wrapping crew.ErrInvalid if key, a message's
// key, is one that no map can hold, which crew.Keyed refuses: one not equal
// to itself (a NaN), or one holding a value whose type cannot be hashed,
// whose comparison panics. Such a key is bad data of its message, which is
// given up, rather than a refusal of the executor, which would stop the
// run.
func checkKey[K comparable](key K) (err error) {
	defer func() {
		if recover() != nil {
			err = invalid("WithKeyed: the key %#v of the message holds a value whose type cannot be hashed", key)
		}
	}()
	if key != key {
		return invalid("WithKeyed: the key %#v of the message is not equal to itself (it holds a NaN)", key)
	}
	return nil
}

// routeName names the option that made a route and its message type,
// whatever that type is.
type routeName interface {
	option() string
	msgType() string
}

func (r *msgRoute[T]) option() string  { return r.name }
func (r *msgRoute[T]) msgType() string { return fmt.Sprintf("%T", *new(T)) }

// setRoute records the route of a WithKeyed or WithPriority option, and
// fails if one was recorded already.
func (s *consumerSettings) setRoute(r routeName) error {
	if s.route != nil {
		return invalid("%s: %s was given already; a consumer takes at most one of WithKeyed and WithPriority", r.option(), s.route.option())
	}
	s.route = r
	return nil
}

// A taskSubmitter is an executor's SubmitContext: every crew.Executor has
// one.
type taskSubmitter interface {
	SubmitContext(ctx context.Context, task func(context.Context) error) *crew.Task
}

// executor describes what a Consumer knows of its executor.
type executor struct {
	ex     crew.Executor
	pool   *crew.Pool    // ex, if it is a *crew.Pool
	submit taskSubmitter // ex's submissions with a Task
}

// newExecutor checks ex, the executor given to NewConsumer.
func newExecutor(ex crew.Executor) (executor, error) {
	switch e := ex.(type) {
	case nil:
		return executor{}, invalid("NewConsumer: nil executor")
	case *crew.Pool:
		switch {
		case e == nil:
			return executor{}, invalid("NewConsumer: nil pool")
		case e.Stats().MaxWorkers == 0:
			return executor{}, invalid("NewConsumer: zero pool: make it with crew.New")
		}
		return executor{ex: e, pool: e, submit: e}, nil
	case *crew.Subpool:
		switch {
		case e == nil:
			return executor{}, invalid("NewConsumer: nil Subpool")
		case e.Stats().Limit == 0:
			return executor{}, invalid("NewConsumer: zero Subpool: make it with crew.NewSubpool")
		}
		return executor{ex: e, submit: e}, nil
	case *crew.RateLimited:
		if e == nil {
			return executor{}, invalid("NewConsumer: nil RateLimited")
		}
		return executor{ex: e, submit: e}, nil
	case *crew.Retrying:
		if e == nil {
			return executor{}, invalid("NewConsumer: nil Retrying")
		}
	}
	s, ok := ex.(taskSubmitter)
	if !ok {
		return executor{}, invalid("NewConsumer: executor %T has no SubmitContext method", ex)
	}
	return executor{ex: ex, submit: s}, nil
}

// limit returns how many tasks the executor runs at once, as far as the
// Consumer can see: a pool's worker limit, a Subpool's limit, and
// DefaultMaxInFlight for an executor whose limit it cannot see (a
// RateLimited).
func (e executor) limit() int {
	switch ex := e.ex.(type) {
	case *crew.Pool:
		return max(1, ex.Stats().MaxWorkers)
	case *crew.Subpool:
		return max(1, ex.Stats().Limit)
	}
	return DefaultMaxInFlight
}
