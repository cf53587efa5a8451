// Package crewotel exports the statistics of crew pools as OpenTelemetry
// metrics. All its instruments are asynchronous: the meter's reader calls
// back when it collects, and the pools pay nothing for being exported
// between collections.
//
// [Register] creates the instruments on a [metric.Meter] and reports the
// given [crew.Pool] values at each collection until the returned
// [metric.Registration] is unregistered:
//
//	p := crew.New(64, crew.WithName("mailer"), crew.WithLatency())
//	reg, err := crewotel.Register(otel.Meter("myapp"), p)
//	...
//	defer reg.Unregister()
//
// Every data point carries the attribute crew.pool ([PoolKey]), the pool's
// name ([crew.WithName]); pools registered together need distinct names,
// which Register checks. The latency quantiles carry the attribute
// quantile ([QuantileKey]) as well, one data point for each of
// [Quantiles].
//
// Instruments, for each pool:
//
//	crew.pool.workers          UpDownCounter {worker}  live worker goroutines
//	crew.pool.workers.idle     UpDownCounter {worker}  workers parked until a task wakes them
//	crew.pool.workers.max      UpDownCounter {worker}  the worker limit
//	crew.pool.tasks.running    UpDownCounter {task}    tasks running now
//	crew.pool.tasks.queued     UpDownCounter {task}    tasks waiting for a worker
//	crew.pool.tasks.submitted  Counter {task}          tasks accepted
//	crew.pool.tasks.completed  Counter {task}          tasks finished, whatever their outcome
//	crew.pool.tasks.failed     Counter {task}          Submit tasks that failed, panicked or called Goexit
//	crew.pool.tasks.panicked   Counter {task}          tasks that panicked
//	crew.pool.tasks.dropped    Counter {task}          queued tasks that Shutdown removed
//	crew.pool.tasks.cancelled  Counter {task}          Submit tasks that Task.Cancel kept from starting
//
// and for pools built [crew.WithLatency]:
//
//	crew.pool.task.wait.duration  Gauge s    queue wait quantiles: attribute quantile = 0.5, 0.9, 0.99, 1 (the maximum)
//	crew.pool.task.run.duration   Gauge s    run time quantiles, likewise
//	crew.pool.task.wait.time      Counter s  total queue wait of the tasks that started
//	crew.pool.task.run.time       Counter s  total run time of the tasks that finished
//
// OpenTelemetry has no asynchronous histogram, so the latency is exported
// as the quantiles crew computes (each within
// [crew.HistogramRelativeError], 3.125%, of the exact value; the maximum
// exactly), over the pool's whole
// life, plus totals from which a backend can derive the mean over any
// interval.
//
// # JetStream
//
// [RegisterJetStream] reports the statistics of the consumers and
// publishers of the package github.com/gocrew/crew/jetstream, each under
// the name it is given ([ConsumerKey], [PublisherKey]). [InjectTrace] and
// [ExtractTrace] carry the W3C trace context of a [jetstream.Queue]'s
// Enqueue call, or a [jetstream.Publisher]'s Add, to the context of the
// [jetstream.Consumer]'s handler, in the message's headers (traceparent,
// tracestate):
//
//	q := crewjs.NewQueue[Email](js, "jobs.email", crewjs.WithHeaderInjector(crewotel.InjectTrace))
//	c := crewjs.NewConsumer(cons, pool, handle, crewjs.WithContextExtractor(crewotel.ExtractTrace))
package crewotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/gocrew/crew"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// PoolKey is the attribute that names the pool of a data point: the
// pool's [crew.Pool.Name].
const PoolKey = attribute.Key("crew.pool")

// QuantileKey is the attribute that names the quantile of a latency data
// point: one of [Quantiles], by default 0.5, 0.9, 0.99, and 1 for the
// maximum.
const QuantileKey = attribute.Key("quantile")

// Quantiles are the quantiles exported for each latency histogram, each
// under its [QuantileKey]. Each [Register] reads them once: changing them
// later does not change what a registration reports. Register returns an
// error wrapping [crew.ErrInvalid] if one is NaN or outside 0 to 1, or
// appears twice; empty, only the latency totals are exported.
var Quantiles = []float64{0.5, 0.9, 0.99, 1}

