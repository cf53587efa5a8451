package crewprom_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	"github.com/gocrew/crew/exporters/crewprom"
	crewjs "github.com/gocrew/crew/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestJetStreamCollectorGathered(t *testing.T) {
	defer goleak.VerifyNone(t)
	orders := crewjs.Stats{Fetched: 10, Acked: 7, Nacked: 1, Terminated: 2, DeadLettered: 1, Snoozed: 3, Panicked: 1, Heartbeats: 5, Abandoned: 2, InFlight: 4}
	c := crewprom.NewJetStreamCollector(
		map[string]func() crewjs.Stats{"orders": func() crewjs.Stats { return orders }},
		map[string]func() crewjs.PublisherStats{"events": func() crewjs.PublisherStats {
			return crewjs.PublisherStats{Stored: 8, Duplicates: 2, Batch: batch.Stats{Added: 11, Rejected: 1, Batches: 3, Flushed: 10, FailedBatches: 1, Failed: 1, Retries: 6}}
		}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{crew.New(1, crew.WithName("p"))})) // side by side
	want := `
# HELP crew_jetstream_consumer_acked_total Messages handled successfully and acknowledged.
# TYPE crew_jetstream_consumer_acked_total counter
crew_jetstream_consumer_acked_total{consumer="orders"} 7
# HELP crew_jetstream_consumer_in_flight Messages held now: fetched and not settled.
# TYPE crew_jetstream_consumer_in_flight gauge
crew_jetstream_consumer_in_flight{consumer="orders"} 4
# HELP crew_jetstream_consumer_dead_lettered_total Messages published to the dead-letter subject before Term.
# TYPE crew_jetstream_consumer_dead_lettered_total counter
crew_jetstream_consumer_dead_lettered_total{consumer="orders"} 1
# HELP crew_jetstream_consumer_abandoned_total Handlers abandoned, still running a job timeout after their context was cancelled.
# TYPE crew_jetstream_consumer_abandoned_total counter
crew_jetstream_consumer_abandoned_total{consumer="orders"} 2
# HELP crew_jetstream_publisher_stored_total Messages the stream stored.
# TYPE crew_jetstream_publisher_stored_total counter
crew_jetstream_publisher_stored_total{publisher="events"} 8
# HELP crew_jetstream_publisher_flush_retries_total Flushes made again after a failure.
# TYPE crew_jetstream_publisher_flush_retries_total counter
crew_jetstream_publisher_flush_retries_total{publisher="events"} 6
`
	names := []string{"crew_jetstream_consumer_acked_total", "crew_jetstream_consumer_in_flight", "crew_jetstream_consumer_dead_lettered_total", "crew_jetstream_consumer_abandoned_total",
		"crew_jetstream_publisher_stored_total", "crew_jetstream_publisher_flush_retries_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 10+10 {
		t.Errorf("%d metrics, want 20", n)
	}
	orders.Acked = 9
	if v := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		inner := make(chan prometheus.Metric, 32)
		c.Collect(inner)
		close(inner)
		for m := range inner {
			if strings.Contains(m.Desc().String(), `"crew_jetstream_consumer_acked_total"`) {
				ch <- m
			}
		}
	})); v != 9 {
		t.Errorf("acked after a change = %v, want 9: read at each scrape", v)
	}

	ns := crewprom.NewJetStreamCollector(map[string]func() crewjs.Stats{"a": func() crewjs.Stats { return crewjs.Stats{} }}, nil, crewprom.WithNamespace("app"))
	if err := testutil.CollectAndCompare(ns, strings.NewReader(`
# HELP app_jetstream_consumer_fetched_total Messages received from the server.
# TYPE app_jetstream_consumer_fetched_total counter
app_jetstream_consumer_fetched_total{consumer="a"} 0
`), "app_jetstream_consumer_fetched_total"); err != nil {
		t.Error(err)
	}
}

func TestJetStreamCollectorBadInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	ok := map[string]func() crewjs.Stats{"c": func() crewjs.Stats { return crewjs.Stats{} }}
	for name, f := range map[string]func(){
		"nothing":            func() { crewprom.NewJetStreamCollector(nil, nil) },
		"nil consumer func":  func() { crewprom.NewJetStreamCollector(map[string]func() crewjs.Stats{"c": nil}, nil) },
		"nil publisher func": func() { crewprom.NewJetStreamCollector(ok, map[string]func() crewjs.PublisherStats{"p": nil}) },
		"name not UTF-8":     func() { crewprom.NewJetStreamCollector(map[string]func() crewjs.Stats{"bad\xff": ok["c"]}, nil) },
		"nil option":         func() { crewprom.NewJetStreamCollector(ok, nil, nil) },
		"bad namespace":      func() { crewprom.NewJetStreamCollector(ok, nil, crewprom.WithNamespace("1x")) },
		"nil channel":        func() { crewprom.NewJetStreamCollector(ok, nil).Collect(nil) },
	} {
		if err := panicked(f); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: panicked with %v, want crew.ErrInvalid", name, err)
		}
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(new(crewprom.JetStreamCollector)); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("registering a zero JetStreamCollector: %v", err)
	}
	if _, err := testutil.CollectAndLint((*crewprom.JetStreamCollector)(nil)); err == nil {
		t.Error("collecting a nil JetStreamCollector: no error")
	}
}

// panicked calls f and returns the error it panicked with.
func panicked(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err, _ = v.(error)
		}
	}()
	f()
	return nil
}
