package crew_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
)

// BenchmarkGo measures Pool.Go on a warm pool: ns/op is the cost per task
// from submission to completion, with the given number of producers.
func BenchmarkGo(b *testing.B) {
	for _, producers := range []int{1, 8, 100} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			benchGo(b, producers)
		})
	}
}

// benchGo submits b.N tiny tasks from the given number of producers to a
// warm pool of 4×GOMAXPROCS workers built with opts, and waits for them.
func benchGo(b *testing.B, producers int, opts ...crew.Option) {
	p := crew.New(runtime.GOMAXPROCS(0)*4, opts...)
	defer p.Stop()
	benchSubmit(b, producers, func(_ int, task func()) { p.Go(task) }, p.Wait)
}

// BenchmarkQueuedTaskMemory reports the heap cost of a task waiting in the
// queue (B/task): b.N tasks are queued behind a blocked worker.
func BenchmarkQueuedTaskMemory(b *testing.B) {
	p := crew.New(1)
	release := make(chan struct{})
	p.Go(func() { <-release })
	task := func() {}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for range b.N {
		p.Go(task)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "B/task")
	close(release)
	p.Stop()
}

// BenchmarkQueueWait reports how long tasks wait in the queue, from Go to
// the moment they start, on a pool at about half load: one producer submits
// a task every 2µs (yielding while it waits) and each task computes for
// about 1µs, so one worker is busy half the time. p50, p99 and max are in
// microseconds. The collector is off while it runs: each task's closure
// allocates, and on two cores a mark phase takes a whole processor for
// milliseconds, which would measure the collector rather than the queue.
func BenchmarkQueueWait(b *testing.B) {
	p := crew.New(runtime.GOMAXPROCS(0))
	defer p.Stop()
	queueWait(b, func(task func()) { p.Go(task) })
	p.Wait()
}

// BenchmarkQueueWaitChannelPool is BenchmarkQueueWait for the hand-made
// pool, GOMAXPROCS goroutines ranging over a buffered channel, as a
// baseline for what the machine allows: each task wakes a blocked worker.
func BenchmarkQueueWaitChannelPool(b *testing.B) {
	tasks := make(chan func(), 1024)
	var workers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		workers.Go(func() {
			for task := range tasks {
				task()
			}
		})
	}
	defer workers.Wait()
	defer close(tasks)
	queueWait(b, func(task func()) { tasks <- task })
}

// BenchmarkQueueWaitBacklog reports how long tasks wait in the queue, from
// Go to the moment they start, under a steady backlog: 64 workers, each
// task computing for about 1µs, and one producer that keeps 1,024 tasks
// queued or running, submitting one as one finishes. In a FIFO queue every
// task waits about as long as the others; a queue that lets later tasks
// overtake shows it in p99 and max, which are in microseconds. The
// sub-benchmarks are crew and the hand-made channel pool, 64 goroutines
// ranging over a channel buffered for the whole backlog.
func BenchmarkQueueWaitBacklog(b *testing.B) {
	const workers, backlog = 64, 1024
	b.Run("crew", func(b *testing.B) {
		p := crew.New(workers)
		defer p.Stop()
		queueWaitBacklog(b, backlog, func(task func()) { p.Go(task) })
	})
	b.Run("chanpool-buffered", func(b *testing.B) {
		tasks := make(chan func(), backlog)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for task := range tasks {
					task()
				}
			})
		}
		defer wg.Wait()
		defer close(tasks)
		queueWaitBacklog(b, backlog, func(task func()) { tasks <- task })
	})
}

// queueWaitBacklog runs BenchmarkQueueWaitBacklog's load through submit,
// with at most backlog tasks queued or running, and reports the waits.
func queueWaitBacklog(b *testing.B, backlog int, submit func(func())) {
	waits := make([]time.Duration, b.N)
	slots := make(chan struct{}, backlog)
	var done sync.WaitGroup
	done.Add(b.N)
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	b.ResetTimer()
	for i := range b.N {
		slots <- struct{}{}
		start := time.Now()
		submit(func() {
			wait := time.Since(start)
			waits[i] = wait
			for time.Since(start) < wait+time.Microsecond { // the task's work
			}
			<-slots
			done.Done()
		})
	}
	done.Wait()
	b.StopTimer()
	reportWaits(b, waits)
}

