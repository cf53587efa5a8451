// Package crewprom exports the statistics of crew pools to Prometheus. Its
// [Collector], a [prometheus.Collector], reads the pools when Prometheus
// scrapes, not when tasks run: a pool pays nothing for being exported.
//
// Make a Collector for the program's [crew.Pool] values with
// [NewCollector] and register it with a [prometheus.Registerer]:
//
//	p := crew.New(64, crew.WithName("mailer"), crew.WithLatency())
//	prometheus.MustRegister(crewprom.NewCollector([]*crew.Pool{p}))
//
// Every metric carries the label pool, the pool's name ([crew.WithName]);
// pools collected together need distinct names, which NewCollector checks.
// [WithNamespace] replaces the prefix crew of the metric names, and
// [WithBuckets] the bounds of the latency histograms' buckets
// ([DefaultBuckets]).
//
// Metrics, for each pool:
//
//	crew_pool_max_workers              gauge    the worker limit
//	crew_pool_workers                  gauge    live worker goroutines
//	crew_pool_idle_workers             gauge    workers parked until a task wakes them
//	crew_pool_running_tasks            gauge    tasks running now
//	crew_pool_queued_tasks             gauge    tasks waiting for a worker
//	crew_pool_tasks_submitted_total    counter  tasks accepted
//	crew_pool_tasks_completed_total    counter  tasks finished, whatever their outcome
//	crew_pool_tasks_failed_total       counter  Submit tasks that failed, panicked or called Goexit
//	crew_pool_tasks_panicked_total     counter  tasks that panicked
//	crew_pool_tasks_dropped_total      counter  queued tasks that Shutdown removed
//	crew_pool_tasks_cancelled_total    counter  Submit tasks that Task.Cancel kept from starting
//	crew_pool_task_wait_seconds        histogram  time from submission to start (WithLatency)
//	crew_pool_task_run_seconds         histogram  time from start to return (WithLatency)
//
// The histograms, for pools built [crew.WithLatency], are made at scrape
// time from crew's own, which keep far finer buckets: an observation is
// counted in a Prometheus bucket by the value of its crew bucket, within
// [crew.HistogramRelativeError] (3.125%) of the true one, and so in the
// same Prometheus buckets at every scrape: their counts never go down.
//
// A [JetStreamCollector], made with [NewJetStreamCollector], reports the
// consumers and publishers of the package github.com/gocrew/crew/jetstream
// (crew_jetstream_consumer_acked_total and so on), labelled consumer or
// publisher by the names it is given.
package crewprom

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/gocrew/crew"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuckets are the upper bounds, in seconds, of the latency
// histograms' buckets: 1, 2.5 and 5 times each power of ten from a
// microsecond to 10 seconds. [WithBuckets] replaces them for one
// Collector. [NewCollector] copies them: changing them later does not
// change a Collector already made.
var DefaultBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// An Option configures a [Collector]: [WithBuckets] and [WithNamespace].
// Options never panic when called: [NewCollector] panics, with an error
// wrapping [crew.ErrInvalid], when given a nil or invalid one. A later
// option replaces what an earlier one of the same kind set.
type Option func(*Collector)

// WithBuckets sets the upper bounds, in seconds and in increasing order,
// of the latency histograms' buckets ([DefaultBuckets] if not set). A bound
// of +Inf may end the list; Prometheus adds that bucket anyway, so
// WithBuckets([math.Inf](1)) exports only each histogram's count and sum.
// [NewCollector] panics with an error wrapping [crew.ErrInvalid] if no bound
// is given, or if a bound is NaN, negative or not above the one before it.
// WithBuckets copies upper.
func WithBuckets(upper ...float64) Option {
	return func(c *Collector) { c.buckets = append([]float64{}, upper...) }
}

// WithNamespace replaces the metric name prefix "crew": the metrics are
// named ns_pool_workers and so on. [NewCollector] panics with an error
// wrapping [crew.ErrInvalid] unless ns follows Prometheus' metric name rules
// for exporters: ASCII letters, digits and underscores, not starting with
// a digit, and not empty (Prometheus reserves colons for recording rules).
func WithNamespace(ns string) Option {
	return func(c *Collector) { c.ns = ns }
}

// A Collector is a [prometheus.Collector] that reports crew pools. It must
// be made with [NewCollector]; its methods are safe for concurrent use.
//
// A registry refuses a second Collector with the same namespace (its
// metrics are described already), even one of other pools: Register
// returns a [prometheus.AlreadyRegisteredError] whose ExistingCollector is
// the first Collector, which does not report the second's pools, so code
// that takes that error as "registered already" loses them. Collect every
// pool of a registry in one Collector, or give each Collector its own
// namespace.
type Collector struct {
	pools   []*crew.Pool
	buckets []float64
	ns      string

	stats     []statMetric[crew.Stats] // one per poolStats entry, in its order
	wait, run *prometheus.Desc
}

