package jetstream

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew/batch"
)

// A ConsumerOption configures [NewConsumer]. Every [Option] is one too.
type ConsumerOption interface {
	// applyConsumer applies the option to s, or returns why it is invalid.
	applyConsumer(s *consumerSettings) error
}

// A PublisherOption configures [NewPublisher]: [WithBatch],
// [WithPublishTimeout], every [ProducerOption] ([WithHeaderInjector]) and
// every [Option].
type PublisherOption interface {
	// applyPublisher applies the option to s, or returns why it is invalid.
	applyPublisher(s *publisherSettings) error
}

// An Option configures a [Consumer], a [Publisher] and a [Queue]: it is a
// [ConsumerOption], a [PublisherOption] and a [QueueOption]. [WithCodec]
// returns one.
type Option interface {
	ConsumerOption
	PublisherOption
	QueueOption
}

// Defaults used by [NewConsumer] for what no option sets: see
// [WithMaxInFlight], [WithFetchWait], [WithMaxFetch], [WithPulls],
// [WithDrainTimeout] and [WithBackoff].
const (
	DefaultMaxInFlight  = 1024             // bound on the messages held, when the pool's worker limit is larger (WithMaxInFlight)
	DefaultFetchWait    = time.Second      // how long a pull waits on the server (WithFetchWait)
	DefaultMaxFetch     = 256              // messages asked for in one pull at most (WithMaxFetch)
	DefaultPulls        = 2                // pulls open at once (WithPulls)
	DefaultDrainTimeout = 10 * time.Second // how long stopping waits for tasks (WithDrainTimeout)
	DefaultBaseBackoff  = time.Second      // redelivery delay after the first failure (WithBackoff)
	DefaultMaxBackoff   = time.Minute      // bound on the redelivery delay (WithBackoff)
)

// maxPull bounds the messages asked for in one pull, whatever WithMaxFetch
// says: the NATS client makes room for a pull's messages when it sends it.
const maxPull = 4096

// minHeartbeat is the shortest interval between heartbeats.
const minHeartbeat = time.Millisecond

// DefaultPublishTimeout is how long a [Publisher] flush waits for the
// publish acknowledgements of a batch, unless [WithPublishTimeout] says
// otherwise.
const DefaultPublishTimeout = 5 * time.Second

type consumerSettings struct {
	codec        Codec
	maxInFlight  int // 0: the pool's worker limit, at most DefaultMaxInFlight
	maxFetch     int
	pulls        int
	fetchWait    time.Duration
	drainTimeout time.Duration
	backoff      func(int) time.Duration
	heartbeat    time.Duration // < 0: a third of the consumer's AckWait; 0: none
	deadJS       natsjs.JetStream
	deadSubject  string
	onError      func(error)
	doubleAck    bool
	snoozeJS     natsjs.JetStream
	route        routeName // WithKeyed or WithPriority: a *msgRoute[T]; nil: none
	extract      ContextExtractor
	jobTimeout   time.Duration // 0: none
	pullsSet     bool          // WithPulls was given
}

func defaultConsumerSettings() consumerSettings {
	return consumerSettings{
		codec:        JSON{},
		maxFetch:     DefaultMaxFetch,
		pulls:        DefaultPulls,
		fetchWait:    DefaultFetchWait,
		drainTimeout: DefaultDrainTimeout,
		backoff:      ExponentialBackoff(DefaultBaseBackoff, DefaultMaxBackoff),
		heartbeat:    -1,
		onError:      logError,
	}
}

func logError(err error) { log.Print("crew/jetstream: ", err) }

type publisherSettings struct {
	codec   Codec
	timeout time.Duration
	batch   []batch.Option
	inject  HeaderInjector // nil: none
}

func defaultPublisherSettings() publisherSettings {
	return publisherSettings{codec: JSON{}, timeout: DefaultPublishTimeout}
}

type consumerOption func(*consumerSettings) error

func (f consumerOption) applyConsumer(s *consumerSettings) error { return f(s) }

type publisherOption func(*publisherSettings) error

func (f publisherOption) applyPublisher(s *publisherSettings) error { return f(s) }

// checked returns the body of an option: it applies set if ok, the outcome
// of checking the option's arguments, is true, and fails with
// invalid(format, args...) otherwise.
func checked[S any](ok bool, set func(*S), format string, args ...any) func(*S) error {
	return func(s *S) error {
		if !ok {
			return invalid(format, args...)
		}
		set(s)
		return nil
	}
}

// applyOptions applies opts to s with apply, then checks s with each of
// checks, then panics, if argErr (the error of the constructor's own
// arguments), any option's error or any check's is not nil, or an option
// is nil, with all of them joined. constructor names the function whose
// options they are.
func applyOptions[O, S any](constructor string, s *S, argErr error, opts []O, apply func(O, *S) error, checks ...func(*S) error) {
	if err := optionsError(constructor, s, argErr, opts, apply, checks...); err != nil {
		panic(err)
	}
}

