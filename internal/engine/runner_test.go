package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewRunnerGivesEachWorkerItsOwnRunner(t *testing.T) {
	var live, made atomic.Int64
	var mu sync.Mutex
	owners := map[int64]bool{}
	e := New(Config[int64]{
		MaxWorkers:  4,
		QueueSize:   -1,
		IdleTimeout: time.Second,
		NewRunner: func() (func(int64), func()) {
			id := made.Add(1)
			live.Add(1)
			inUse := false // this worker's own state: never shared
			return func(int64) {
					if inUse {
						t.Error("a runner's state was used by two tasks at once")
					}
					inUse = true
					mu.Lock()
					owners[id] = true
					mu.Unlock()
					inUse = false
				}, func() {
					runtime.Gosched() // a slow close must still finish before Exit returns
					live.Add(-1)
				}
		},
	})
	for i := range int64(10000) {
		if err := e.Push(nil, i); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	e.Wait(nil)
	e.Exit()
	if live.Load() != 0 {
		t.Fatalf("%d runners not closed after Exit", live.Load())
	}
	if n := made.Load(); n < 1 || n > 4 || len(owners) > 4 {
		t.Fatalf("%d runners made for 4 workers", n)
	}
}
