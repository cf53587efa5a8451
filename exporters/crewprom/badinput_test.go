package crewprom_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

// panicOf calls f and returns the error it panicked with, and whether it
// panicked at all.
func panicOf(f func()) (err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if err, _ = v.(error); err == nil {
				err = fmt.Errorf("a non-error value: %v", v)
			}
		}
	}()
	f()
	return nil, false
}

// TestBadInput feeds every exported function, method and option of
// crewprom the mistakes users make. NewCollector panics with an error
// wrapping crew.ErrInvalid for arguments it cannot export correctly; a
// Collector it accepts registers, gathers and lints cleanly; Describe and
// Collect report a nil or zero Collector through the registry and panic
// on a nil channel rather than block forever.
func TestBadInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	good := crew.New(1, crew.WithName("good"))
	other := crew.New(2, crew.WithName("other"))
	twin := crew.New(1, crew.WithName("good"))
	unnamed := crew.New(1)
	unnamed2 := crew.New(1)
	notUTF8 := crew.New(1, crew.WithName("bad\xff"))
	stopped := ranOnce("stopped", func() {})
	defer func() {
		for _, p := range []*crew.Pool{good, other, twin, unnamed, unnamed2, notUTF8} {
			p.Stop()
		}
	}()
	zero := new(crew.Pool)
	var nilPool *crew.Pool
	pools := func(ps ...*crew.Pool) []*crew.Pool { return ps }
	goodOnly := pools(good)

	for _, c := range []struct {
		name  string
		pools []*crew.Pool
		opts  []crewprom.Option
		ok    bool   // NewCollector accepts it
		want  sample // with ok: a sample the Collector must report
		// with ok, for a histogram sample: the upper bounds of its
		// buckets, less +Inf
		buckets []float64
	}{
		{name: "nil pool slice", pools: nil},
		{name: "empty pool slice", pools: []*crew.Pool{}},
		{name: "nil pool", pools: pools(nilPool)},
		{name: "nil pool among good ones", pools: pools(good, nilPool, other)},
		{name: "zero pool", pools: pools(zero)},
		{name: "zero pool among good ones", pools: pools(good, zero)},
		{name: "same pool twice", pools: pools(good, other, good)},
		{name: "two pools with one name", pools: pools(good, twin)},
		{name: "two unnamed pools", pools: pools(unnamed, unnamed2)},
		{name: "name not UTF-8", pools: pools(notUTF8)},
		{name: "one unnamed pool", pools: pools(unnamed, good), ok: true, want: sample{"crew_pool_max_workers", "", 1}},
		{name: "stopped pool", pools: pools(stopped, good), ok: true, want: sample{"crew_pool_tasks_completed_total", "stopped", 1}},

		{name: "nil option", pools: goodOnly, opts: []crewprom.Option{nil}},
		{name: "nil option among good ones", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("app"), nil}},

		{name: "empty namespace", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("")}},
		{name: "namespace with a dash", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("my-app")}},
		{name: "namespace with a space", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("my app")}},
		{name: "namespace with a colon", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("my:app")}},
		{name: "namespace starting with a digit", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("1app")}},
		{name: "namespace not ASCII", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("äpp")}},
		{name: "namespace not UTF-8", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("\xff")}},
		{name: "namespace of letters, digits, underscores", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("_My_app2")}, ok: true, want: sample{"_My_app2_pool_max_workers", "good", 1}},
		{name: "later namespace replaces a bad one", pools: goodOnly, opts: []crewprom.Option{crewprom.WithNamespace("bad-"), crewprom.WithNamespace("app")}, ok: true, want: sample{"app_pool_max_workers", "good", 1}},

		{name: "no buckets", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets()}},
		{name: "NaN bucket", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(0.1, math.NaN())}},
		{name: "negative bucket", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(-1)}},
		{name: "-Inf bucket", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(math.Inf(-1), 1)}},
		{name: "unsorted buckets", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(1, 0.5)}},
		{name: "duplicate buckets", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(1, 1)}},
		{name: "bucket after +Inf", pools: goodOnly, opts: []crewprom.Option{crewprom.WithBuckets(math.Inf(1), 1)}},
		{name: "zero bucket", pools: pools(stopped), opts: []crewprom.Option{crewprom.WithBuckets(0, 1e-3)}, ok: true, want: sample{"crew_pool_task_run_seconds", "stopped", 1}, buckets: []float64{0, 1e-3}},
		{name: "only +Inf", pools: pools(stopped), opts: []crewprom.Option{crewprom.WithBuckets(math.Inf(1))}, ok: true, want: sample{"crew_pool_task_run_seconds", "stopped", 1}, buckets: []float64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var col *crewprom.Collector
			err, panicked := panicOf(func() { col = crewprom.NewCollector(c.pools, c.opts...) })
			if !c.ok {
				if !panicked || !errors.Is(err, crew.ErrInvalid) {
					t.Fatalf("NewCollector: panic %v (panicked %v), want an error wrapping crew.ErrInvalid", err, panicked)
				}
				return
			}
			if panicked {
				t.Fatalf("NewCollector panicked: %v", err)
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(col); err != nil {
				t.Fatalf("Register: %v", err)
			}
			if _, err := reg.Gather(); err != nil {
				t.Fatalf("Gather: %v", err)
			}
			if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
				t.Errorf("lint: %v %v", err, problems)
			}
			fams, _ := reg.Gather()
			m := metric(t, fams, c.want.name, c.want.pool)
			switch {
			case m == nil:
				t.Fatalf("%s{pool=%q} missing", c.want.name, c.want.pool)
			case c.buckets != nil:
				h := m.GetHistogram()
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if h.GetSampleCount() != uint64(c.want.value) || fmt.Sprint(bounds) != fmt.Sprint(c.buckets) {
					t.Errorf("%s{pool=%q}: count %d, bounds %v; want %v, %v", c.want.name, c.want.pool, h.GetSampleCount(), bounds, c.want.value, c.buckets)
				}
			case m.GetGauge().GetValue()+m.GetCounter().GetValue() != c.want.value:
				t.Errorf("%s{pool=%q} = %v, want %v", c.want.name, c.want.pool, m, c.want.value)
			}
		})
	}

	col := crewprom.NewCollector(pools(good))
	var nilCol *crewprom.Collector
	for _, c := range []struct {
		name string
		call func() error // an error the call reports; a panic is caught apart
		ok   bool         // the call must return, with no error and no panic
	}{
		{name: "Describe on a nil channel", call: func() error { col.Describe(nil); return nil }},
		{name: "Collect on a nil channel", call: func() error { col.Collect(nil); return nil }},
		{name: "nil Collector: Describe on a nil channel", call: func() error { nilCol.Describe(nil); return nil }},
		{name: "nil Collector: Collect on a nil channel", call: func() error { nilCol.Collect(nil); return nil }},
		{name: "nil Collector: Register", call: func() error { return prometheus.NewRegistry().Register(nilCol) }},
		{name: "zero Collector: Register", call: func() error { return prometheus.NewRegistry().Register(new(crewprom.Collector)) }},
		{name: "nil Collector: Collect", call: func() error { return collectOne(nilCol) }},
		{name: "zero Collector: Collect", call: func() error { return collectOne(new(crewprom.Collector)) }},
		{name: "second Collector with the same namespace", call: func() error {
			reg := prometheus.NewRegistry()
			reg.MustRegister(crewprom.NewCollector(pools(good)))
			return reg.Register(crewprom.NewCollector(pools(other)))
		}},
		{name: "second Collector with its own namespace", ok: true, call: func() error {
			reg := prometheus.NewRegistry()
			reg.MustRegister(crewprom.NewCollector(pools(good)))
			return reg.Register(crewprom.NewCollector(pools(other), crewprom.WithNamespace("other")))
		}},
		{name: "pool slice changed after NewCollector", ok: true, call: func() error {
			ps := pools(good, other)
			c := crewprom.NewCollector(ps)
			ps[0], ps[1] = nil, good
			_, err := gather(c)
			return err
		}},
		{name: "DefaultBuckets changed after NewCollector", ok: true, call: func() error {
			c := crewprom.NewCollector(pools(stopped))
			first := crewprom.DefaultBuckets[0]
			defer func() { crewprom.DefaultBuckets[0] = first }()
			crewprom.DefaultBuckets[0] = math.NaN()
			fams, err := gather(c)
			if err != nil {
				return err
			}
			if b := metric(t, fams, "crew_pool_task_run_seconds", "stopped").GetHistogram().GetBucket(); len(b) == 0 || b[0].GetUpperBound() != first {
				return fmt.Errorf("buckets %v, want the first bound %v", b, first)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err, perr error
			var panicked bool
			if !returnsWithin(5*time.Second, func() { perr, panicked = panicOf(func() { err = c.call() }) }) {
				t.Fatal("the call blocks (its goroutine is stuck for good)")
			}
			switch {
			case c.ok && (panicked || err != nil):
				t.Fatalf("error %v, panic %v (panicked %v); want neither", err, perr, panicked)
			case c.ok:
			case panicked && !errors.Is(perr, crew.ErrInvalid):
				t.Fatalf("panicked with %v, want an error wrapping crew.ErrInvalid", perr)
			case !panicked && err == nil:
				t.Fatal("no error, no panic: the mistake passes unseen")
			case !panicked && c.name != "second Collector with the same namespace" && !errors.Is(err, crew.ErrInvalid):
				t.Fatalf("error %v, want one wrapping crew.ErrInvalid", err)
			}
		})
	}
}

// returnsWithin reports whether f returns within d. If it does not, f's
// goroutine is left blocked.
func returnsWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// gather registers c alone and gathers it.
func gather(c prometheus.Collector) ([]*dto.MetricFamily, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return reg.Gather()
}

// collectOne calls c.Collect and returns the error of the first metric
// it sends, which must be the only one.
func collectOne(c prometheus.Collector) error {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	var errs []error
	n := 0
	for m := range ch {
		n++
		errs = append(errs, m.Write(&dto.Metric{}))
	}
	if n != 1 {
		return fmt.Errorf("Collect sent %d metrics, want 1", n)
	}
	return errors.Join(errs...)
}

// sample names a metric family, the pool label of one of its samples and
// that sample's value (for a histogram, its count).
type sample struct {
	name, pool string
	value      float64
}