// optionsError is applyOptions returning the error instead of panicking.
func optionsError[O, S any](constructor string, s *S, argErr error, opts []O, apply func(O, *S) error, checks ...func(*S) error) error {
	errs := []error{argErr}
	for i, o := range opts {
		if any(o) == nil { // o is an interface: nil only if it holds nothing
			errs = append(errs, invalid("%s: option %d is nil", constructor, i))
			continue
		}
		errs = append(errs, apply(o, s))
	}
	for _, check := range checks {
		errs = append(errs, check(s))
	}
	return errors.Join(errs...)
}

type codecOption struct{ c Codec }

func (o codecOption) applyConsumer(s *consumerSettings) error   { return o.set(&s.codec) }
func (o codecOption) applyPublisher(s *publisherSettings) error { return o.set(&s.codec) }
func (o codecOption) applyQueue(s *queueSettings) error         { return o.set(&s.codec) }

// set stores the codec in *dst, unless it is nil.
func (o codecOption) set(dst *Codec) error {
	if o.c == nil {
		return invalid("WithCodec(nil)")
	}
	*dst = o.c
	return nil
}

// WithCodec sets the [Codec] that encodes published items and enqueued
// jobs and decodes consumed messages. The default is [JSON].
func WithCodec(c Codec) Option { return codecOption{c} }

// WithMaxInFlight bounds the messages the [Consumer] holds at once, fetched
// and not yet settled, to n: running, and waiting in the executor's or a
// layer's queue. The default is the executor's limit when [Consumer.Run]
// starts (a pool's worker limit, a Subpool's limit), so that a message
// never waits in a queue unless the executor is shared with other work,
// but at most [DefaultMaxInFlight], which is also the default for a
// [crew.RateLimited], whose rate, not a worker count, bounds what it
// starts: for one, set n to about what the rate starts in a fraction of
// AckWait, since the messages beyond it wait here, where no other consumer
// can take them. With [WithKeyed] or [WithPriority], n is how far ahead of
// the workers the consumer reads: above the executor's limit, it lets
// the messages of other keys run while one key is busy, and gives
// priorities a backlog to choose from.
//
// A consumer never needs more messages in flight than it can fetch and
// acknowledge while they run, and the server delivers no more than the
// durable consumer's MaxAckPending (1000 by default) unacknowledged to all
// its Consumers together: that is the limit across the cluster, and n the
// limit of one Consumer. n must be positive; the bound costs the same
// whatever its size.
func WithMaxInFlight(n int) ConsumerOption {
	return positive("WithMaxInFlight", n, func(s *consumerSettings) { s.maxInFlight = n })
}

// WithMaxFetch bounds the messages asked for in one pull request to n
// ([DefaultMaxFetch]). A pull asks for as many messages as there is room
// for, up to n, and never for more than 4096 (the NATS client makes room
// for a pull's messages when it sends it) nor more than the consumer's
// MaxRequestBatch. n must be positive.
func WithMaxFetch(n int) ConsumerOption {
	return positive("WithMaxFetch", n, func(s *consumerSettings) { s.maxFetch = n })
}

// WithPulls sets how many pull requests may wait on the server at once
// ([DefaultPulls]): while one is being filled, the next can already ask for
// the room that finished tasks made. The consumer's MaxWaiting, the pulls
// the server lets wait, bounds n. n must be positive, and 1 with
// [WithKeyed] or [WithPriority], which keep one pull open: the server
// spreads messages among the pulls open, which would queue them out of
// order.
func WithPulls(n int) ConsumerOption {
	return positive("WithPulls", n, func(s *consumerSettings) { s.pulls, s.pullsSet = n, true })
}

// positive is an option that applies set if n, its argument, is positive,
// and fails naming option otherwise.
func positive(option string, n int, set func(*consumerSettings)) ConsumerOption {
	return consumerOption(checked(n > 0, set, "%s(%d): n must be positive", option, n))
}

// nonNegative is an option that applies set if d, its argument, is not
// negative, and fails naming option otherwise.
func nonNegative(option string, d time.Duration, set func(*consumerSettings)) ConsumerOption {
	return consumerOption(checked(d >= 0, set, "%s(%v): d must not be negative", option, d))
}

// WithFetchWait sets how long a pull request waits on the server for
// messages before it expires and a new one is sent ([DefaultFetchWait]). It
// also bounds how long stopping waits for the pulls in progress, whose
// late messages are handed back at once. d must be at least 10ms.
func WithFetchWait(d time.Duration) ConsumerOption {
	return consumerOption(checked(d >= 10*time.Millisecond, func(s *consumerSettings) { s.fetchWait = d },
		"WithFetchWait(%v): d must be at least 10ms", d))
}

