package subjects

import (
	"github.com/gammazero/workerpool"
	"github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
)

// Gammazero is gammazero/workerpool: Submit, StopWait.
var Gammazero = Subject{Name: "gammazero", New: func(limit, _ int, task func()) Pool {
	return &gammazeroPool{workerpool.New(limit), task}
}}

type gammazeroPool struct {
	p    *workerpool.WorkerPool
	task func()
}

func (p *gammazeroPool) Submit()   { p.p.Submit(p.task) }
func (p *gammazeroPool) StopWait() { p.p.StopWait() }

// Conc is sourcegraph/conc's pool: New().WithMaxGoroutines, Go, Wait.
var Conc = Subject{Name: "conc", New: func(limit, _ int, task func()) Pool {
	return &concPool{pool.New().WithMaxGoroutines(limit), task}
}}

type concPool struct {
	p    *pool.Pool
	task func()
}

func (p *concPool) Submit()   { p.p.Go(p.task) }
func (p *concPool) StopWait() { p.p.Wait() }

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
