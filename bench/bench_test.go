package main

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew/bench/subjects"
	"github.com/gocrew/crew/bench/workload"
)

// scale is the factor in $CREW_BENCH_SCALE (1 when unset).
func scale(b *testing.B) float64 {
	f, err := workload.ScaleFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkMatrix runs pond's matrix and the service workloads: each
// iteration is one full run (create the pool, submit every task from every
// user, wait, tear down). Names: BenchmarkMatrix/<task>/<workload>/<subject>.
func BenchmarkMatrix(b *testing.B) {
	for _, task := range workload.Tasks {
		if task.Name == "cpu" {
			continue // BenchmarkCPU
		}
		b.Run(task.Name, func(b *testing.B) {
			for _, w := range task.Workloads {
				b.Run(w.Name, func(b *testing.B) { benchRuns(b, w, task.Fn) })
			}
		})
	}
}

// BenchmarkCPU runs the CPU-bound workload: 100,000 sha256 tasks from one
// user on 1,000 workers. Names: BenchmarkCPU/<subject>.
func BenchmarkCPU(b *testing.B) { benchRuns(b, workload.CPU, workload.SHA256) }

// benchRuns measures one full run of w per iteration, for every subject.
// As the program does (see measureAll and measure), the runtime's
// goroutine descriptors are made before any subject runs, each subject
// starts from a collected heap, and the goroutines a pool leaves behind
// exit before the next subject: else whoever runs first, or next, pays.
func benchRuns(b *testing.B, w workload.Workload, task func()) {
	w = w.Scale(scale(b))
	if w.Fn != nil {
		task = w.Fn
	}
	warmGoroutines(w.Users + w.Limit)
	for _, s := range subjects.All() {
		b.Run(s.Name, func(b *testing.B) {
			runtime.GC()
			defer settle(runtime.NumGoroutine())
			b.ReportAllocs()
			for b.Loop() {
				s.RunPaced(w.Users, w.TasksPerUser, w.Limit, w.Burst, w.Gap, task)
			}
		})
	}
}

// BenchmarkDispatch measures the cost per task of handing tiny tasks (one
// atomic add) to a warm pool: b.N tasks in total, split across the producers.
// Pool creation and teardown are outside the timer; waiting until all b.N
// tasks have run is inside. ns/op is ns per task.
// Names: BenchmarkDispatch/workers=<n>/producers=<n>/<subject>.
func BenchmarkDispatch(b *testing.B) {
	for _, workers := range []int{2, 1000, 200_000} {
		for _, producers := range []int{1, 100} {
			for _, s := range subjects.All() {
				name := fmt.Sprintf("workers=%d/producers=%d/%s", workers, producers, s.Name)
				b.Run(name, func(b *testing.B) {
					benchDispatch(b, s, workers, producers)
				})
			}
		}
	}
}

func benchDispatch(b *testing.B, s subjects.Subject, workers, producers int) {
	// Start from a collected heap, and let the workers this pool leaves
	// behind exit before the next subject: otherwise the next subject, in
	// the same order every cell, pays for this one's garbage and exits.
	runtime.GC()
	defer settle(runtime.NumGoroutine())
	var ran atomic.Int64
	done := make(chan struct{})
	total := int64(b.N)
	p := s.New(workers, b.N, func() {
		if ran.Add(1) == total {
			close(done)
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range producers {
		n := b.N / producers
		if i < b.N%producers {
			n++
		}
		go func() {
			for range n {
				p.Submit()
			}
		}()
	}
	<-done
	b.StopTimer()
	p.StopWait()
}