// WithDrainTimeout sets how long [Consumer.Run], once its context is
// cancelled, waits for the messages in flight to finish
// ([DefaultDrainTimeout]). When it passes, Run cancels the handlers' context, hands the unfinished messages
// back to the server (Nak) so that another consumer can take them at once,
// and waits for the handlers to return. d must not be negative.
func WithDrainTimeout(d time.Duration) ConsumerOption {
	return nonNegative("WithDrainTimeout", d, func(s *consumerSettings) { s.drainTimeout = d })
}

// WithJobTimeout bounds how long a [Handler] runs, d, and abandons one
// that does not return.
//
// The handler's context is cancelled d after the handler starts (its Err
// is then [context.DeadlineExceeded]). A handler that returns after that
// is settled by what it returns, as any other: an error hands the message
// back with the backoff ([WithBackoff]), or gives it up on the last
// delivery the consumer's MaxDeliver allows; nil acknowledges it.
//
// A handler still running d after its context was cancelled, whether by
// this timeout (2d after it started), by the drain timeout of
// [Consumer.Run] or by the end of the pool's context, is abandoned: the
// Consumer stops sending heartbeats for its message and settles it as a
// failure, NakWithDelay with the backoff, or, on the last delivery
// MaxDeliver allows, gives it up ([WithDeadLetter], then Term); a message
// a drain timeout already handed back is not settled again. It reports a
// [MessageError] wrapping [ErrJobStuck] to the error handler (for a message
// handed back, with HandedBack set; given up, as any message given up on)
// and counts it in [Stats].Abandoned. A goroutine cannot be stopped: the
// handler keeps its worker of the executor, and its message's slot of
// [WithMaxInFlight], until it returns, so that the Consumer never runs
// more handlers than its bounds say; what it returns then is ignored.
// With [WithKeyed], its key stays busy as long: the key's next messages,
// and its own message if it comes back to this Consumer, wait behind it.
// Run's drain does not wait for an abandoned handler.
//
// Without this option a handler runs as long as it does: its message gets
// heartbeats for as long, and, once the drain timeout has cancelled its
// context, Run waits for it to return. d must be positive. The cost is a
// context with a deadline and a timer for each handler.
func WithJobTimeout(d time.Duration) ConsumerOption {
	return consumerOption(checked(d > 0, func(s *consumerSettings) { s.jobTimeout = d },
		"WithJobTimeout(%v): d must be positive", d))
}

// WithBackoff sets the delay before a message whose handler failed is
// redelivered, from the number of deliveries so far (1 after the first
// failure). The default is [ExponentialBackoff]([DefaultBaseBackoff],
// [DefaultMaxBackoff]). f must not be nil.
func WithBackoff(f func(delivery int) time.Duration) ConsumerOption {
	return consumerOption(checked(f != nil, func(s *consumerSettings) { s.backoff = f }, "WithBackoff(nil)"))
}

// WithHeartbeat sets how often the [Consumer] tells the server that
// messages it holds are still being worked on ([natsjs.Msg.InProgress]),
// which restarts their AckWait so that long tasks are not redelivered
// elsewhere. A ticker fires
// every interval and sends the notice for each message held for at least
// half an interval since its arrival or its last notice, so a message waits
// at most about an interval between notices, from the executor's or a
// layer's queue to the end of its handler. The default is a third of the consumer's AckWait (or
// of its shortest BackOff step); 0 turns heartbeats off, and a d below a
// millisecond is taken as a millisecond. d must not be negative.
func WithHeartbeat(d time.Duration) ConsumerOption {
	return nonNegative("WithHeartbeat", d, func(s *consumerSettings) {
		s.heartbeat = d
		if d > 0 {
			s.heartbeat = max(d, minHeartbeat)
		}
	})
}

// WithDeadLetter publishes, through js, every message that the [Consumer]
// gives up on to subject before terminating it: a message whose handler
// panicked, whose handler returned a [Permanent] error, that could not be
// decoded, or whose last delivery allowed by the consumer's MaxDeliver
// failed. The dead letter keeps the body and headers and adds the headers
// listed with [HeaderError]. It is published with a message id made of the
// stream name and sequence, so that dead-lettering the same message twice
// stores it once. If the publish fails, the message is handed back for
// redelivery instead of terminated, except on the last delivery MaxDeliver
// allows, which the server would not redeliver: the message is then
// terminated and the failure reported. Without this option such messages
// are only terminated. js must not be nil, and subject must be a subject
// one can publish to (see [NewPublisher]).
func WithDeadLetter(js natsjs.JetStream, subject string) ConsumerOption {
	return consumerOption(func(s *consumerSettings) error {
		if js == nil {
			return invalid("WithDeadLetter: nil JetStream")
		}
		if err := checkSubject(subject); err != nil {
			return invalid("WithDeadLetter: %v", err)
		}
		s.deadJS, s.deadSubject = js, subject
		return nil
	})
}