// A stat is an instrument whose value is read from statistics S:
// crew.Stats, jetstream.Stats or jetstream.PublisherStats.
type stat[S any] struct {
	name, unit, desc string
	monotonic        bool // a Counter; an UpDownCounter if not set
	value            func(S) int64
}

// poolStats are the instruments read from crew.Stats.
var poolStats = []stat[crew.Stats]{
	{"crew.pool.workers", "{worker}", "Live worker goroutines.", false, func(s crew.Stats) int64 { return int64(s.Workers) }},
	{"crew.pool.workers.idle", "{worker}", "Workers parked until a task wakes them.", false, func(s crew.Stats) int64 { return int64(s.Idle) }},
	{"crew.pool.workers.max", "{worker}", "The pool's worker limit.", false, func(s crew.Stats) int64 { return int64(s.MaxWorkers) }},
	{"crew.pool.tasks.running", "{task}", "Tasks running now.", false, func(s crew.Stats) int64 { return int64(s.Running) }},
	{"crew.pool.tasks.queued", "{task}", "Tasks waiting for a worker.", false, func(s crew.Stats) int64 { return int64(s.Queued) }},
	{"crew.pool.tasks.submitted", "{task}", "Tasks accepted.", true, func(s crew.Stats) int64 { return int64(s.Submitted) }},
	{"crew.pool.tasks.completed", "{task}", "Tasks that finished, whatever their outcome.", true, func(s crew.Stats) int64 { return int64(s.Completed) }},
	{"crew.pool.tasks.failed", "{task}", "Submit tasks that returned an error, panicked or called runtime.Goexit.", true, func(s crew.Stats) int64 { return int64(s.Failed) }},
	{"crew.pool.tasks.panicked", "{task}", "Tasks that panicked.", true, func(s crew.Stats) int64 { return int64(s.Panicked) }},
	{"crew.pool.tasks.dropped", "{task}", "Queued tasks that Shutdown removed without running them.", true, func(s crew.Stats) int64 { return int64(s.Dropped) }},
	{"crew.pool.tasks.cancelled", "{task}", "Submitted tasks cancelled before they started.", true, func(s crew.Stats) int64 { return int64(s.Cancelled) }},
}

// instrument creates the instrument of st on meter.
func (st stat[S]) instrument(meter metric.Meter) (metric.Int64Observable, error) {
	unit, desc := metric.WithUnit(st.unit), metric.WithDescription(st.desc)
	if st.monotonic {
		return meter.Int64ObservableCounter(st.name, unit, desc)
	}
	return meter.Int64ObservableUpDownCounter(st.name, unit, desc)
}

type pool struct {
	p     *crew.Pool
	attrs metric.MeasurementOption   // crew.pool
	quant []metric.MeasurementOption // crew.pool and quantile, per Quantiles
}

