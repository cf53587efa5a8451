package subjects

import (
	"sync"

	"github.com/panjf2000/ants/v2"
)

// Ants is ants v2 with default options. A WaitGroup counts the tasks, as
// ants' own examples do; Release does not wait for workers to exit.
var Ants = Subject{Name: "ants", New: func(limit, _ int, task func()) Pool {
	p, err := ants.NewPool(limit)
	must(err)
	a := &antsPool{p: p}
	a.run = func() { task(); a.wg.Done() }
	return a
}}

type antsPool struct {
	p   *ants.Pool
	wg  sync.WaitGroup
	run func()
}

func (a *antsPool) Submit() {
	a.wg.Add(1)
	must(a.p.Submit(a.run))
}

func (a *antsPool) StopWait() {
	a.wg.Wait()
	a.p.Release()
}
