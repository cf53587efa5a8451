package engine

import (
	"runtime"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// Starting a worker allocates the worker and nothing else: a go statement
// that passed the worker to its goroutine would allocate a closure too,
// once per start (35,000 starts in a run of the sleep 1u-1Mt matrix cell).
func TestWorkerStartAllocatesOnlyTheWorker(t *testing.T) {
	leak.Check(t)
	// Without an idle timeout, each worker retires as soon as it finds no
	// task, so that every push below starts a new one.
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, Run: func(f func()) { f() }})
	defer stop(e)
	ran := make(chan struct{})
	task := func() { ran <- struct{}{} }
	allocs := testing.AllocsPerRun(100, func() {
		if err := e.Push(nil, task); err != nil {
			t.Fatal(err)
		}
		<-ran
		for deadline := time.Now().Add(5 * time.Second); e.Stats().Workers != 0; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("the worker did not retire: %+v", e.Stats())
			}
		}
	})
	if allocs > 1 {
		t.Errorf("%v allocations per worker start, want 1", allocs)
	}
}