// queueWait runs BenchmarkQueueWait's load through submit and reports the
// waits once the last task has started.
func queueWait(b *testing.B, submit func(func())) {
	waits := make([]time.Duration, b.N)
	var started sync.WaitGroup
	started.Add(b.N)
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	b.ResetTimer()
	next := time.Now()
	for i := range b.N {
		for time.Now().Before(next) {
			// Keep the arrival rate steady. A producer that never yields
			// would keep a woken worker waiting in its processor's run queue
			// until preemption; real producers block or yield.
			runtime.Gosched()
		}
		start := time.Now()
		next = start.Add(2 * time.Microsecond)
		submit(func() {
			wait := time.Since(start)
			waits[i] = wait
			started.Done()
			for time.Since(start) < wait+time.Microsecond { // the task's work
			}
		})
	}
	started.Wait()
	b.StopTimer()
	reportWaits(b, waits)
}

// reportWaits reports the median, 99th percentile and largest of waits in
// microseconds.
func reportWaits(b *testing.B, waits []time.Duration) {
	slices.Sort(waits)
	q := func(f float64) float64 { return float64(waits[int(f*float64(len(waits)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(q(1), "max-µs")
}

// BenchmarkSubpool measures the cost per task, from submission to
// completion, of tiny tasks through a Subpool (limit = the pool's workers,
// or 2), next to plain Pool.Go on the same kind of pool, with 1 and 8
// producers.
func BenchmarkSubpool(b *testing.B) {
	workers := runtime.GOMAXPROCS(0) * 4
	for _, producers := range []int{1, 8} {
		b.Run(fmt.Sprintf("pool/producers=%d", producers), func(b *testing.B) { benchGo(b, producers) })
		for _, limit := range []int{workers, 2} {
			b.Run(fmt.Sprintf("subpool/limit=%d/producers=%d", limit, producers), func(b *testing.B) {
				p := crew.New(workers)
				defer p.Stop()
				s := crew.NewSubpool(p, limit)
				benchSubmit(b, producers, func(_ int, task func()) { s.Go(task) }, s.Wait)
			})
		}
	}
}

// BenchmarkWeighted is BenchmarkSubpool for weighted tasks: every fourth
// task takes 4 slots of a limit of 8, the others 1.
func BenchmarkWeighted(b *testing.B) {
	workers := runtime.GOMAXPROCS(0) * 4
	for _, producers := range []int{1, 8} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			p := crew.New(workers)
			defer p.Stop()
			s := crew.NewSubpool(p, 8)
			benchSubmit(b, producers, func(i int, task func()) {
				w := 1
				if i%4 == 0 {
					w = 4
				}
				s.Weighted(w).Go(task)
			}, s.Wait)
		})
	}
}

// BenchmarkCancel measures Task.Cancel: "submit-wait" is Submit and Wait
// of a tiny task on a warm pool; "submit-cancel" submits the task to a
// paused pool and cancels it, so that it never runs; "ctx-done" is
// submit-wait with a task that calls ctx.Done(), which makes the task's
// own context.
func BenchmarkCancel(b *testing.B) {
	nop := func(context.Context) error { return nil }
	b.Run("submit-wait", func(b *testing.B) {
		p := crew.New(4)
		defer p.Stop()
		b.ReportAllocs()
		for b.Loop() {
			p.Submit(nop).Wait()
		}
	})
	b.Run("submit-cancel", func(b *testing.B) {
		p := crew.New(4)
		defer p.Stop()
		p.Pause()
		b.ReportAllocs()
		for b.Loop() {
			t := p.Submit(nop)
			if !t.Cancel() {
				b.Fatal("Cancel of a queued task on a paused pool did not take")
			}
		}
	})
	b.Run("ctx-done", func(b *testing.B) {
		p := crew.New(4)
		defer p.Stop()
		b.ReportAllocs()
		for b.Loop() {
			p.Submit(func(ctx context.Context) error { ctx.Done(); return nil }).Wait()
		}
	})
}

// BenchmarkKeyedLimit measures the cost per task of a Keyed with 16 busy
// keys at the default per-key limit of 1 and at WithKeyLimit(4), tiny
// tasks from 8 producers, on a pool of 4×GOMAXPROCS workers.
func BenchmarkKeyedLimit(b *testing.B) {
	for _, limit := range []int{1, 4} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			p := crew.New(runtime.GOMAXPROCS(0) * 4)
			defer p.Stop()
			k := crew.NewKeyed[int](p, crew.WithKeyLimit(limit))
			benchSubmit(b, 8, func(i int, task func()) { k.Go(i%16, task) }, k.Wait)
		})
	}
}

// benchSubmit submits b.N tiny tasks from the given number of producers
// with submit (which gets the task's index), then waits with wait.
func benchSubmit(b *testing.B, producers int, submit func(i int, task func()), wait func()) {
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
	if int(n.Load()) != b.N {
		b.Fatalf("%d tasks ran, want %d", n.Load(), b.N)
	}
}
