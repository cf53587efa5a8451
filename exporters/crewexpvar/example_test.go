package crewexpvar_test

import (
	"expvar"
	"fmt"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewexpvar"
)

// Publish makes a pool's statistics a variable of /debug/vars, read each
// time the page is served.
func ExamplePublish() {
	p := crew.New(8, crew.WithName("resizer"))
	crewexpvar.Publish("crew.resizer", p) // served at /debug/vars
	p.Go(func() {})
	p.Stop()
	fmt.Println(expvar.Get("crew.resizer").String())
	// Output: {"name":"resizer","max_workers":8,"workers":0,"idle":0,"running":0,"queued":0,"submitted":1,"completed":1,"failed":0,"panicked":0,"dropped":0,"cancelled":0}
}

// Func returns the variable without publishing it: here, the pools of a
// program are published together, as one expvar.Map.
func ExampleFunc() {
	mailer := crew.New(4, crew.WithName("mailer"))
	resizer := crew.New(2, crew.WithName("resizer"))

	pools := expvar.NewMap("crew.pools") // served at /debug/vars
	pools.Set("mailer", crewexpvar.Func(mailer))
	pools.Set("resizer", crewexpvar.Func(resizer))

	for range 3 {
		mailer.Go(func() {})
	}
	mailer.Stop()
	resizer.Stop()
	fmt.Println(pools.String())
	// Output: {"mailer": {"name":"mailer","max_workers":4,"workers":0,"idle":0,"running":0,"queued":0,"submitted":3,"completed":3,"failed":0,"panicked":0,"dropped":0,"cancelled":0}, "resizer": {"name":"resizer","max_workers":2,"workers":0,"idle":0,"running":0,"queued":0,"submitted":0,"completed":0,"failed":0,"panicked":0,"dropped":0,"cancelled":0}}
}

// Read returns a pool's statistics as a Snapshot, to log or to export in a
// form of one's own. A pool built crew.WithLatency adds the quantiles of its
// queue wait and run time.
func ExampleRead() {
	p := crew.New(8, crew.WithName("indexer"), crew.WithLatency())
	for range 10 {
		p.Go(func() {})
	}
	p.Stop()

	s := crewexpvar.Read(p)
	fmt.Printf("%s: %d of %d tasks completed\n", s.Name, s.Completed, s.Submitted)
	fmt.Println("run time count:", s.Run.Count)
	fmt.Println("p99 within max:", s.Run.P99Ns <= s.Run.MaxNs)
	// Output:
	// indexer: 10 of 10 tasks completed
	// run time count: 10
	// p99 within max: true
}
