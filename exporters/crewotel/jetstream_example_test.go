package crewotel_test

import (
	"context"
	"fmt"

	"github.com/gocrew/crew/exporters/crewotel"
	crewjs "github.com/gocrew/crew/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// RegisterJetStream reports consumers and publishers by the names given:
// a program passes the method values c.Stats and p.Stats of its
// jetstream.Consumer and jetstream.Publisher. Here a function stands in
// for a consumer that acknowledged 3 messages.
func ExampleRegisterJetStream() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	stats := func() crewjs.Stats { return crewjs.Stats{Fetched: 3, Acked: 3} } // c.Stats
	reg, err := crewotel.RegisterJetStream(provider.Meter("example"),
		map[string]func() crewjs.Stats{"orders": stats}, nil)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "crew.jetstream.consumer.messages.acked" {
			pt := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			name, _ := pt.Attributes.Value(crewotel.ConsumerKey)
			fmt.Println(m.Name, name.AsString(), pt.Value)
		}
	}
	// Output: crew.jetstream.consumer.messages.acked orders 3
}
