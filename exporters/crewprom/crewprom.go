// Package crewprom exports the statistics of crew pools to Prometheus.
//
//	p := crew.New(64, crew.WithName("mailer"), crew.WithLatency())
//	prometheus.MustRegister(crewprom.NewCollector([]*crew.Pool{p}))
//
// Every metric carries the label pool, the pool's name (crew.WithName);
// pools collected together need distinct names. The collector reads the
// pools when Prometheus scrapes, not when tasks run: a pool pays nothing
// for being exported.
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
//	crew_pool_task_wait_seconds        histogram  time from submission to start (WithLatency)
//	crew_pool_task_run_seconds         histogram  time from start to return (WithLatency)
//
// The histograms are made at scrape time from crew's own, which keep far
// finer buckets: an observation is counted in a Prometheus bucket by the
// value crew reports for it, within crew.HistogramRelativeError (3.125%)
// of the true one.
package crewprom

import (
	"fmt"
	"math"
	"time"

	"github.com/gocrew/crew"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuckets are the upper bounds, in seconds, of the latency
// histograms' buckets: 1, 2.5 and 5 times each power of ten from a
// microsecond to 10 seconds.
var DefaultBuckets = []float64{
	1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// An Option configures a Collector.
type Option func(*Collector)

// WithBuckets sets the upper bounds, in seconds and in increasing order,
// of the latency histograms' buckets (DefaultBuckets if not set). A bound
// of +Inf may end the list; Prometheus adds that bucket anyway. NewCollector
// panics with an error wrapping crew.ErrInvalid if a bound is NaN, negative
// or not above the one before it.
func WithBuckets(upper ...float64) Option {
	return func(c *Collector) { c.buckets = append([]float64(nil), upper...) }
}

// WithNamespace replaces the metric name prefix "crew".
func WithNamespace(ns string) Option {
	return func(c *Collector) { c.ns = ns }
}

// A Collector is a prometheus.Collector that reports crew pools.
type Collector struct {
	pools   []*crew.Pool
	buckets []float64
	ns      string

	stats     []statMetric // one per poolStats entry, in its order
	wait, run *prometheus.Desc
}

// A stat is a metric whose value is read from crew.Stats.
type stat struct {
	name, help string
	kind       prometheus.ValueType
	value      func(crew.Stats) float64
}

// poolStats are the metrics read from crew.Stats.
var poolStats = []stat{
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
}

// A statMetric is a stat with its descriptor in a Collector.
type statMetric struct {
	stat
	desc *prometheus.Desc
}

// NewCollector returns a Collector for pools. Register it with a
// prometheus.Registerer; it reads the pools at every scrape (a Stats call
// per pool and, for pools built WithLatency, two histogram snapshots: a
// few microseconds each).
func NewCollector(pools []*crew.Pool, opts ...Option) *Collector {
	c := &Collector{pools: pools, buckets: DefaultBuckets, ns: "crew"}
	for _, o := range opts {
		o(c)
	}
	if err := checkBuckets(c.buckets); err != nil {
		panic(err)
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.ns, "pool", name), help, []string{"pool"}, nil)
	}
	c.stats = make([]statMetric, len(poolStats))
	for i, st := range poolStats {
		c.stats[i] = statMetric{st, desc(st.name, st.help)}
	}
	c.wait = desc("task_wait_seconds", "Time from a task's submission to its start.")
	c.run = desc("task_run_seconds", "Time from a task's start to its return.")
	return c
}

// Describe sends the descriptors of every metric the Collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.stats {
		ch <- m.desc
	}
	ch <- c.wait
	ch <- c.run
}

// Collect reads every pool and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
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

// checkBuckets reports bounds that WithBuckets does not accept.
func checkBuckets(upper []float64) error {
	for i, b := range upper {
		if math.IsNaN(b) || b < 0 || i > 0 && b <= upper[i-1] {
			return fmt.Errorf("%w: crewprom.WithBuckets%v: bound %v: bounds must be increasing seconds, none negative", crew.ErrInvalid, upper, b)
		}
	}
	return nil
}

func (c *Collector) histogram(d *prometheus.Desc, h crew.HistogramSnapshot, pool string) prometheus.Metric {
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
