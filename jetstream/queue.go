package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// scheduleToken separates a queue's subject from the tokens of its
// schedules: the schedules of the jobs of subject S are stored on
// S.schedule.<token>.
const scheduleToken = "schedule"

// scheduleSubject returns the subject of the schedule named token of the
// jobs of subject.
func scheduleSubject(subject, token string) string {
	return subject + "." + scheduleToken + "." + token
}

// A Queue enqueues jobs to a JetStream subject one at a time, waiting for
// the stream to store each: [Queue.Enqueue] returns the stream sequence.
// A [Consumer] of a consumer whose filter is the Queue's subject runs them.
// Make one with [NewQueue]; it holds no goroutine and needs no closing.
//
// A job may be delayed ([WithDelay], [WithRunAt]), carry a unique id
// ([WithUniqueID]), a time to live ([WithTTL]) and headers
// ([WithHeader]); [Queue.Schedule] makes a periodic job. Delayed and
// periodic jobs use the server's message schedules (nats-server 2.12 for
// delays, 2.14 for periodic schedules): the stream must allow them
// (AllowMsgSchedules in [natsjs.StreamConfig]), and its subjects must
// cover the Queue's subject S and the subjects of its schedules,
// S.schedule.<token> (for example with S.>, or a stream subject ending in
// >). The schedules are messages too: the consumer that runs the jobs must
// not match them, so its filter should be S itself. A [Consumer] that
// receives a schedule does not run it (see [NewConsumer]).
//
// On a nil Queue or one not made by NewQueue, its methods return an error
// wrapping [crew.ErrInvalid].
type Queue[T any] struct {
	js         natsjs.JetStream
	subject    string
	codec      Codec
	inject     HeaderInjector
	partitions int // WithPartitions; 0: none
}

// A QueueOption configures [NewQueue]: [WithPartitions], every
// [ProducerOption] ([WithHeaderInjector]) and every [Option] ([WithCodec]).
type QueueOption interface {
	// applyQueue applies the option to s, or returns why it is invalid.
	applyQueue(s *queueSettings) error
}

type queueSettings struct {
	codec      Codec
	inject     HeaderInjector // nil: none
	partitions int            // 0: none
}

// NewQueue returns a [Queue] of jobs published through js to subject, which
// must belong to a stream, configured by opts. NewQueue panics, with an
// error wrapping [crew.ErrInvalid], if js is nil, subject cannot be
// published to (see [NewPublisher]), or an option is nil or invalid.
func NewQueue[T any](js natsjs.JetStream, subject string, opts ...QueueOption) *Queue[T] {
	var argErr error
	if js == nil {
		argErr = invalid("NewQueue: nil JetStream")
	} else if err := checkSubject(subject); err != nil {
		argErr = invalid("NewQueue: %v", err)
	}
	s := queueSettings{codec: JSON{}}
	applyOptions("NewQueue", &s, argErr, opts, QueueOption.applyQueue)
	return &Queue[T]{js: js, subject: subject, codec: s.codec, inject: s.inject, partitions: s.partitions}
}

// Subject returns the subject the Queue publishes its jobs to: "" for a
// nil Queue.
func (q *Queue[T]) Subject() string {
	if q == nil {
		return ""
	}
	return q.subject
}

// An EnqueueOption configures one call of [Queue.Enqueue] or
// [Queue.Schedule]: [WithDelay], [WithRunAt], [WithUniqueID], [WithTTL],
// [WithHeader], [WithKey].
type EnqueueOption interface {
	// applyEnqueue applies the option to s, or returns why it is invalid.
	applyEnqueue(s *enqueueSettings) error
}

type enqueueSettings struct {
	due     func(now time.Time) time.Time // nil: now
	id      string
	ttl     time.Duration
	headers nats.Header
	key     *string // WithKey; nil: none
}

type enqueueOption func(*enqueueSettings) error

func (f enqueueOption) applyEnqueue(s *enqueueSettings) error { return f(s) }

// WithDelay makes the job due d from now: no consumer receives it before.
// The server holds it as a message schedule and publishes it to the
// Queue's subject when it is due, within about a quarter of a second; a
// zero d publishes the job at once. Where a later option sets the time
// again ([WithDelay], [WithRunAt]), the last one counts. d must not be
// negative.
func WithDelay(d time.Duration) EnqueueOption {
	return enqueueOption(checked(d >= 0, func(s *enqueueSettings) { s.due = func(now time.Time) time.Time { return now.Add(d) } },
		"WithDelay(%v): d must not be negative", d))
}