// A stat is a metric whose value is read from statistics S: crew.Stats,
// jetstream.Stats or jetstream.PublisherStats.
type stat[S any] struct {
	name, help string
	kind       prometheus.ValueType
	value      func(S) float64
}

// poolStats are the metrics read from crew.Stats.
var poolStats = []stat[crew.Stats]{
	{"max_workers", "The pool's worker limit.", prometheus.GaugeValue, func(s crew.Stats) float64 { return float64(s.MaxWorkers) }},
	{"workers", "Live worker goroutines.", prometheus.GaugeValue, func(s crew.Stats) float64 { return float64(s.Workers) }},
	{"idle_workers", "Workers parked until a task wakes them.", prometheus.GaugeValue, func(s crew.Stats) float64 { return float64(s.Idle) }},
	{"running_tasks", "Tasks running now.", prometheus.GaugeValue, func(s crew.Stats) float64 { return float64(s.Running) }},
	{"queued_tasks", "Tasks waiting for a worker.", prometheus.GaugeValue, func(s crew.Stats) float64 { return float64(s.Queued) }},
	{"tasks_submitted_total", "Tasks accepted.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Submitted) }},
	{"tasks_completed_total", "Tasks that finished, whatever their outcome.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Completed) }},
	{"tasks_failed_total", "Submit tasks that returned an error, panicked or called runtime.Goexit.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Failed) }},
	{"tasks_panicked_total", "Tasks that panicked.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Panicked) }},
	{"tasks_dropped_total", "Queued tasks that Shutdown removed without running them.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Dropped) }},
	{"tasks_cancelled_total", "Submitted tasks cancelled before they started.", prometheus.CounterValue, func(s crew.Stats) float64 { return float64(s.Cancelled) }},
}

// A statMetric is a stat with its descriptor in a Collector.
type statMetric[S any] struct {
	stat[S]
	desc *prometheus.Desc
}

// NewCollector returns a [Collector] for pools, configured by opts
// ([WithBuckets], [WithNamespace]). Register it with a
// [prometheus.Registerer]; it reads the pools at every scrape (a
// [crew.Pool.Stats] call per pool and, for pools built [crew.WithLatency],
// two histogram snapshots). A pool stopped before or after NewCollector is
// still reported, with its counts as [crew.Pool.Stop] left them.
// NewCollector keeps its own copy of the slice pools.
//
// Like make given a negative size, NewCollector panics, with an error
// wrapping [crew.ErrInvalid] that names the mistake, when its arguments
// cannot be exported correctly: no pools (a nil or empty slice); a nil
// pool or a zero crew.Pool, not made by [crew.New]; the same pool twice;
// two pools with the same name, which would report under the same label
// (at most one pool may be unnamed); a name that is not valid UTF-8; a
// nil option; or an invalid WithBuckets or WithNamespace.
func NewCollector(pools []*crew.Pool, opts ...Option) *Collector {
	c := &Collector{pools: append([]*crew.Pool(nil), pools...), buckets: append([]float64{}, DefaultBuckets...), ns: "crew"}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Errorf("%w: crewprom.NewCollector: option %d is nil", crew.ErrInvalid, i))
		}
		o(c)
	}
	if err := errors.Join(checkNamespace(c.ns), checkBuckets(c.buckets), checkPools(c.pools)); err != nil {
		panic(err)
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.ns, "pool", name), help, []string{"pool"}, nil)
	}
	c.stats = make([]statMetric[crew.Stats], len(poolStats))
	for i, st := range poolStats {
		c.stats[i] = statMetric[crew.Stats]{st, desc(st.name, st.help)}
	}
	c.wait = desc("task_wait_seconds", "Time from a task's submission to its start.")
	c.run = desc("task_run_seconds", "Time from a task's start to its return.")
	return c
}

// errNotMade is reported by the methods of a Collector not made by
// NewCollector.
var errNotMade = fmt.Errorf("%w: crewprom: a nil or zero Collector: make it with NewCollector", crew.ErrInvalid)

// made reports whether c was made by NewCollector.
func (c *Collector) made() bool { return c != nil && c.run != nil }

