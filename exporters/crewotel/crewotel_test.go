package crewotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewotel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// collect gathers every data point, keyed by instrument name, pool and
// (for latency) quantile.
func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string]float64, map[string]metricdata.Metrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]float64{}
	metrics := map[string]metricdata.Metrics{}
	key := func(name string, set attribute.Set) string {
		k := name
		if v, ok := set.Value(crewotel.PoolKey); ok {
			k += " " + v.AsString()
		}
		if v, ok := set.Value(crewotel.QuantileKey); ok {
			k += " " + v.Emit()
		}
		return k
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics[m.Name] = m
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					points[key(m.Name, p.Attributes)] = p.Value
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return points, metrics
}

func TestRegisterCollected(t *testing.T) {
	defer goleak.VerifyNone(t)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	timed := crew.New(2, crew.WithName("timed"), crew.WithLatency(), crew.WithPanicHandler(func(*crew.PanicError) {}))
	plain := crew.New(3, crew.WithName("plain"))
	reg, err := crewotel.Register(provider.Meter("crewotel-test"), timed, plain)
	if err != nil {
		t.Fatal(err)
	}
	const work = time.Millisecond
	for range 10 {
		timed.Go(func() { spin(work) })
	}
	timed.Go(func() { panic("boom") })
	timed.Submit(func(context.Context) error { return errors.New("failed") }).Wait()
	plain.Go(func() {})
	timed.Stop()
	plain.Stop()

	points, metrics := collect(t, reader)
	for k, want := range map[string]float64{
		"crew.pool.workers.max timed":     2,
		"crew.pool.workers.max plain":     3,
		"crew.pool.workers timed":         0,
		"crew.pool.tasks.queued timed":    0,
		"crew.pool.tasks.submitted timed": 12,
		"crew.pool.tasks.completed timed": 12,
		"crew.pool.tasks.failed timed":    1,
		"crew.pool.tasks.panicked timed":  1,
		"crew.pool.tasks.dropped timed":   0,
		"crew.pool.tasks.cancelled timed": 0,
		"crew.pool.tasks.completed plain": 1,
	} {
		if got, ok := points[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if m := metrics["crew.pool.tasks.completed"]; !m.Data.(metricdata.Sum[int64]).IsMonotonic || m.Unit != "{task}" {
		t.Errorf("completed is not a monotonic {task} counter: %+v", m)
	}
	if m := metrics["crew.pool.task.run.duration"]; m.Unit != "s" {
		t.Errorf("run duration unit %q", m.Unit)
	}

	// 10 of the 12 tasks spun for 1ms: the median run is at least that
	// (less the histogram's stated error), and the maximum is the largest.
	p50, p99, maxRun := points["crew.pool.task.run.duration timed 0.5"], points["crew.pool.task.run.duration timed 0.99"], points["crew.pool.task.run.duration timed 1"]
	if p50 < work.Seconds()*(1-crew.HistogramRelativeError) || p99 < p50 || maxRun < p99 {
		t.Errorf("run quantiles p50 %v p99 %v max %v", p50, p99, maxRun)
	}
	l, _ := timed.Latency()
	if maxRun != l.Run.Max.Seconds() {
		t.Errorf("max run %v, pool says %v", maxRun, l.Run.Max)
	}
	if total := points["crew.pool.task.run.time timed"]; total < 10*work.Seconds() {
		t.Errorf("total run time %vs, want at least %vs", total, 10*work.Seconds())
	}
	if _, ok := points["crew.pool.task.wait.duration timed 0.9"]; !ok {
		t.Error("no wait quantiles")
	}
	if _, ok := points["crew.pool.task.run.duration plain 0.5"]; ok {
		t.Error("a pool without WithLatency reports latency")
	}

	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if points, _ := collect(t, reader); len(points) != 0 {
		t.Errorf("after Unregister: %v", points)
	}
}
