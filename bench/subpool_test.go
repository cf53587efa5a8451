package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alitto/pond/v2"
	"github.com/gocrew/crew"
	"golang.org/x/sync/semaphore"
)

// BenchmarkSubpoolPeers measures the cost per tiny task, from submission
// to completion, through a child limit on a shared pool: crew's Subpool
// and pond v2's NewSubpool, on a parent of 4×GOMAXPROCS workers, with the
// same child limit (the parent's, or 2) and 1 or 8 producers. Names:
// BenchmarkSubpoolPeers/limit=<n>/producers=<n>/<subject>.
func BenchmarkSubpoolPeers(b *testing.B) {
	workers := runtime.GOMAXPROCS(0) * 4
	for _, limit := range []int{workers, 2} {
		for _, producers := range []int{1, 8} {
			b.Run(fmt.Sprintf("limit=%d/producers=%d", limit, producers), func(b *testing.B) {
				b.Run("crew", func(b *testing.B) {
					p := crew.New(workers)
					defer p.Stop()
					s := crew.NewSubpool(p, limit)
					submitAll(b, producers, func(_ int, task func()) { s.Go(task) }, s.Wait)
				})
				b.Run("pond", func(b *testing.B) {
					p := pond.NewPool(workers)
					defer p.StopAndWait()
					s := p.NewSubpool(limit)
					submitAll(b, producers, func(_ int, task func()) { s.Go(task) }, s.StopAndWait)
				})
			})
		}
	}
}

// BenchmarkWeightedPeers measures the cost per tiny weighted task (every
// fourth takes 4 slots of 8, the others 1), from submission to completion,
// with 1 or 8 producers: crew's Subpool.Weighted on a pool of
// 4×GOMAXPROCS workers; golang.org/x/sync/semaphore.Weighted guarding a
// goroutine per task ("semaphore+go"); and the same semaphore guarding
// tasks of a crew pool of the same size ("semaphore+crew"). The semaphore
// makes the producer wait for the slots; a Subpool queues the task.
// Names: BenchmarkWeightedPeers/producers=<n>/<subject>.
func BenchmarkWeightedPeers(b *testing.B) {
	const limit = 8
	weight := func(i int) int {
		if i%4 == 0 {
			return 4
		}
		return 1
	}
	workers := runtime.GOMAXPROCS(0) * 4
	for _, producers := range []int{1, 8} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			b.Run("crew", func(b *testing.B) {
				p := crew.New(workers)
				defer p.Stop()
				s := crew.NewSubpool(p, limit)
				submitAll(b, producers, func(i int, task func()) { s.Weighted(weight(i)).Go(task) }, s.Wait)
			})
			b.Run("semaphore+go", func(b *testing.B) {
				sem := semaphore.NewWeighted(limit)
				var wg sync.WaitGroup
				submitAll(b, producers, func(i int, task func()) {
					w := int64(weight(i))
					sem.Acquire(context.Background(), w)
					wg.Go(func() {
						task()
						sem.Release(w)
					})
				}, wg.Wait)
			})
			b.Run("semaphore+crew", func(b *testing.B) {
				p := crew.New(workers)
				defer p.Stop()
				sem := semaphore.NewWeighted(limit)
				submitAll(b, producers, func(i int, task func()) {
					w := int64(weight(i))
					sem.Acquire(context.Background(), w)
					p.Go(func() {
						task()
						sem.Release(w)
					})
				}, p.Wait)
			})
		})
	}
}

// submitAll submits b.N tiny tasks from the given number of producers
// with submit (which gets the task's index within its producer), waits
// with wait, and checks that every task ran.
func submitAll(b *testing.B, producers int, submit func(i int, task func()), wait func()) {
	var n atomic.Int64
	task := func() { n.Add(1) }
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range producers {
		k := b.N / producers
		if i < b.N%producers {
			k++
		}
		wg.Go(func() {
			for j := range k {
				submit(j, task)
			}
		})
	}
	wg.Wait()
	wait()
	b.StopTimer()
	if int(n.Load()) != b.N {
		b.Fatalf("%d tasks ran, want %d", n.Load(), b.N)
	}
}
