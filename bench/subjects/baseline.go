package subjects

import "sync"

// Goroutines is the unbounded baseline: one go statement per task, counted by
// a WaitGroup. It ignores the limit.
var Goroutines = Subject{Name: "goroutines", New: func(_, _ int, task func()) Pool {
	g := &goroutines{}
	g.run = func() { task(); g.wg.Done() }
	return g
}}

type goroutines struct {
	wg  sync.WaitGroup
	run func()
}

func (g *goroutines) Submit() {
	g.wg.Add(1)
	go g.run()
}

func (g *goroutines) StopWait() { g.wg.Wait() }

// ChanPoolUnbuffered and ChanPoolBuffered are the hand-made pool of
// gobyexample: limit workers started up front, ranging over a channel of
// tasks; StopWait closes the channel and waits for the workers. The buffered
// channel holds the whole run (capped at 1,000,000), as in pond's benchmark.
var (
	ChanPoolUnbuffered = Subject{Name: "chanpool-unbuffered", New: func(limit, _ int, task func()) Pool {
		return newChanPool(limit, 0, task)
	}}
	ChanPoolBuffered = Subject{Name: "chanpool-buffered", New: func(limit, queue int, task func()) Pool {
		return newChanPool(limit, queueCap(queue), task)
	}}
)

type chanPool struct {
	tasks chan func()
	wg    sync.WaitGroup
	task  func()
}

func newChanPool(workers, buffer int, task func()) *chanPool {
	p := &chanPool{tasks: make(chan func(), buffer), task: task}
	p.wg.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

func (p *chanPool) work() {
	defer p.wg.Done()
	for f := range p.tasks {
		f()
	}
}

func (p *chanPool) Submit() { p.tasks <- p.task }

func (p *chanPool) StopWait() {
	close(p.tasks)
	p.wg.Wait()
}