// checkSubject returns why subject cannot be published to, or nil: it must
// be non-empty, without spaces, tabs or line breaks, and made of non-empty
// tokens separated by dots, none of them a wildcard (* or >).
func checkSubject(subject string) error { return checkTokens(subject, false) }

// checkFilter returns why subject is neither a subject nor a subject
// filter, or nil: as checkSubject, but with wildcards, > only as the last
// token.
func checkFilter(subject string) error { return checkTokens(subject, true) }

// checkTokens checks subject for checkSubject, or checkFilter if
// wildcards is true.
func checkTokens(subject string, wildcards bool) error {
	if subject == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsAny(subject, " \t\r\n") {
		return fmt.Errorf("subject %q contains white space", subject)
	}
	toks := strings.Split(subject, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return fmt.Errorf("subject %q has an empty token", subject)
		case !wildcards && (tok == "*" || tok == ">"):
			return fmt.Errorf("subject %q has a wildcard, which cannot be published to", subject)
		case tok == ">" && i != len(toks)-1:
			return fmt.Errorf("subject %q has > before its last token", subject)
		}
	}
	return nil
}

// WithSnooze lets a [Consumer] snooze jobs without counting an attempt:
// when a [Handler] returns [Snooze](d), the Consumer publishes, through
// js, a message schedule (see [Queue]) that publishes the job again, with
// its body and headers (but not the server's Nats- headers, such as a
// TTL), to its subject d later, and then acknowledges the delivery. The
// copy carries the attempts made so far in its [HeaderAttempts] header, so
// the snoozed delivery is not counted: [Msg.Attempt], the backoff and the
// MaxDeliver limit count only the attempts that failed. The stream must
// allow message schedules (nats-server 2.12) and hold the subject
// S.schedule.> of the job's subject S, which the consumer's filter must
// not match. The schedule is published with a message id made of the
// stream name and sequence, so snoozing a redelivered job again stores one
// schedule. If the publish fails, the failure is reported and the job is
// handed back with NakWithDelay(d), which counts as a delivery.
//
// Without this option, a snoozed job is handed back with NakWithDelay(d),
// and the server counts that delivery towards MaxDeliver. js must not be
// nil.
func WithSnooze(js natsjs.JetStream) ConsumerOption {
	return consumerOption(checked(js != nil, func(s *consumerSettings) { s.snoozeJS = js }, "WithSnooze: nil JetStream"))
}

// WithErrorHandler sets the function that receives what goes wrong outside
// handlers' return values: failed pulls (before they are retried), failed
// acknowledgements and dead-letter publishes, and messages given up on. A
// message given up on arrives as a [MessageError]; for a recovered panic its
// Err is a *[crew.PanicError] with the stack, which [errors.As] finds. h is
// called from the [Consumer]'s goroutines and must not block for long. The
// default logs with package [log]. h must not be nil.
func WithErrorHandler(h func(error)) ConsumerOption {
	return consumerOption(checked(h != nil, func(s *consumerSettings) { s.onError = h }, "WithErrorHandler(nil)"))
}

// WithDoubleAck makes the [Consumer] wait for the server to confirm each
// acknowledgement ([natsjs.Msg.DoubleAck]) before it takes another message in the freed
// slot, so that a message reported as acknowledged cannot be redelivered.
// It costs a round trip per message; by default acknowledgements are sent
// without waiting, and one lost in a disconnection makes the message come
// again after its AckWait.
func WithDoubleAck() ConsumerOption {
	return consumerOption(func(s *consumerSettings) error {
		s.doubleAck = true
		return nil
	})
}

// WithBatch sets the options of the [Publisher]'s [batch.Batcher]. They
// come after the Publisher's defaults ([batch.WithRetry](5, 100ms, 2s)), so
// they override them. Give a [batch.WithErrorHandler] for the item type to
// receive the items whose last flush failed.
func WithBatch(opts ...batch.Option) PublisherOption {
	return publisherOption(func(s *publisherSettings) error {
		s.batch = append(s.batch, opts...)
		return nil
	})
}

// WithPublishTimeout bounds how long a [Publisher] flush waits for the
// publish acknowledgements of its batch ([DefaultPublishTimeout]); the flush fails
// with the ones still missing, and is retried. d must be positive.
func WithPublishTimeout(d time.Duration) PublisherOption {
	return publisherOption(checked(d > 0, func(s *publisherSettings) { s.timeout = d },
		"WithPublishTimeout(%v): d must be positive", d))
}
