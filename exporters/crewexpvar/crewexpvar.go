// Package crewexpvar publishes the statistics of crew pools with the
// standard library's [expvar] package, and so as JSON at /debug/vars. It
// lives outside package crew because importing expvar registers the
// /debug/vars handler on [net/http.DefaultServeMux]: only programs that
// import crewexpvar get it. Like crew, it imports only the standard
// library.
//
// [Publish] publishes a [crew.Pool] under a name, for the rest of the
// program:
//
//	p := crew.New(64, crew.WithName("mailer"), crew.WithLatency())
//	crewexpvar.Publish("crew.mailer", p)
//
// [Func] returns the same variable without publishing it, to put in an
// [expvar.Map] or publish under a name of one's own, and [Read] returns a
// pool's [Snapshot] directly. A Snapshot holds the pool's [crew.Stats]
// and, for a pool built [crew.WithLatency], the [Quantiles] of its queue
// wait and run time.
package crewexpvar

import (
	"expvar"
	"fmt"
	"time"

	"github.com/gocrew/crew"
)

// Snapshot is what a published pool reports, as JSON: [Read] returns it,
// and the variable of [Func] and [Publish] encodes it. The counts are those
// of [crew.Stats]. Durations are in nanoseconds. Wait and Run are present
// only for a pool built [crew.WithLatency].
type Snapshot struct {
	Name       string     `json:"name,omitempty"`
	MaxWorkers int        `json:"max_workers"`
	Workers    int        `json:"workers"`
	Idle       int        `json:"idle"`
	Running    int        `json:"running"`
	Queued     int        `json:"queued"`
	Submitted  uint64     `json:"submitted"`
	Completed  uint64     `json:"completed"`
	Failed     uint64     `json:"failed"`
	Panicked   uint64     `json:"panicked"`
	Dropped    uint64     `json:"dropped"`
	Cancelled  uint64     `json:"cancelled"`
	Wait       *Quantiles `json:"wait,omitempty"`
	Run        *Quantiles `json:"run,omitempty"`
}

// Quantiles summarises a [crew.HistogramSnapshot], the queue wait or run
// time of a [Snapshot]. Each quantile is within
// [crew.HistogramRelativeError] of the exact one; Max is exact.
type Quantiles struct {
	Count  uint64        `json:"count"`
	SumNs  time.Duration `json:"sum_ns"`
	MeanNs time.Duration `json:"mean_ns"`
	P50Ns  time.Duration `json:"p50_ns"`
	P90Ns  time.Duration `json:"p90_ns"`
	P99Ns  time.Duration `json:"p99_ns"`
	MaxNs  time.Duration `json:"max_ns"`
}

func quantiles(s crew.HistogramSnapshot) *Quantiles {
	return &Quantiles{
		Count:  s.Count,
		SumNs:  s.Sum,
		MeanNs: s.Mean(),
		P50Ns:  s.Quantile(0.5),
		P90Ns:  s.Quantile(0.9),
		P99Ns:  s.Quantile(0.99),
		MaxNs:  s.Max,
	}
}

// Read returns p's statistics now as a [Snapshot]: [crew.Pool.Stats], and
// [crew.Pool.Latency] when p records latency. It costs a Stats call and,
// for a pool built [crew.WithLatency], two histogram snapshots. A stopped
// pool reports its counts as [crew.Pool.Stop] left them. Like Pool.Stats,
// Read reports zeros for a nil or zero [crew.Pool], not made by
// [crew.New]: the zero Snapshot, whose MaxWorkers of 0 no pool made by
// crew.New has.
func Read(p *crew.Pool) Snapshot {
	st := p.Stats()
	s := Snapshot{
		Name:       p.Name(),
		MaxWorkers: st.MaxWorkers,
		Workers:    st.Workers,
		Idle:       st.Idle,
		Running:    st.Running,
		Queued:     st.Queued,
		Submitted:  st.Submitted,
		Completed:  st.Completed,
		Failed:     st.Failed,
		Panicked:   st.Panicked,
		Dropped:    st.Dropped,
		Cancelled:  st.Cancelled,
	}
	if l, ok := p.Latency(); ok {
		s.Wait, s.Run = quantiles(l.Wait), quantiles(l.Run)
	}
	return s
}

// Func returns an [expvar.Var] that reports [Read](p) each time it is
// read, for use in an [expvar.Map] or with [expvar.Publish] under a name of
// your choice. Nothing is computed until the variable is read. A stopped
// pool may be exported: it reports its counts as Stop left them.
//
// Like make given a negative size, Func panics with an error wrapping
// [crew.ErrInvalid] if p is nil or a zero [crew.Pool], not made by
// [crew.New], which would report zeros forever.
func Func(p *crew.Pool) expvar.Func {
	if err := checkPool("Func", p); err != nil {
		panic(err)
	}
	return func() any { return Read(p) }
}

// Publish publishes [Func](p) under name, with [expvar.Publish]. A
// published variable cannot be removed, so publish long-lived pools only; a
// stopped pool may be published and reports its counts as Stop left them.
//
// Publish panics, publishing nothing, with an error wrapping
// [crew.ErrInvalid] if p is nil or a zero [crew.Pool] (as Func does), if
// name is empty, or if name is taken, as expvar.Publish panics on a name
// published already (crewexpvar's own, another pool's or any other
// variable's, such as "memstats").
func Publish(name string, p *crew.Pool) {
	if err := checkPool("Publish", p); err != nil {
		panic(err)
	}
	if name == "" {
		panic(fmt.Errorf("%w: crewexpvar.Publish: the name is empty", crew.ErrInvalid))
	}
	taken := fmt.Errorf("%w: crewexpvar.Publish(%q): the name is taken", crew.ErrInvalid, name)
	if expvar.Get(name) != nil {
		panic(taken)
	}
	defer func() {
		// Another goroutine took the name since Get: expvar.Publish
		// panicked with a string.
		if r := recover(); r != nil {
			panic(taken)
		}
	}()
	expvar.Publish(name, Func(p))
}

// checkPool reports a pool that fn does not accept.
func checkPool(fn string, p *crew.Pool) error {
	if p.Stats().MaxWorkers == 0 {
		return fmt.Errorf("%w: crewexpvar.%s: the pool is nil or a zero crew.Pool, not made by crew.New", crew.ErrInvalid, fn)
	}
	return nil
}
