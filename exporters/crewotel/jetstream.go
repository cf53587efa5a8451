package crewotel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ConsumerKey is the attribute that names the [jetstream.Consumer] of a
// data point: the name it was given to [RegisterJetStream].
const ConsumerKey = attribute.Key("crew.jetstream.consumer")

// PublisherKey is the attribute that names the [jetstream.Publisher] of a
// data point: the name it was given to [RegisterJetStream].
const PublisherKey = attribute.Key("crew.jetstream.publisher")

// consumerStats are the instruments read from jetstream.Stats.
var consumerStats = []stat[jetstream.Stats]{
	{"crew.jetstream.consumer.messages.fetched", "{message}", "Messages received from the server.", true, func(s jetstream.Stats) int64 { return int64(s.Fetched) }},
	{"crew.jetstream.consumer.messages.acked", "{message}", "Messages handled successfully and acknowledged.", true, func(s jetstream.Stats) int64 { return int64(s.Acked) }},
	{"crew.jetstream.consumer.messages.nacked", "{message}", "Messages handed back for redelivery.", true, func(s jetstream.Stats) int64 { return int64(s.Nacked) }},
	{"crew.jetstream.consumer.messages.terminated", "{message}", "Messages given up on (Term).", true, func(s jetstream.Stats) int64 { return int64(s.Terminated) }},
	{"crew.jetstream.consumer.messages.dead_lettered", "{message}", "Messages published to the dead-letter subject before Term.", true, func(s jetstream.Stats) int64 { return int64(s.DeadLettered) }},
	{"crew.jetstream.consumer.messages.snoozed", "{message}", "Messages handed back or rescheduled because the handler returned Snooze.", true, func(s jetstream.Stats) int64 { return int64(s.Snoozed) }},
	{"crew.jetstream.consumer.messages.in_flight", "{message}", "Messages held now: fetched and not settled.", false, func(s jetstream.Stats) int64 { return int64(s.InFlight) }},
	{"crew.jetstream.consumer.panics", "{panic}", "Panics recovered: of handlers, and of WithKeyed's and WithPriority's functions.", true, func(s jetstream.Stats) int64 { return int64(s.Panicked) }},
	{"crew.jetstream.consumer.heartbeats", "{heartbeat}", "InProgress notices sent.", true, func(s jetstream.Stats) int64 { return int64(s.Heartbeats) }},
	{"crew.jetstream.consumer.handlers.abandoned", "{handler}", "Handlers abandoned, still running a job timeout after their context was cancelled.", true, func(s jetstream.Stats) int64 { return int64(s.Abandoned) }},
}

