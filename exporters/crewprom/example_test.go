package crewprom_test

import (
	"fmt"
	"strings"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewprom"
	"github.com/prometheus/client_golang/prometheus"
)

// A Collector registered with a registry reports its pools at each
// scrape; a program serves the registry with promhttp.HandlerFor, or
// registers the Collector with prometheus.MustRegister for the default
// one. Here the registry is gathered directly, and the counters and
// histogram counts printed, in the order of their names.
func ExampleNewCollector() {
	p := crew.New(8, crew.WithName("mailer"), crew.WithLatency())
	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{p}))

	for range 5 {
		p.Go(func() {})
	}
	p.Stop()

	fams, _ := reg.Gather()
	for _, f := range fams {
		m := f.GetMetric()[0]
		switch f.GetType().String() {
		case "HISTOGRAM":
			fmt.Println(f.GetName(), "count", m.GetHistogram().GetSampleCount())
		case "COUNTER":
			fmt.Println(f.GetName(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// crew_pool_task_run_seconds count 5
	// crew_pool_task_wait_seconds count 5
	// crew_pool_tasks_cancelled_total 0
	// crew_pool_tasks_completed_total 5
	// crew_pool_tasks_dropped_total 0
	// crew_pool_tasks_failed_total 0
	// crew_pool_tasks_panicked_total 0
	// crew_pool_tasks_submitted_total 5
}

// One Collector reports several pools, each under its name in the label
// pool.
func ExampleNewCollector_pools() {
	mailer := crew.New(4, crew.WithName("mailer"))
	resizer := crew.New(2, crew.WithName("resizer"))
	defer mailer.Stop()
	defer resizer.Stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{mailer, resizer}))

	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != "crew_pool_max_workers" {
			continue
		}
		for _, m := range f.GetMetric() {
			fmt.Printf("%s{pool=%q} %v\n", f.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// crew_pool_max_workers{pool="mailer"} 4
	// crew_pool_max_workers{pool="resizer"} 2
}

// A registry takes one Collector per namespace: WithNamespace lets two
// parts of a program register their pools with the same registry.
func ExampleWithNamespace() {
	jobs := crew.New(4, crew.WithName("jobs"))
	defer jobs.Stop()
	plugins := crew.New(2, crew.WithName("plugins"))
	defer plugins.Stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{jobs}))
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{plugins}, crewprom.WithNamespace("plugin_host")))

	fams, _ := reg.Gather()
	for _, f := range fams {
		if strings.HasSuffix(f.GetName(), "_max_workers") {
			m := f.GetMetric()[0]
			fmt.Printf("%s{pool=%q} %v\n", f.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// crew_pool_max_workers{pool="jobs"} 4
	// plugin_host_pool_max_workers{pool="plugins"} 2
}

// Coarser latency buckets, in seconds, for pools whose tasks take
// milliseconds to seconds.
func ExampleWithBuckets() {
	p := crew.New(4, crew.WithName("reports"), crew.WithLatency())
	p.Go(func() {})
	p.Stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{p}, crewprom.WithBuckets(0.01, 0.1, 1, 10)))

	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != "crew_pool_task_run_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			fmt.Print(b.GetUpperBound(), " ")
		}
		fmt.Println("count", h.GetSampleCount())
	}
	// Output: 0.01 0.1 1 10 count 1
}
