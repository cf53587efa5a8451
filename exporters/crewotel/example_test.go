package crewotel_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Register reports a pool to a meter of the OpenTelemetry SDK. A program
// gives its MeterProvider a periodic reader and an exporter (OTLP,
// Prometheus, ...); here a manual reader collects once, and the completed
// task count is printed.
func ExampleRegister() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	p := crew.New(8, crew.WithName("mailer"))
	reg, err := crewotel.Register(provider.Meter("example"), p)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
	for range 5 {
		p.Go(func() {})
	}
	p.Stop()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "crew.pool.tasks.completed" {
			pt := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			pool, _ := pt.Attributes.Value(crewotel.PoolKey)
			fmt.Println(m.Name, pool.AsString(), pt.Value)
		}
	}
	// Output: crew.pool.tasks.completed mailer 5
}

// A pool built crew.WithLatency also reports the quantiles of its queue
// wait and run time, one data point per quantile, each with the attribute
// QuantileKey.
func ExampleRegister_latency() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	p := crew.New(8, crew.WithName("resizer"), crew.WithLatency())
	reg, err := crewotel.Register(provider.Meter("example"), p)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
	p.Go(func() {})
	p.Stop()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "crew.pool.task.run.duration" {
			continue
		}
		var qs []float64
		for _, pt := range m.Data.(metricdata.Gauge[float64]).DataPoints {
			q, _ := pt.Attributes.Value(crewotel.QuantileKey)
			qs = append(qs, q.AsFloat64())
		}
		slices.Sort(qs)
		fmt.Println(m.Name, m.Unit, "quantiles", qs)
	}
	// Output: crew.pool.task.run.duration s quantiles [0.5 0.9 0.99 1]
}
