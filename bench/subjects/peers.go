package subjects

import (
	"github.com/gammazero/workerpool"
	"github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
)

// Gammazero is gammazero/workerpool: Submit, StopWait.
var Gammazero = Subject{Name: "gammazero", New: func(limit, _ int, task func()) Pool {
	p := workerpool.New(limit)
	return &funcPool{p.Submit, p.StopWait, task}
}}

// Conc is sourcegraph/conc's pool: New().WithMaxGoroutines, Go, Wait.
var Conc = Subject{Name: "conc", New: func(limit, _ int, task func()) Pool {
	p := pool.New().WithMaxGoroutines(limit)
	return &funcPool{p.Go, p.Wait, task}
}}

// funcPool adapts a peer pool whose submit method takes the task as a
// func() and returns nothing: submit is that method, bound to the pool,
// and stopWait the one that waits for the tasks and releases the pool.
type funcPool struct {
	submit   func(func())
	stopWait func()
	task     func()
}

func (p *funcPool) Submit()   { p.submit(p.task) }
func (p *funcPool) StopWait() { p.stopWait() }

// Errgroup is x/sync/errgroup with SetLimit: one goroutine per task.
var Errgroup = Subject{Name: "errgroup", New: func(limit, _ int, task func()) Pool {
	g := &errgroupPool{fn: func() error { task(); return nil }}
	g.g.SetLimit(limit)
	return g
}}

type errgroupPool struct {
	g  errgroup.Group
	fn func() error
}

func (g *errgroupPool) Submit()   { g.g.Go(g.fn) }
func (g *errgroupPool) StopWait() { must(g.g.Wait()) }
