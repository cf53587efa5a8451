package crewprom

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// consumerStats are the metrics read from jetstream.Stats.
var consumerStats = []stat[jetstream.Stats]{
	{"fetched_total", "Messages received from the server.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Fetched) }},
	{"acked_total", "Messages handled successfully and acknowledged.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Acked) }},
	{"nacked_total", "Messages handed back for redelivery.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Nacked) }},
	{"terminated_total", "Messages given up on (Term).", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Terminated) }},
	{"dead_lettered_total", "Messages published to the dead-letter subject before Term.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.DeadLettered) }},
	{"snoozed_total", "Messages handed back or rescheduled because the handler returned Snooze.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Snoozed) }},
	{"panicked_total", "Panics recovered: of handlers, and of WithKeyed's and WithPriority's functions.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Panicked) }},
	{"heartbeats_total", "InProgress notices sent.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Heartbeats) }},
	{"abandoned_total", "Handlers abandoned, still running a job timeout after their context was cancelled.", prometheus.CounterValue, func(s jetstream.Stats) float64 { return float64(s.Abandoned) }},
	{"in_flight", "Messages held now: fetched and not settled.", prometheus.GaugeValue, func(s jetstream.Stats) float64 { return float64(s.InFlight) }},
}

// publisherStats are the metrics read from jetstream.PublisherStats.
var publisherStats = []stat[jetstream.PublisherStats]{
	{"stored_total", "Messages the stream stored.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Stored) }},
	{"duplicates_total", "Messages the stream dropped as duplicates of stored ones.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Duplicates) }},
	{"items_added_total", "Items accepted by Add.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Added) }},
	{"items_rejected_total", "Items refused because the pending bound was reached.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Rejected) }},
	{"items_dropped_total", "Items discarded by DropOldest.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Dropped) }},
	{"items_flushed_total", "Items in batches published successfully.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Flushed) }},
	{"items_failed_total", "Items in batches handed to the error handler.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Failed) }},
	{"batches_flushed_total", "Batches published successfully.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Batches) }},
	{"batches_failed_total", "Batches handed to the error handler after their last attempt failed.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.FailedBatches) }},
	{"flush_retries_total", "Flushes made again after a failure.", prometheus.CounterValue, func(s jetstream.PublisherStats) float64 { return float64(s.Batch.Retries) }},
}

// A JetStreamCollector is a [prometheus.Collector] that reports the
// consumers and publishers of the package github.com/gocrew/crew/jetstream.
// It must be made with [NewJetStreamCollector]; its methods are safe for
// concurrent use. It can be registered next to a [Collector] of the same
// namespace: their metrics differ. Like a second Collector, a second
// JetStreamCollector of the same namespace is refused with a
// [prometheus.AlreadyRegisteredError], even if it reports other consumers
// and publishers: give each registry one, or each its own namespace.
type JetStreamCollector struct {
	consumers  []named[jetstream.Stats]
	publishers []named[jetstream.PublisherStats]
	cstats     []statMetric[jetstream.Stats]
	pstats     []statMetric[jetstream.PublisherStats]
}

// named is a function that returns statistics S, with its label value.
type named[S any] struct {
	name  string
	stats func() S
}

// NewJetStreamCollector returns a [JetStreamCollector] of consumers and
// publishers, configured by opts ([WithNamespace]; [WithBuckets] has no
// effect). consumers maps a name, the value of the label consumer, to a
// function that returns the statistics of a consumer (the method value
// c.Stats of a [jetstream.Consumer] c, whatever its type parameter);
// publishers maps a name, the value of the label publisher, to a
// [jetstream.Publisher]'s p.Stats. Either may be nil. Register the
// Collector with a [prometheus.Registerer]; each scrape calls each
// function once. NewJetStreamCollector keeps its own copy of the maps.
//
// Metrics, for each consumer:
//
//	crew_jetstream_consumer_fetched_total        counter  messages received from the server
//	crew_jetstream_consumer_acked_total          counter  messages handled and acknowledged
//	crew_jetstream_consumer_nacked_total         counter  messages handed back for redelivery
//	crew_jetstream_consumer_terminated_total     counter  messages given up on (Term)
//	crew_jetstream_consumer_dead_lettered_total  counter  messages published to the dead-letter subject
//	crew_jetstream_consumer_snoozed_total        counter  messages snoozed by the handler
//	crew_jetstream_consumer_panicked_total       counter  panics recovered
//	crew_jetstream_consumer_heartbeats_total     counter  InProgress notices sent
//	crew_jetstream_consumer_abandoned_total      counter  handlers still running a job timeout after their context was cancelled
//	crew_jetstream_consumer_in_flight            gauge    messages fetched and not settled
//
// and for each publisher:
//
//	crew_jetstream_publisher_stored_total           counter  messages the stream stored
//	crew_jetstream_publisher_duplicates_total       counter  messages the stream dropped as duplicates
//	crew_jetstream_publisher_items_added_total      counter  items accepted by Add
//	crew_jetstream_publisher_items_rejected_total   counter  items refused: the pending bound was reached
//	crew_jetstream_publisher_items_dropped_total    counter  items discarded by DropOldest
//	crew_jetstream_publisher_items_flushed_total    counter  items in batches published
//	crew_jetstream_publisher_items_failed_total     counter  items in batches given up on
//	crew_jetstream_publisher_batches_flushed_total  counter  batches published
//	crew_jetstream_publisher_batches_failed_total   counter  batches given up on
//	crew_jetstream_publisher_flush_retries_total    counter  flushes made again after a failure
//
// NewJetStreamCollector panics, with an error wrapping [crew.ErrInvalid]
// that names the mistake, for no consumers and no publishers, a nil
// function, a name that is not valid UTF-8, a nil option, or an invalid
// WithNamespace or WithBuckets.
func NewJetStreamCollector(consumers map[string]func() jetstream.Stats, publishers map[string]func() jetstream.PublisherStats, opts ...Option) *JetStreamCollector {
	c := &Collector{buckets: DefaultBuckets, ns: "crew"}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Errorf("%w: crewprom.NewJetStreamCollector: option %d is nil", crew.ErrInvalid, i))
		}
		o(c)
	}
	var empty error
	if len(consumers) == 0 && len(publishers) == 0 {
		empty = fmt.Errorf("%w: crewprom.NewJetStreamCollector: no consumers or publishers to collect", crew.ErrInvalid)
	}
	cons, errC := namedSources("consumer", consumers)
	pubs, errP := namedSources("publisher", publishers)
	if err := errors.Join(checkNamespace(c.ns), checkBuckets(c.buckets), empty, errC, errP); err != nil {
		panic(err)
	}
	return &JetStreamCollector{
		consumers: cons, publishers: pubs,
		cstats: describe(c.ns, "consumer", consumerStats),
		pstats: describe(c.ns, "publisher", publisherStats),
	}
}

// namedSources checks m and returns its entries in the order of their
// names.
func namedSources[S any](what string, m map[string]func() S) ([]named[S], error) {
	out := make([]named[S], 0, len(m))
	for name, f := range m {
		if f == nil {
			return nil, fmt.Errorf("%w: crewprom.NewJetStreamCollector: the Stats func of %s %q is nil", crew.ErrInvalid, what, name)
		}
		if !utf8.ValidString(name) {
			return nil, fmt.Errorf("%w: crewprom.NewJetStreamCollector: %s name %q is not valid UTF-8 and cannot be a label value", crew.ErrInvalid, what, name)
		}
		out = append(out, named[S]{name, f})
	}
	slices.SortFunc(out, func(a, b named[S]) int { return cmp.Compare(a.name, b.name) })
	return out, nil
}

// describe returns the metrics of stats, named ns_jetstream_label_..., with
// the label label.
func describe[S any](ns, label string, stats []stat[S]) []statMetric[S] {
	out := make([]statMetric[S], len(stats))
	for i, st := range stats {
		out[i] = statMetric[S]{st, prometheus.NewDesc(prometheus.BuildFQName(ns, "jetstream", label+"_"+st.name), st.help, []string{label}, nil)}
	}
	return out
}

// made reports whether c was made by NewJetStreamCollector.
func (c *JetStreamCollector) made() bool { return c != nil && c.cstats != nil }

// Describe sends the descriptors of every metric the Collector reports,
// as [prometheus.Collector] requires. On a nil or zero JetStreamCollector
// (not made by [NewJetStreamCollector]) it sends instead one invalid
// descriptor, with an error wrapping [crew.ErrInvalid] that
// [prometheus.Registerer.Register] returns. Describe panics with such an
// error if ch is nil, where a send would block forever.
func (c *JetStreamCollector) Describe(ch chan<- *prometheus.Desc) {
	if ch == nil {
		panic(fmt.Errorf("%w: crewprom: JetStreamCollector.Describe on a nil channel", crew.ErrInvalid))
	}
	if !c.made() {
		ch <- prometheus.NewInvalidDesc(errJSNotMade)
		return
	}
	for _, m := range c.cstats {
		ch <- m.desc
	}
	for _, m := range c.pstats {
		ch <- m.desc
	}
}

// Collect calls every consumer's and publisher's function and sends their
// metrics, as [prometheus.Collector] requires. On a nil or zero
// JetStreamCollector (not made by [NewJetStreamCollector]) it sends
// instead one invalid metric, whose error, wrapping [crew.ErrInvalid],
// [prometheus.Gatherer.Gather] reports. Collect panics with such an error
// if ch is nil, where a send would block forever.
func (c *JetStreamCollector) Collect(ch chan<- prometheus.Metric) {
	if ch == nil {
		panic(fmt.Errorf("%w: crewprom: JetStreamCollector.Collect on a nil channel", crew.ErrInvalid))
	}
	if !c.made() {
		ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(errJSNotMade), errJSNotMade)
		return
	}
	send(ch, c.consumers, c.cstats)
	send(ch, c.publishers, c.pstats)
}

// errJSNotMade is reported by the methods of a JetStreamCollector not
// made by NewJetStreamCollector.
var errJSNotMade = fmt.Errorf("%w: crewprom: a nil or zero JetStreamCollector: make it with NewJetStreamCollector", crew.ErrInvalid)

// send sends the metrics of every source.
func send[S any](ch chan<- prometheus.Metric, srcs []named[S], stats []statMetric[S]) {
	for _, src := range srcs {
		s := src.stats()
		for _, m := range stats {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s), src.name)
		}
	}
}
