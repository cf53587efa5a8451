package crew_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// A plain task may wait for a layer, a Task or a Future of its own pool,
// even when every worker is such a task: the waiting task lends its slot
// while it waits, and the work it waits for runs.
func TestWaitFromInsideEveryWorker(t *testing.T) {
	waits := map[string]func(p *crew.Pool){
		"Keyed.Wait": func(p *crew.Pool) {
			k := crew.NewKeyed[string](p)
			k.Go("a", func() {})
			k.Wait()
		},
		"Priority.Wait": func(p *crew.Pool) {
			q := crew.NewPriority(p)
			q.Go(1, func() {})
			q.Wait()
		},
		"RateLimited.Wait": func(p *crew.Pool) {
			r := crew.NewRateLimited(p, crew.Rate{Limit: 1000, Per: time.Second})
			r.Go(func() {})
			r.Wait()
		},
		"Task.Wait": func(p *crew.Pool) {
			p.Submit(func(context.Context) error { return nil }).Wait()
		},
		"Future.Wait": func(p *crew.Pool) {
			crew.Submit(p, func(context.Context) (int, error) { return 1, nil }).Wait()
		},
	}
	for name, wait := range waits {
		t.Run(name, func(t *testing.T) {
			leak.Check(t)
			const workers = 2
			p := crew.New(workers)
			defer p.Stop()
			done := make(chan struct{}, workers)
			var started sync.WaitGroup // every worker holds a waiting task
			started.Add(workers)
			for range workers {
				p.Go(func() {
					started.Done()
					started.Wait()
					wait(p)
					done <- struct{}{}
				})
			}
			for range workers {
				recvWithin(t, done, name+" from inside a task")
			}
			p.Wait()
			if s := p.Stats(); s.MaxWorkers != workers {
				t.Fatalf("the limit is %d after the waits, want %d", s.MaxWorkers, workers)
			}
		})
	}
}

// A group runs no more tasks at once than its pool's limit: Wait, called
// from outside the pool, runs none of its tasks itself. (Called from one of
// the pool's tasks, it does, on that task's worker.)
func TestGroupNeverExceedsThePoolLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	var running, peak atomic.Int64
	release := make(chan struct{})
	g := p.Group(context.Background())
	for range 4 {
		g.Go(func(context.Context) error {
			n := running.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			running.Add(-1)
			return nil
		})
	}
	waited := make(chan error, 1)
	go func() { waited <- g.Wait() }()
	eventually(t, "Wait to block", func() bool { return strings.Contains(leak.Dump(), "crew.(*core[...]).await") })
	eventually(t, "the first task to run", func() bool { return running.Load() == 1 })
	close(release)
	if err := recvWithin(t, waited, "Wait"); err != nil {
		t.Fatal(err)
	}
	if n := peak.Load(); n != 1 {
		t.Fatalf("%d group tasks ran at once on a pool of one", n)
	}

	// From inside the pool's only worker, Wait runs them all itself.
	var ran atomic.Int64
	inner := make(chan error, 1)
	p.Go(func() {
		g := p.Group(context.Background())
		for range 4 {
			g.Go(func(context.Context) error { ran.Add(1); return nil })
		}
		inner <- g.Wait()
	})
	if err := recvWithin(t, inner, "Wait from inside the only worker"); err != nil || ran.Load() != 4 {
		t.Fatalf("Wait = %v with %d tasks run, want nil and 4", err, ran.Load())
	}
}
