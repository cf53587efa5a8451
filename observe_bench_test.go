package crew_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
)

// BenchmarkObserve is BenchmarkGo with observability turned on: ns/op is
// the cost per tiny task from submission to completion on a warm pool of
// 4×GOMAXPROCS workers. "off" is a pool built with no observability
// option (the plain path); "name" adds WithName (pprof labels and the
// trace-region check); "hooks" sets TaskStart and TaskFinish hooks that
// each add to an atomic counter; "latency" is WithLatency; "all" is
// hooks, latency and name together.
func BenchmarkObserve(b *testing.B) {
	var started, finished atomic.Int64
	hooks := crew.WithHooks(crew.Hooks{
		TaskStart:  func(crew.TaskEvent) { started.Add(1) },
		TaskFinish: func(crew.TaskEvent) { finished.Add(1) },
	})
	configs := []struct {
		name string
		opts []crew.Option
	}{
		{"off", nil},
		{"name", []crew.Option{crew.WithName("bench")}},
		{"hooks", []crew.Option{hooks}},
		{"latency", []crew.Option{crew.WithLatency()}},
		{"all", []crew.Option{crew.WithName("bench"), hooks, crew.WithLatency()}},
	}
	for _, c := range configs {
		for _, producers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/producers=%d", c.name, producers), func(b *testing.B) {
				benchGo(b, producers, c.opts...)
			})
		}
	}
}

// BenchmarkHistogramRecord measures Histogram.Record from parallel
// goroutines.
func BenchmarkHistogramRecord(b *testing.B) {
	var h crew.Histogram
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		d := 1000
		for pb.Next() {
			h.Record(time.Duration(d))
			d = d*7%100000 + 1
		}
	})
}