// publisherStats are the instruments read from jetstream.PublisherStats.
var publisherStats = []stat[jetstream.PublisherStats]{
	{"crew.jetstream.publisher.messages.stored", "{message}", "Messages the stream stored.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Stored) }},
	{"crew.jetstream.publisher.messages.duplicates", "{message}", "Messages the stream dropped as duplicates of stored ones.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Duplicates) }},
	{"crew.jetstream.publisher.items.added", "{item}", "Items accepted by Add.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Added) }},
	{"crew.jetstream.publisher.items.rejected", "{item}", "Items refused because the pending bound was reached.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Rejected) }},
	{"crew.jetstream.publisher.items.dropped", "{item}", "Items discarded by DropOldest.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Dropped) }},
	{"crew.jetstream.publisher.items.flushed", "{item}", "Items in batches published successfully.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Flushed) }},
	{"crew.jetstream.publisher.items.failed", "{item}", "Items in batches handed to the error handler.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Failed) }},
	{"crew.jetstream.publisher.batches.flushed", "{batch}", "Batches published successfully.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Batches) }},
	{"crew.jetstream.publisher.batches.failed", "{batch}", "Batches handed to the error handler after their last attempt failed.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.FailedBatches) }},
	{"crew.jetstream.publisher.flush.retries", "{flush}", "Flushes made again after a failure.", true, func(s jetstream.PublisherStats) int64 { return int64(s.Batch.Retries) }},
}

// source is a named function that returns statistics S.
type source[S any] struct {
	stats func() S
	attrs metric.MeasurementOption
}

// sources checks m, whose entries are named by key, and returns its
// entries in the order of their names.
func sources[S any](what string, key attribute.Key, m map[string]func() S) ([]source[S], error) {
	names := make([]string, 0, len(m))
	for name, f := range m {
		if f == nil {
			return nil, fmt.Errorf("%w: crewotel.RegisterJetStream: the Stats func of %s %q is nil", crew.ErrInvalid, what, name)
		}
		if !utf8.ValidString(name) {
			return nil, fmt.Errorf("%w: crewotel.RegisterJetStream: %s name %q is not valid UTF-8", crew.ErrInvalid, what, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]source[S], len(names))
	for i, name := range names {
		out[i] = source[S]{m[name], metric.WithAttributeSet(attribute.NewSet(key.String(name)))}
	}
	return out, nil
}

// instruments creates the instruments of stats on meter.
func instruments[S any](meter metric.Meter, stats []stat[S]) ([]metric.Int64Observable, error) {
	var errs []error
	insts := make([]metric.Int64Observable, len(stats))
	for i, st := range stats {
		var err error
		insts[i], err = st.instrument(meter)
		errs = append(errs, err)
	}
	return insts, errors.Join(errs...)
}

// observe reports the statistics of every source.
func observe[S any](o metric.Observer, srcs []source[S], stats []stat[S], insts []metric.Int64Observable) {
	for _, src := range srcs {
		s := src.stats()
		for i, st := range stats {
			o.ObserveInt64(insts[i], st.value(s), src.attrs)
		}
	}
}

// RegisterJetStream creates crewotel's JetStream instruments on meter, a
// [metric.Meter], and a callback that reports, at each collection, the
// statistics of consumers and publishers, and returns the callback's
// [metric.Registration]: Unregister it to stop reporting. consumers maps a
// name, the [ConsumerKey] of its data points, to a function that returns
// the statistics of a consumer (the method value c.Stats of a
// [jetstream.Consumer] c, whatever its type parameter); publishers maps a
// name, the [PublisherKey], to a [jetstream.Publisher]'s p.Stats. Either
// may be nil. Each collection calls each function once; RegisterJetStream
// keeps its own copy of the maps.
//
// Instruments, for each consumer (attribute crew.jetstream.consumer):
//
//	crew.jetstream.consumer.messages.fetched        Counter {message}        received from the server
//	crew.jetstream.consumer.messages.acked          Counter {message}        handled and acknowledged
//	crew.jetstream.consumer.messages.nacked         Counter {message}        handed back for redelivery
//	crew.jetstream.consumer.messages.terminated     Counter {message}        given up on (Term)
//	crew.jetstream.consumer.messages.dead_lettered  Counter {message}        published to the dead-letter subject
//	crew.jetstream.consumer.messages.snoozed        Counter {message}        snoozed by the handler
//	crew.jetstream.consumer.messages.in_flight      UpDownCounter {message}  fetched and not settled
//	crew.jetstream.consumer.panics                  Counter {panic}          panics recovered
//	crew.jetstream.consumer.heartbeats              Counter {heartbeat}      InProgress notices sent
//	crew.jetstream.consumer.handlers.abandoned      Counter {handler}        still running a job timeout after their context was cancelled
//
// and for each publisher (attribute crew.jetstream.publisher):
//
//	crew.jetstream.publisher.messages.stored      Counter {message}  stored by the stream
//	crew.jetstream.publisher.messages.duplicates  Counter {message}  dropped by the stream as duplicates
//	crew.jetstream.publisher.items.added          Counter {item}     accepted by Add
//	crew.jetstream.publisher.items.rejected       Counter {item}     refused: the pending bound was reached
//	crew.jetstream.publisher.items.dropped        Counter {item}     discarded by DropOldest
//	crew.jetstream.publisher.items.flushed        Counter {item}     in batches published
//	crew.jetstream.publisher.items.failed         Counter {item}     in batches given up on
//	crew.jetstream.publisher.batches.flushed      Counter {batch}    batches published
//	crew.jetstream.publisher.batches.failed       Counter {batch}    batches given up on
//	crew.jetstream.publisher.flush.retries        Counter {flush}    flushes made again after a failure
//
// RegisterJetStream returns an error wrapping [crew.ErrInvalid], and
// creates nothing, for a nil meter, no consumers and no publishers, a nil
// function, and a name that is not valid UTF-8. It returns the meter's
// error if the meter cannot create an instrument or register the
// callback. As with [Register], the data points of two registrations on
// one meter are added together where their attributes agree: give each
// consumer and publisher a name of its own.
func RegisterJetStream(meter metric.Meter, consumers map[string]func() jetstream.Stats, publishers map[string]func() jetstream.PublisherStats) (metric.Registration, error) {
	if meter == nil {
		return nil, fmt.Errorf("%w: crewotel.RegisterJetStream: the meter is nil", crew.ErrInvalid)
	}
	if len(consumers) == 0 && len(publishers) == 0 {
		return nil, fmt.Errorf("%w: crewotel.RegisterJetStream: no consumers or publishers to report", crew.ErrInvalid)
	}
	cons, errC := sources("consumer", ConsumerKey, consumers)
	pubs, errP := sources("publisher", PublisherKey, publishers)
	if err := errors.Join(errC, errP); err != nil {
		return nil, err
	}
	consInsts, errC := instruments(meter, consumerStats)
	pubInsts, errP := instruments(meter, publisherStats)
	if err := errors.Join(errC, errP); err != nil {
		return nil, err
	}
	var all []metric.Observable
	for _, i := range slices.Concat(consInsts, pubInsts) {
		all = append(all, i)
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		observe(o, cons, consumerStats, consInsts)
		observe(o, pubs, publisherStats, pubInsts)
		return nil
	}, all...)
}
