package crewotel_test

import (
	"context"
	"fmt"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

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