// WithRunAt makes the job due at t, as [WithDelay](time.Until(t)) does; a
// t that has passed publishes the job at once. t must not be the zero
// time.
func WithRunAt(t time.Time) EnqueueOption {
	return enqueueOption(checked(!t.IsZero(), func(s *enqueueSettings) { s.due = func(time.Time) time.Time { return t } },
		"WithRunAt: zero time"))
}

// WithUniqueID gives the job the message id id (the Nats-Msg-Id header):
// while the stream remembers id, within its duplicate window (the
// Duplicates of [natsjs.StreamConfig], two minutes by default, which
// [Queue.DuplicateWindow] reports) from the first Enqueue with it, another
// Enqueue with the same id stores nothing and returns [ErrDuplicate]. For
// a delayed job the id is that of its schedule, and the window runs from
// the Enqueue, not from when the job is due. id must not be empty.
func WithUniqueID(id string) EnqueueOption {
	return enqueueOption(checked(id != "", func(s *enqueueSettings) { s.id = id }, "WithUniqueID: empty id"))
}

// WithTTL makes the stream delete the job d after it was published (for a
// delayed or periodic job, after the server published it, when due),
// whether or not a consumer received it (the Nats-TTL header, nats-server
// 2.11). The stream must allow it (AllowMsgTTL in [natsjs.StreamConfig]).
// The server counts whole seconds, rounding d down; d must be at least a
// second.
func WithTTL(d time.Duration) EnqueueOption {
	return enqueueOption(checked(d >= time.Second, func(s *enqueueSettings) { s.ttl = d },
		"WithTTL(%v): d must be at least a second", d))
}

// WithHeader adds the header key: value to the job; the [Handler] finds it
// in [Msg].Header. Headers whose key starts with Nats- are the server's, and
// key must not be one of them, nor be empty or contain white space or a
// colon.
func WithHeader(key, value string) EnqueueOption {
	ok := key != "" && !strings.ContainsAny(key, " \t\r\n:") && !strings.HasPrefix(strings.ToLower(key), "nats-")
	return enqueueOption(checked(ok, func(s *enqueueSettings) {
		if s.headers == nil {
			s.headers = nats.Header{}
		}
		s.headers.Add(key, value)
	}, "WithHeader(%q): key must be non-empty, without white space or colon, and not start with Nats-", key))
}

// Enqueue publishes job to the Queue's subject (to its key's partition
// subject on a partitioned Queue, [WithPartitions]), as opts say, and waits for
// the stream to store it, or for ctx to end. It returns the stream
// sequence of the stored message: for a delayed job, that of its
// schedule, since the job gets its own when it is due. If the stream had
// stored a message with the same unique id ([WithUniqueID]) within its
// duplicate window, Enqueue stores nothing and returns that message's
// sequence with [ErrDuplicate].
//
// A publish that gets no answer within [DefaultPublishTimeout], as while
// the server restarts, is sent again with the same message id until ctx
// ends: the job's unique id, or a random one, so the stream stores the job
// once. With a unique id, a retry whose first attempt was stored returns
// ErrDuplicate and the job's sequence.
//
// Enqueue returns an error wrapping [crew.ErrInvalid], and publishes
// nothing, for a nil ctx, a nil or invalid option, and on a nil Queue or
// one not made by [NewQueue], and for a missing [WithKey] on a partitioned
// Queue or one on a Queue that is not; the Codec's error if job cannot be encoded;
// and the publish error otherwise (the stream refuses a delayed job if it
// does not allow message schedules, a TTL if it does not allow message
// TTLs; no stream holds the subject).
func (q *Queue[T]) Enqueue(ctx context.Context, job T, opts ...EnqueueOption) (uint64, error) {
	s, err := q.prepare(ctx, "Enqueue", opts)
	if err != nil {
		return 0, err
	}
	m, err := q.message(job, s)
	if err != nil {
		return 0, err
	}
	if q.inject != nil {
		inject(q.inject, ctx, m.Header)
	}
	if now := time.Now(); s.due != nil && s.due(now).After(now) {
		q.schedule(m, nuid.Next(), "@at "+s.due(now).UTC().Format(time.RFC3339Nano), s.ttl)
	} else if s.ttl > 0 {
		m.Header.Set(natsjs.MsgTTLHeader, s.ttl.String())
	}
	if s.id != "" {
		m.Header.Set(natsjs.MsgIDHeader, s.id)
	}
	return q.publish(ctx, m)
}

