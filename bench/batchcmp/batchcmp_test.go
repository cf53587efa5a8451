package batchcmp

import (
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkEventSink sends b.N events to a collector taking 1 ms per
// request, each way of DefaultConfig in turn. ns/op, B/op and allocs/op are
// per event and, like cpu-ns/event, count the whole process, collector
// included. Names: BenchmarkEventSink/<sync-10|sync-100|crew-batch>.
func BenchmarkEventSink(b *testing.B) {
	cfg := DefaultConfig
	for _, w := range Ways(cfg) {
		b.Run(w.Name, func(b *testing.B) {
			b.ReportAllocs()
			r, err := Measure(context.Background(), w, cfg, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.EventsPerSec(), "events/s")
			b.ReportMetric(float64(r.CPU.Nanoseconds())/float64(b.N), "cpu-ns/event")
			b.ReportMetric(float64(r.Requests)/float64(b.N), "requests/event")
		})
	}
}

func TestRun(t *testing.T) {
	cfg := DefaultConfig
	cfg.Events = 500
	cfg.ServerDelay = 100 * time.Microsecond
	results, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 {
		t.Fatalf("%d results, want 3", len(results))
	}
	for _, r := range results {
		if r.Events != 500 || r.Elapsed <= 0 || r.Allocs == 0 {
			t.Errorf("%+v", r)
		}
	}
	if r := results[0]; r.Requests != 500 {
		t.Errorf("%s made %d requests, want one per event", r.Name, r.Requests)
	}
	if r := results[2]; r.Requests < 5 || r.Requests > 50 {
		t.Errorf("%s made %d requests, want about one per %d events", r.Name, r.Requests, cfg.BatchSize)
	}
	var table strings.Builder
	if err := WriteTable(&table, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table.String())
	if !strings.Contains(table.String(), "crew-batch") {
		t.Errorf("table without the batcher:\n%s", table.String())
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("Run accepted an empty config")
	}
}
