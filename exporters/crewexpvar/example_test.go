package crewexpvar_test

import (
	"expvar"
	"fmt"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewexpvar"
)

func ExamplePublish() {
	p := crew.New(8, crew.WithName("resizer"))
	crewexpvar.Publish("crew.resizer", p) // served at /debug/vars
	p.Go(func() {})
	p.Stop()
	fmt.Println(expvar.Get("crew.resizer").String())
	// Output: {"name":"resizer","max_workers":8,"workers":0,"idle":0,"running":0,"queued":0,"submitted":1,"completed":1,"failed":0,"panicked":0,"dropped":0}
}
