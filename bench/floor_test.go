package main

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew/bench/subjects"
	"github.com/gocrew/crew/bench/workload"
)

// BenchmarkSleepFloor puts the matrix's sleep 1Mu-1t cell beside its floor:
// the same million users, each running its 10 ms sleep itself, with no
// pool and no second goroutine. Every subject has to start the million
// users and sleep a million times, so none can be much faster than
// "inline"; target 2 of issue 5 asks crew for 1.2x the speed of unbounded
// goroutines, which would put it below that floor (see BENCHMARKS.md).
// Each iteration is one full run. Names: BenchmarkSleepFloor/<subject>.
func BenchmarkSleepFloor(b *testing.B) {
	w := workload.Matrix[len(workload.Matrix)-1].Scale(scale(b))
	benchSleeps(b, w, inline, subjects.Goroutines, subjects.Crew)
}

// benchSleeps runs w's 10 ms sleeps on each subject, one full run per
// iteration, as sub-benchmarks named after the subjects.
func benchSleeps(b *testing.B, w workload.Workload, ss ...subjects.Subject) {
	for _, s := range ss {
		b.Run(s.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Run(w.Users, w.TasksPerUser, w.Limit, workload.Sleep10ms)
			}
		})
	}
}

// BenchmarkSleepOneProducer puts the matrix's sleep 1u-1Mt cell (one
// producer, a million 10 ms sleeps, limit 200,000) beside a reference with
// no pool: the same sleeps run by noPoolGoroutines goroutines in turn, with
// nothing queued or handed over. The runtime's timers and parking take most
// of crew's time here (its CPU profile), so the reference shows how much
// room a pool has left in the cell. pond v1 is there because it is the
// fastest peer in the cell, in some runs only (see BENCHMARKS.md). Each
// iteration is one full run. Names: BenchmarkSleepOneProducer/<subject>.
func BenchmarkSleepOneProducer(b *testing.B) {
	w := workload.Matrix[0].Scale(scale(b))
	b.Run("nopool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sleepWithoutPool(w.Total(), min(noPoolGoroutines, w.Total()))
		}
	})
	benchSleeps(b, w, subjects.Crew, subjects.PondEager, subjects.PondLazy)
}

// noPoolGoroutines is how many goroutines share the reference's sleeps:
// 20 each for a million. In four rounds of an earlier form of the
// reference, 25,000 and 50,000 goroutines took 0.72-0.84 s, 200,000 took
// 0.78-0.89 (more goroutines to start) and 10,000 about 1.2 (100 sleeps
// in turn on each).
const noPoolGoroutines = 50_000

// sleepWithoutPool runs n of the matrix's sleeps on g goroutines, in turn
// on each, and returns when all have ended.
func sleepWithoutPool(n, g int) {
	var wg sync.WaitGroup
	for i := range g {
		share := n / g
		if i < n%g {
			share++
		}
		wg.Go(func() {
			for range share {
				workload.Sleep10ms()
			}
		})
	}
	wg.Wait()
}

// inline runs each task on the goroutine that submits it.
var inline = subjects.Subject{Name: "inline", New: func(_, _ int, task func()) subjects.Pool {
	return inlinePool(task)
}}

type inlinePool func()

func (p inlinePool) Submit()   { p() }
func (p inlinePool) StopWait() {}

// BenchmarkLineHandoff measures how long it takes to move one cache line
// from one processor to another: two goroutines take turns writing one
// word, each spinning until the other has written. ns/op is one hand-off.
// A tiny task passed from a producer to a worker moves at least the line
// that holds it; hand-offs overlap, so this does not bound
// BenchmarkDispatch, but on a shared machine whose hand-offs slow down
// for minutes at a time the one-producer cells follow it (see
// BENCHMARKS.md).
func BenchmarkLineHandoff(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two processors")
	}
	var turn atomic.Int64
	n := int64(b.N)
	done := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(done)
		for v := int64(1); v < n; v += 2 {
			for turn.Load() != v {
			}
			turn.Store(v + 1)
		}
	}()
	for v := int64(0); v < n; v += 2 {
		for turn.Load() != v {
		}
		turn.Store(v + 1)
	}
	<-done
}