// Register creates crewotel's instruments on meter, a [metric.Meter], and
// a callback that reports pools at each collection, and returns the
// callback's [metric.Registration]: Unregister it to stop reporting. Each
// collection costs a [crew.Pool.Stats] call per pool and, for pools built
// [crew.WithLatency], two histogram snapshots. A pool stopped before or
// after Register is still reported, with its counts as [crew.Pool.Stop]
// left them.
//
// Register returns an error wrapping [crew.ErrInvalid], and creates
// nothing, when its arguments cannot be exported correctly: a nil meter;
// no pools; a nil pool or a zero crew.Pool, not made by [crew.New]; the
// same pool twice; two pools with the same name, whose data points would
// carry the same attributes and be added together (at most one pool may be
// unnamed); a name that is not valid UTF-8, which OTLP cannot encode;
// or an invalid [Quantiles]. It returns the meter's error if the
// meter cannot create an instrument or register the callback.
//
// The data points of two registrations on one meter are added together
// where their attributes agree: register each pool once per meter, and
// pools of one name on different meters only.
func Register(meter metric.Meter, pools ...*crew.Pool) (metric.Registration, error) {
	quantiles := append([]float64(nil), Quantiles...)
	if err := errors.Join(checkArgs(meter, pools), checkQuantiles(quantiles)); err != nil {
		return nil, err
	}
	var errs []error
	stats := make([]metric.Int64Observable, len(poolStats))
	for i, st := range poolStats {
		var err error
		stats[i], err = st.instrument(meter)
		errs = append(errs, err)
	}
	gauge := func(name, desc string) metric.Float64ObservableGauge {
		i, err := meter.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	total := func(name, desc string) metric.Float64ObservableCounter {
		i, err := meter.Float64ObservableCounter(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return i
	}
	wait := gauge("crew.pool.task.wait.duration", "Quantiles of the time from a task's submission to its start.")
	run := gauge("crew.pool.task.run.duration", "Quantiles of the time from a task's start to its return.")
	waitTotal := total("crew.pool.task.wait.time", "Total time tasks waited from submission to start.")
	runTotal := total("crew.pool.task.run.time", "Total time tasks ran.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	ps := make([]pool, len(pools))
	for i, p := range pools {
		name := PoolKey.String(p.Name())
		ps[i] = pool{p: p, attrs: metric.WithAttributeSet(attribute.NewSet(name))}
		for _, q := range quantiles {
			ps[i].quant = append(ps[i].quant, metric.WithAttributeSet(attribute.NewSet(name, QuantileKey.Float64(q))))
		}
	}
	instruments := []metric.Observable{wait, run, waitTotal, runTotal}
	for _, inst := range stats {
		instruments = append(instruments, inst)
	}
	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, p := range ps {
			s := p.p.Stats()
			for i, st := range poolStats {
				o.ObserveInt64(stats[i], st.value(s), p.attrs)
			}
			l, ok := p.p.Latency()
			if !ok {
				continue
			}
			for i, q := range quantiles {
				o.ObserveFloat64(wait, l.Wait.Quantile(q).Seconds(), p.quant[i])
				o.ObserveFloat64(run, l.Run.Quantile(q).Seconds(), p.quant[i])
			}
			o.ObserveFloat64(waitTotal, l.Wait.Sum.Seconds(), p.attrs)
			o.ObserveFloat64(runTotal, l.Run.Sum.Seconds(), p.attrs)
		}
		return nil
	}, instruments...)
}

// checkArgs reports a meter or pools that Register does not accept.
func checkArgs(meter metric.Meter, pools []*crew.Pool) error {
	if meter == nil {
		return fmt.Errorf("%w: crewotel.Register: the meter is nil", crew.ErrInvalid)
	}
	if len(pools) == 0 {
		return fmt.Errorf("%w: crewotel.Register: no pools to report", crew.ErrInvalid)
	}
	index := make(map[*crew.Pool]int, len(pools))
	named := make(map[string]int, len(pools))
	for i, p := range pools {
		if p.Stats().MaxWorkers == 0 {
			return fmt.Errorf("%w: crewotel.Register: pool %d is nil or a zero crew.Pool, not made by crew.New", crew.ErrInvalid, i)
		}
		if j, dup := index[p]; dup {
			return fmt.Errorf("%w: crewotel.Register: pool %d is pool %d again", crew.ErrInvalid, i, j)
		}
		index[p] = i
		name := p.Name()
		if !utf8.ValidString(name) {
			return fmt.Errorf("%w: crewotel.Register: pool %d is named %q, which is not valid UTF-8", crew.ErrInvalid, i, name)
		}
		if j, dup := named[name]; dup {
			return fmt.Errorf("%w: crewotel.Register: pools %d and %d are both named %q: their data points would be added together", crew.ErrInvalid, j, i, name)
		}
		named[name] = i
	}
	return nil
}

// checkQuantiles reports quantiles that Register does not accept.
func checkQuantiles(qs []float64) error {
	seen := make(map[float64]bool, len(qs))
	for _, q := range qs {
		if math.IsNaN(q) || q < 0 || q > 1 || seen[q] {
			return fmt.Errorf("%w: crewotel.Quantiles %v: quantile %v: each must be in [0, 1], once", crew.ErrInvalid, qs, q)
		}
		seen[q] = true
	}
	return nil
}