// Describe sends the descriptors of every metric the Collector reports,
// as [prometheus.Collector] requires. On a nil or zero Collector (not made
// by [NewCollector]) it sends instead one invalid descriptor, with an error
// wrapping [crew.ErrInvalid] that [prometheus.Registerer.Register]
// returns. Describe panics with such an error if ch is nil, where a send
// would block forever.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	if ch == nil {
		panic(fmt.Errorf("%w: crewprom: Collector.Describe on a nil channel", crew.ErrInvalid))
	}
	if !c.made() {
		ch <- prometheus.NewInvalidDesc(errNotMade)
		return
	}
	for _, m := range c.stats {
		ch <- m.desc
	}
	ch <- c.wait
	ch <- c.run
}

// Collect reads every pool and sends its metrics, as
// [prometheus.Collector] requires. On a nil or zero Collector (not made by
// [NewCollector]) it sends instead one invalid metric, whose error,
// wrapping [crew.ErrInvalid], [prometheus.Gatherer.Gather] reports.
// Collect panics with such an error if ch is nil, where a send would
// block forever.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if ch == nil {
		panic(fmt.Errorf("%w: crewprom: Collector.Collect on a nil channel", crew.ErrInvalid))
	}
	if !c.made() {
		ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(errNotMade), errNotMade)
		return
	}
	for _, p := range c.pools {
		name := p.Name()
		s := p.Stats()
		for _, m := range c.stats {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s), name)
		}
		if l, ok := p.Latency(); ok {
			ch <- c.histogram(c.wait, l.Wait, name)
			ch <- c.histogram(c.run, l.Run, name)
		}
	}
}

// checkNamespace reports a namespace that WithNamespace does not accept.
func checkNamespace(ns string) error {
	for i, r := range ns {
		if r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9' {
			continue
		}
		return fmt.Errorf("%w: crewprom.WithNamespace(%q): a namespace is ASCII letters, digits and underscores, not starting with a digit", crew.ErrInvalid, ns)
	}
	if ns == "" {
		return fmt.Errorf("%w: crewprom.WithNamespace(\"\"): the namespace is empty", crew.ErrInvalid)
	}
	return nil
}

// checkPools reports pools that NewCollector does not accept.
func checkPools(pools []*crew.Pool) error {
	if len(pools) == 0 {
		return fmt.Errorf("%w: crewprom.NewCollector: no pools to collect", crew.ErrInvalid)
	}
	index := make(map[*crew.Pool]int, len(pools))
	named := make(map[string]int, len(pools))
	for i, p := range pools {
		if p.Stats().MaxWorkers == 0 {
			return fmt.Errorf("%w: crewprom.NewCollector: pool %d is nil or a zero crew.Pool, not made by crew.New", crew.ErrInvalid, i)
		}
		if j, dup := index[p]; dup {
			return fmt.Errorf("%w: crewprom.NewCollector: pool %d is pool %d again", crew.ErrInvalid, i, j)
		}
		index[p] = i
		name := p.Name()
		if !utf8.ValidString(name) {
			return fmt.Errorf("%w: crewprom.NewCollector: pool %d is named %q, which is not valid UTF-8 and cannot be a label value", crew.ErrInvalid, i, name)
		}
		if j, dup := named[name]; dup {
			return fmt.Errorf("%w: crewprom.NewCollector: pools %d and %d are both named %q: their metrics would have the same labels", crew.ErrInvalid, j, i, name)
		}
		named[name] = i
	}
	return nil
}

// checkBuckets reports bounds that WithBuckets does not accept.
func checkBuckets(upper []float64) error {
	if len(upper) == 0 {
		return fmt.Errorf("%w: crewprom.WithBuckets(): no bounds (WithBuckets(math.Inf(1)) exports only the count and sum)", crew.ErrInvalid)
	}
	for i, b := range upper {
		if math.IsNaN(b) || b < 0 || i > 0 && b <= upper[i-1] {
			return fmt.Errorf("%w: crewprom.WithBuckets%v: bound %v: bounds must be increasing seconds, none negative", crew.ErrInvalid, upper, b)
		}
	}
	return nil
}

func (c *Collector) histogram(d *prometheus.Desc, h crew.HistogramSnapshot, pool string) prometheus.Metric {
	// Make CountAtOrBelow read each observation by the value of its crew
	// bucket alone, which never changes. Otherwise it counts every
	// observation in a bound at or above the maximum, which a later,
	// longer task raises: the bucket would lose observations it had
	// counted, and a bucket's count must never go down.
	h.Max = math.MaxInt64
	buckets := make(map[float64]uint64, len(c.buckets))
	for _, upper := range c.buckets {
		if math.IsInf(upper, 1) {
			continue // the +Inf bucket holds every observation: Prometheus adds it
		}
		limit := time.Duration(math.MaxInt64) // a bound beyond it would overflow
		if upper < limit.Seconds() {
			limit = time.Duration(upper * float64(time.Second))
		}
		buckets[upper] = h.CountAtOrBelow(limit)
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, pool)
}