// Schedule stores a periodic job named name: from then on, the server
// publishes job to the Queue's subject (its key's partition subject on a
// partitioned Queue), with the headers and TTL opts give,
// at every time spec says, until [Queue.Unschedule]. spec is "@every d",
// with d a [time.ParseDuration] of at least a second, a cron expression of
// six fields (seconds, minutes, hours, day of month, month, day of week),
// or one of @yearly, @monthly, @weekly, @daily, @hourly; the times are in
// UTC. Calling Schedule again with the same name replaces the schedule, so
// every process may call it at start. It needs nats-server 2.14 and a
// stream that allows message schedules (see [Queue]). It returns the
// stream sequence of the schedule.
//
// If the server was down when the job was due, it publishes it once, not
// once per time missed. Schedule returns an error wrapping
// [crew.ErrInvalid], and publishes nothing, for a nil ctx, a name that is
// not one subject token (empty, or with a dot, white space or a wildcard),
// an empty or @at spec, an @every spec with a shorter or invalid interval,
// a nil option and [WithDelay], [WithRunAt] or [WithUniqueID]; it returns
// the publish error otherwise (the server checks cron expressions).
func (q *Queue[T]) Schedule(ctx context.Context, name, spec string, job T, opts ...EnqueueOption) (uint64, error) {
	s, err := q.prepare(ctx, "Schedule", opts)
	if err != nil {
		return 0, err
	}
	if err := checkScheduleName(name); err != nil {
		return 0, invalid("Queue.Schedule: %v", err)
	}
	if err := checkSpec(spec); err != nil {
		return 0, invalid("Queue.Schedule(%q): %v", spec, err)
	}
	if s.due != nil || s.id != "" {
		return 0, invalid("Queue.Schedule: WithDelay, WithRunAt and WithUniqueID do not apply to periodic jobs")
	}
	m, err := q.message(job, s)
	if err != nil {
		return 0, err
	}
	q.schedule(m, name, spec, s.ttl)
	return q.publish(ctx, m)
}

// Unschedule deletes the periodic job named name ([Queue.Schedule]) from
// the stream, so that the server publishes it no more; a job it published
// already stays. Deleting a schedule that does not exist is not an error.
// Unschedule returns an error wrapping [crew.ErrInvalid] for a nil ctx and
// a name that is not one subject token, and the error of looking up the
// stream or purging the schedule's subject otherwise.
func (q *Queue[T]) Unschedule(ctx context.Context, name string) error {
	if _, err := q.prepare(ctx, "Unschedule", nil); err != nil {
		return err
	}
	if err := checkScheduleName(name); err != nil {
		return invalid("Queue.Unschedule: %v", err)
	}
	st, err := q.stream(ctx)
	if err != nil {
		return err
	}
	subj := scheduleSubject(q.subject, name)
	if err := st.Purge(ctx, natsjs.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("jetstream: unschedule %s: %w", subj, err)
	}
	return nil
}

// DuplicateWindow returns the duplicate window of the stream that holds the
// Queue's subject (the Duplicates of its [natsjs.StreamConfig]): how long
// it remembers a unique id ([WithUniqueID]). It asks the server, and
// returns an error wrapping [crew.ErrInvalid] for a nil ctx, or the error
// of the look-up.
func (q *Queue[T]) DuplicateWindow(ctx context.Context) (time.Duration, error) {
	if _, err := q.prepare(ctx, "DuplicateWindow", nil); err != nil {
		return 0, err
	}
	st, err := q.stream(ctx)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().Config.Duplicates, nil
}

