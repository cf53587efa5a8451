package crewotel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	"github.com/gocrew/crew/exporters/crewotel"
	crewjs "github.com/gocrew/crew/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

// jsPoints collects the int64 data points of r, keyed by instrument name
// and consumer or publisher name.
func jsPoints(t *testing.T, r *sdkmetric.ManualReader) (map[string]int64, map[string]metricdata.Metrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]int64{}
	metrics := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			metrics[m.Name] = m
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				name := ""
				for _, k := range []attribute.Key{crewotel.ConsumerKey, crewotel.PublisherKey} {
					if v, ok := p.Attributes.Value(k); ok {
						name = v.AsString()
					}
				}
				points[m.Name+" "+name] = p.Value
			}
		}
	}
	return points, metrics
}

func TestRegisterJetStreamCollected(t *testing.T) {
	defer goleak.VerifyNone(t)
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())

	orders := crewjs.Stats{Fetched: 10, Acked: 7, Nacked: 1, Terminated: 2, DeadLettered: 1, Snoozed: 3, Panicked: 1, Heartbeats: 5, Abandoned: 2, InFlight: 4}
	reg, err := crewotel.RegisterJetStream(provider.Meter("test"),
		map[string]func() crewjs.Stats{"orders": func() crewjs.Stats { return orders }, "empty": (*crewjs.Consumer[int])(nil).Stats},
		map[string]func() crewjs.PublisherStats{"events": func() crewjs.PublisherStats {
			return crewjs.PublisherStats{Stored: 8, Duplicates: 2, Batch: batch.Stats{Added: 11, Rejected: 1, Dropped: 0, Batches: 3, Flushed: 10, FailedBatches: 1, Failed: 1, Retries: 6}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	points, metrics := jsPoints(t, reader)
	want := map[string]int64{
		"crew.jetstream.consumer.messages.fetched orders":       10,
		"crew.jetstream.consumer.messages.acked orders":         7,
		"crew.jetstream.consumer.messages.nacked orders":        1,
		"crew.jetstream.consumer.messages.terminated orders":    2,
		"crew.jetstream.consumer.messages.dead_lettered orders": 1,
		"crew.jetstream.consumer.messages.snoozed orders":       3,
		"crew.jetstream.consumer.messages.in_flight orders":     4,
		"crew.jetstream.consumer.panics orders":                 1,
		"crew.jetstream.consumer.heartbeats orders":             5,
		"crew.jetstream.consumer.handlers.abandoned orders":     2,
		"crew.jetstream.consumer.messages.fetched empty":        0,
		"crew.jetstream.publisher.messages.stored events":       8,
		"crew.jetstream.publisher.messages.duplicates events":   2,
		"crew.jetstream.publisher.items.added events":           11,
		"crew.jetstream.publisher.items.rejected events":        1,
		"crew.jetstream.publisher.items.dropped events":         0,
		"crew.jetstream.publisher.items.flushed events":         10,
		"crew.jetstream.publisher.items.failed events":          1,
		"crew.jetstream.publisher.batches.flushed events":       3,
		"crew.jetstream.publisher.batches.failed events":        1,
		"crew.jetstream.publisher.flush.retries events":         6,
	}
	for k, v := range want {
		if got, ok := points[k]; !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, v)
		}
	}
	if len(points) != 10*2+10 {
		t.Errorf("%d data points, want %d: %v", len(points), 10*2+10, points)
	}
	if sum := metrics["crew.jetstream.consumer.messages.in_flight"].Data.(metricdata.Sum[int64]); sum.IsMonotonic {
		t.Error("in_flight is monotonic, want an UpDownCounter")
	}
	if sum := metrics["crew.jetstream.consumer.messages.acked"].Data.(metricdata.Sum[int64]); !sum.IsMonotonic {
		t.Error("acked is not monotonic")
	}

	orders.Acked = 9
	points, _ = jsPoints(t, reader)
	if got := points["crew.jetstream.consumer.messages.acked orders"]; got != 9 {
		t.Errorf("acked after a change = %d, want 9: read at each collection", got)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if points, _ = jsPoints(t, reader); len(points) != 0 {
		t.Errorf("after Unregister: %v", points)
	}
}

func TestRegisterJetStreamBadInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	meter := noop.NewMeterProvider().Meter("test")
	ok := map[string]func() crewjs.Stats{"c": func() crewjs.Stats { return crewjs.Stats{} }}
	for name, f := range map[string]func() error{
		"nil meter": func() error { _, err := crewotel.RegisterJetStream(nil, ok, nil); return err },
		"nothing":   func() error { _, err := crewotel.RegisterJetStream(meter, nil, nil); return err },
		"empty maps": func() error {
			_, err := crewotel.RegisterJetStream(meter, map[string]func() crewjs.Stats{}, map[string]func() crewjs.PublisherStats{})
			return err
		},
		"nil consumer func": func() error {
			_, err := crewotel.RegisterJetStream(meter, map[string]func() crewjs.Stats{"c": nil}, nil)
			return err
		},
		"nil publisher func": func() error {
			_, err := crewotel.RegisterJetStream(meter, ok, map[string]func() crewjs.PublisherStats{"p": nil})
			return err
		},
		"name not UTF-8": func() error {
			_, err := crewotel.RegisterJetStream(meter, map[string]func() crewjs.Stats{"bad\xff": ok["c"]}, nil)
			return err
		},
	} {
		if err := f(); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: %v, want crew.ErrInvalid", name, err)
		}
	}
	if reg, err := crewotel.RegisterJetStream(meter, ok, nil); err != nil {
		t.Errorf("consumers only: %v", err)
	} else {
		reg.Unregister()
	}
}
