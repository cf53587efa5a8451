package main

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"

	"github.com/gocrew/crew"
)

// schedWorkers is the worker limit of the pools in BenchmarkKeyed and
// BenchmarkPriority.
const schedWorkers = 8

// BenchmarkKeyed measures keyed (per-key serial) execution on a warm pool:
// b.N tiny tasks (an atomic add), task i under key i mod keys, split
// across the producers (each takes every producers-th task, so a key's
// tasks come from one producer), timed until the last has run. ns/op and
// allocs/op are per task.
//
// Subjects: crew's Keyed on a pool of 8 workers; crew's Pool.Go without
// keys, for the cost of keying; and the two ways people do it by hand: a
// goroutine and a channel per key (made on first use and kept, as they
// usually are) and a fixed set of 8 workers, each with a channel, a key
// always going to the worker its hash picks (serial per key, but a slow key
// holds up every key that shares its worker). No peer library offers keyed
// execution. Names: BenchmarkKeyed/keys=<n>/producers=<n>/<subject>.
func BenchmarkKeyed(b *testing.B) {
	for _, keys := range []int{10_000, 100} {
		for _, producers := range []int{1, 8} {
			prefix := fmt.Sprintf("keys=%d/producers=%d/", keys, producers)
			b.Run(prefix+"crew-Keyed", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.New(schedWorkers)
				defer p.Stop()
				k := crew.NewKeyed[int](p)
				task := func() { c.add(1) }
				produceKeyed(b, producers, keys, c, func(key int) { must(k.Go(key, task)) })
			})
			b.Run(prefix+"crew-Pool.Go", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.New(schedWorkers)
				defer p.Stop()
				task := func() { c.add(1) }
				produceKeyed(b, producers, keys, c, func(int) { must(p.Go(task)) })
			})
			b.Run(prefix+"goroutine-per-key", func(b *testing.B) {
				c := newCounter(b.N)
				var mu sync.Mutex
				chans := map[int]chan func(){}
				var wg sync.WaitGroup
				defer func() {
					for _, ch := range chans {
						close(ch)
					}
					wg.Wait()
				}()
				task := func() { c.add(1) }
				produceKeyed(b, producers, keys, c, func(key int) {
					mu.Lock()
					ch := chans[key]
					if ch == nil {
						ch = make(chan func(), 64)
						chans[key] = ch
						wg.Go(func() {
							for f := range ch {
								f()
							}
						})
					}
					mu.Unlock()
					ch <- task
				})
			})
			b.Run(prefix+"hash-to-worker", func(b *testing.B) {
				c := newCounter(b.N)
				seed := maphash.MakeSeed()
				chans := make([]chan func(), schedWorkers)
				var wg sync.WaitGroup
				for i := range chans {
					chans[i] = make(chan func(), 1024)
					wg.Go(func() {
						for f := range chans[i] {
							f()
						}
					})
				}
				defer func() {
					for _, ch := range chans {
						close(ch)
					}
					wg.Wait()
				}()
				task := func() { c.add(1) }
				produceKeyed(b, producers, keys, c, func(key int) {
					chans[maphash.Comparable(seed, key)%schedWorkers] <- task
				})
			})
		}
	}
}

// produceKeyed submits b.N tasks, task i with key i mod keys, producer j
// taking the tasks i = j, j+producers, ...; it waits until c has counted
// them all; only that is timed.
func produceKeyed(b *testing.B, producers, keys int, c *counter, submit func(key int)) {
	b.ReportAllocs()
	b.ResetTimer()
	for j := range producers {
		go func() {
			for i := j; i < b.N; i += producers {
				submit(i % keys)
			}
		}()
	}
	<-c.done
	b.StopTimer()
}

// BenchmarkPriority measures the overhead of priorities on a warm pool of 8
// workers: b.N tiny tasks (an atomic add) submitted with Priority.Go (10
// priority levels, default aging) or with the plain Pool.Go, split across
// the producers, timed until the last has run. ns/op and allocs/op are per
// task. With queue=unbounded the producers outrun the two cores and the
// backlog grows to most of b.N (a heap of 100,000 tasks); with queue=1024
// the pool's bounded queue makes Go wait, which keeps the heap below about
// 1,000 tasks. Names: BenchmarkPriority/queue=<q>/producers=<n>/<subject>.
func BenchmarkPriority(b *testing.B) {
	for _, queue := range []int{-1, 1024} {
		var opts []crew.Option
		qname := "unbounded"
		if queue >= 0 {
			opts = append(opts, crew.WithQueueSize(queue))
			qname = fmt.Sprint(queue)
		}
		for _, producers := range []int{1, 8} {
			prefix := fmt.Sprintf("queue=%s/producers=%d/", qname, producers)
			b.Run(prefix+"crew-Priority", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.New(schedWorkers, opts...)
				defer p.Stop()
				q := crew.NewPriority(p)
				task := func() { c.add(1) }
				produceKeyed(b, producers, 10, c, func(prio int) { must(q.Go(prio, task)) })
			})
			b.Run(prefix+"crew-Pool.Go", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.New(schedWorkers, opts...)
				defer p.Stop()
				task := func() { c.add(1) }
				produceKeyed(b, producers, 10, c, func(int) { must(p.Go(task)) })
			})
		}
	}
}