// prepare checks the Queue and ctx and applies opts, returning the error
// of any of them, wrapping crew.ErrInvalid, for method.
func (q *Queue[T]) prepare(ctx context.Context, method string, opts []EnqueueOption) (enqueueSettings, error) {
	var s enqueueSettings
	if q == nil || q.js == nil || q.codec == nil {
		return s, invalid("Queue.%s: queue not made by NewQueue", method)
	}
	if ctx == nil {
		return s, invalid("Queue.%s: nil context", method)
	}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, invalid("Queue.%s: option %d is nil", method, i))
			continue
		}
		if err := o.applyEnqueue(&s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := joinFirst(errs); err != nil {
		return s, err
	}
	switch {
	case q.partitions > 0 && s.key == nil:
		return s, invalid("Queue.%s: the Queue is partitioned (WithPartitions(%d)): give each job its key with WithKey", method, q.partitions)
	case q.partitions == 0 && s.key != nil:
		return s, invalid("Queue.%s: WithKey on a Queue without WithPartitions: the key would order nothing", method)
	}
	return s, nil
}

// message encodes job into a message to the Queue's subject, or its key's
// partition subject, with the headers of s.
func (q *Queue[T]) message(job T, s enqueueSettings) (*nats.Msg, error) {
	data, err := q.codec.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("jetstream: encode job: %w", err)
	}
	h := nats.Header{}
	for k, v := range s.headers {
		h[k] = append([]string(nil), v...)
	}
	subject := q.subject
	if s.key != nil {
		subject = PartitionSubject(q.subject, Partition(*s.key, q.partitions))
	}
	return &nats.Msg{Subject: subject, Header: h, Data: data}, nil
}

// schedule turns m, a job to its subject, into the schedule token that
// publishes it there as spec says, with the TTL ttl if not zero.
func (q *Queue[T]) schedule(m *nats.Msg, token, spec string, ttl time.Duration) {
	target := m.Subject
	m.Subject = scheduleSubject(q.subject, token)
	m.Header.Set(natsjs.ScheduleHeader, spec)
	m.Header.Set(natsjs.ScheduleTargetHeader, target)
	if ttl > 0 {
		m.Header.Set(natsjs.ScheduleTTLHeader, ttl.String())
	}
}

// publish publishes m and returns its stream sequence, with ErrDuplicate
// if the stream dropped it as a duplicate. An attempt that gets no answer
// within DefaultPublishTimeout (the server restarting, a leader election)
// is made again with the same message id while ctx allows: m gets a
// random one if it has none, so that the stream stores it once, and a
// retry that finds its own earlier attempt stored is not a duplicate.
func (q *Queue[T]) publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	own := m.Header.Get(natsjs.MsgIDHeader) == ""
	if own {
		m.Header.Set(natsjs.MsgIDHeader, nuid.Next())
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, DefaultPublishTimeout)
		ack, err := q.js.PublishMsg(actx, m)
		cancel()
		switch {
		case err == nil && ack.Duplicate && !own:
			return ack.Sequence, fmt.Errorf("%w: %s", ErrDuplicate, m.Header.Get(natsjs.MsgIDHeader))
		case err == nil:
			return ack.Sequence, nil
		case ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)):
			t := time.NewTimer(retryDelay(attempt))
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		return 0, fmt.Errorf("jetstream: enqueue to %s: %w", m.Subject, err)
	}
}

// stream looks up the stream that holds the Queue's subject.
func (q *Queue[T]) stream(ctx context.Context) (natsjs.Stream, error) {
	return streamOf(ctx, q.js, q.subject)
}

// streamOf looks up, through js, the stream that holds subject.
func streamOf(ctx context.Context, js natsjs.JetStream, subject string) (natsjs.Stream, error) {
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream of %s: %w", subject, err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", name, err)
	}
	return st, nil
}

// checkScheduleName returns why name cannot name a periodic job, or nil.
func checkScheduleName(name string) error {
	if name == "" || strings.ContainsAny(name, ". \t\r\n*>") {
		return fmt.Errorf("name %q must be one subject token: non-empty, without dots, white space or wildcards", name)
	}
	return nil
}

// checkSpec returns why spec is not a periodic schedule, or nil; the
// server checks cron expressions.
func checkSpec(spec string) error {
	switch {
	case strings.TrimSpace(spec) == "":
		return fmt.Errorf("empty spec")
	case strings.HasPrefix(spec, "@at"):
		return fmt.Errorf("@at is not periodic: use Enqueue with WithRunAt")
	case strings.HasPrefix(spec, "@every "):
		d, err := time.ParseDuration(spec[len("@every "):])
		if err != nil || d < time.Second {
			return fmt.Errorf("the interval must be a duration of at least a second")
		}
	}
	return nil
}
