package subjects

import (
	"github.com/alitto/pond"
	pond2 "github.com/alitto/pond/v2"
)

// PondEager, PondBalanced and PondLazy are pond v1 with each resizing
// strategy and a task queue big enough for the whole run, as in pond's own
// benchmark. Note that pond v1 computes the strategies' rates from GOMAXPROCS
// at package init, and that with 2 CPUs Eager and Balanced are the same.
var (
	PondEager    = pondV1("pond-eager", pond.Eager)
	PondBalanced = pondV1("pond-balanced", pond.Balanced)
	PondLazy     = pondV1("pond-lazy", pond.Lazy)
)

func pondV1(name string, strategy func() pond.ResizingStrategy) Subject {
	return Subject{Name: name, New: func(limit, queue int, task func()) Pool {
		p := pond.New(limit, queueCap(queue), pond.Strategy(strategy()))
		return &funcPool{p.Submit, p.StopAndWait, task}
	}}
}

// Pond2Go is pond v2's fire-and-forget Go; Pond2Submit is its Submit, which
// allocates a future per task (discarded here).
var (
	Pond2Go = Subject{Name: "pond2-go", New: func(limit, _ int, task func()) Pool {
		return &pond2Pool{pond2.NewPool(limit), task, true}
	}}
	Pond2Submit = Subject{Name: "pond2-submit", New: func(limit, _ int, task func()) Pool {
		return &pond2Pool{pond2.NewPool(limit), task, false}
	}}
)

type pond2Pool struct {
	p    pond2.Pool
	task func()
	goFn bool
}

func (p *pond2Pool) Submit() {
	if p.goFn {
		must(p.p.Go(p.task))
	} else {
		p.p.Submit(p.task)
	}
}

func (p *pond2Pool) StopWait() { p.p.StopAndWait() }
