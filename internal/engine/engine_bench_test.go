package engine

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newFuncEngine(max int) *Engine[func()] {
	return New(Config[func()]{MaxWorkers: max, QueueSize: -1, IdleTimeout: time.Second, Run: func(f func()) { f() }})
}

func stop(e *Engine[func()]) {
	e.Close()
	e.Wait(nil)
	e.Exit()
}

func BenchmarkPush(b *testing.B) {
	for _, workers := range []int{2, 1000, 200000} {
		for _, producers := range []int{1, 100} {
			b.Run(fmt.Sprintf("workers=%d/producers=%d", workers, producers), func(b *testing.B) {
				e := newFuncEngine(workers)
				var n atomic.Int64
				task := func() { n.Add(1) }
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for p := range producers {
					k := b.N / producers
					if p < b.N%producers {
						k++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range k {
							e.Push(nil, task)
						}
					}()
				}
				wg.Wait()
				e.Wait(nil)
				b.StopTimer()
				if n.Load() != int64(b.N) {
					b.Fatalf("ran %d of %d", n.Load(), b.N)
				}
				if testing.Verbose() {
					b.Logf("N=%d stats=%+v", b.N, e.Stats())
				}
				stop(e)
			})
		}
	}
}

// BenchmarkShards measures the engine's queue alone, the floor under
// BenchmarkPush with one producer: the producer pushes b.N tiny tasks into
// the shards that Push would pick, and one goroutine takes them as a
// worker does and runs them, spinning while the shards are empty. There is
// no searching, waking or looking for stalls.
func BenchmarkShards(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two processors: the taker spins")
	}
	e := newFuncEngine(1) // for its shards and pick: it starts no worker here
	shards, mask := e.shards, e.mask
	var n atomic.Int64
	task := func() { n.Add(1) }
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		defer close(done)
		for home, ran := uint32(0), 0; ran < b.N; {
			if t, ok := shards[home&mask].pop(false); ok {
				t()
				ran++
				continue
			}
			home++
		}
	}()
	for range b.N {
		for shards[e.pick()&mask].pushRing(task)&^closedBit == 0 {
			runtime.Gosched() // the ring is full: let the taker run
		}
	}
	<-done
	b.StopTimer()
	if n.Load() != int64(b.N) {
		b.Fatalf("ran %d of %d", n.Load(), b.N)
	}
}

// BenchmarkCallerIs measures the stack walk behind InWorker, from a task
// of a pool at the depth a caller of Wait has.
func BenchmarkCallerIs(b *testing.B) {
	id := NewID()
	RunAs(id, Func(func() {
		for b.Loop() {
			if !CallerIs(id) {
				b.Fatal("CallerIs is false inside RunAs")
			}
		}
	}))
}
