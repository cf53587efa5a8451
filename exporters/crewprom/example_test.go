package crewprom_test

import (
	"fmt"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewprom"
	"github.com/prometheus/client_golang/prometheus"
)

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
	// crew_pool_tasks_completed_total 5
	// crew_pool_tasks_dropped_total 0
	// crew_pool_tasks_failed_total 0
	// crew_pool_tasks_panicked_total 0
	// crew_pool_tasks_submitted_total 5
}
