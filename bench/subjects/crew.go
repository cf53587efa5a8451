package subjects

import "github.com/gocrew/crew"

// Crew is crew's fire-and-forget path: crew.New, Pool.Go, Pool.Stop.
var Crew = Subject{Name: "crew", Crew: true, New: func(limit, _ int, task func()) Pool {
	return &crewPool{crew.New(limit), task}
}}

type crewPool struct {
	p    *crew.Pool
	task func()
}

func (c *crewPool) Submit()   { must(c.p.Go(c.task)) }
func (c *crewPool) StopWait() { c.p.Stop() }
