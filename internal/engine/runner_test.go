package engine

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
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

// A worker whose NewRunner calls runtime.Goexit (t.FailNow in a test's
// hook) gives its slot back like one whose task does: the pool starts
// another and runs every task, and Exit returns. A slot kept would count
// as live for ever, and Exit would wait for it.
func TestGoexitInNewRunnerFreesTheWorkerSlot(t *testing.T) {
	leak.Check(t)
	var calls atomic.Int64
	var ran atomic.Int64
	e := New(Config[func()]{
		MaxWorkers:  1,
		QueueSize:   -1,
		IdleTimeout: time.Second,
		NewRunner: func() (func(func()), func()) {
			if calls.Add(1) == 1 {
				runtime.Goexit()
			}
			return func(f func()) { f() }, nil
		},
	})
	pushAndStop(t, e, 10, func() { ran.Add(1) })
	if ran.Load() != 10 {
		t.Errorf("%d of 10 tasks ran", ran.Load())
	}
}

// A slow NewRunner (state that takes long to make: a connection) holds
// back only its own worker: the others start meanwhile, in parallel, up to
// the limit, rather than one per NewRunner call.
func TestSlowNewRunnerDoesNotSerializeWorkerStarts(t *testing.T) {
	leak.Check(t)
	const workers = 8
	var making, most atomic.Int64
	release := make(chan struct{})
	e := New(Config[func()]{
		MaxWorkers:  workers,
		QueueSize:   -1,
		IdleTimeout: time.Second,
		NewRunner: func() (func(func()), func()) {
			n := making.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			making.Add(-1)
			return func(f func()) { f() }, nil
		},
	})
	defer stop(e)
	defer close(release)
	for range 100 {
		if err := e.Push(nil, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); most.Load() < workers; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers made their runners at once, with 100 tasks queued", most.Load(), workers)
		}
	}
}

// A worker that leaves the searchers to run NewRunner wakes another only
// for tasks beyond the one it will take: one task starts one worker, as
// without NewRunner (pools with a name or worker hooks have one).
func TestNewRunnerOneTaskStartsOneWorker(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{
		MaxWorkers:  8,
		QueueSize:   -1,
		IdleTimeout: time.Hour,
		NewRunner:   func() (func(func()), func()) { return func(f func()) { f() }, nil },
	})
	defer stop(e)
	ran := make(chan struct{})
	if err := e.Push(nil, func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	<-ran
	if err := e.Wait(nil); err != nil {
		t.Fatal(err)
	}
	if n := e.Stats().Workers; n != 1 {
		t.Errorf("one task started %d workers, want 1", n)
	}
}

// runtime.Goexit in a worker's done function (a WorkerRetire hook that
// calls t.FailNow) still lets Exit return.
func TestGoexitInRunnerDoneLetsExitReturn(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{
		MaxWorkers:  2,
		QueueSize:   -1,
		IdleTimeout: time.Hour,
		NewRunner: func() (func(func()), func()) {
			return func(f func()) { f() }, runtime.Goexit
		},
	})
	pushAndStop(t, e, 10, func() {})
}

// pushAndStop pushes n copies of task into e, then stops e, failing t if
// that does not return.
func pushAndStop(t *testing.T, e *Engine[func()], n int, task func()) {
	t.Helper()
	for range n {
		if err := e.Push(nil, task); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		stop(e)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("Stop did not return: %+v", e.Stats())
	}
}

// A task waiting for room in its own full engine gives up once every live
// worker is such a task. A worker that retires because Resize shrank the
// engine can make that so, and must tell the waiting task: here the other
// worker, held in NewRunner, retires while the task waits.
func TestRetiringWorkerWakesTasksWaitingForRoom(t *testing.T) {
	leak.Check(t)
	var starts atomic.Int32
	holding, releaseB := make(chan struct{}), make(chan struct{})
	e := New(Config[func()]{
		MaxWorkers:  2,
		QueueSize:   1,
		IdleTimeout: time.Second,
		NewRunner: func() (func(func()), func()) {
			if starts.Add(1) == 2 {
				close(holding)
				<-releaseB
			}
			return func(f func()) { f() }, nil
		},
	})
	defer stop(e)
	fill, running := make(chan struct{}), make(chan struct{})
	pushed := make(chan error, 1)
	mustPush := func(f func()) {
		if err := e.Push(nil, f); err != nil {
			t.Fatal(err)
		}
	}
	mustPush(func() { close(running); <-fill; pushed <- e.Push(nil, func() {}) })
	<-running
	mustPush(func() {}) // queued; starts the second worker, held in NewRunner
	<-holding
	mustPush(func() {}) // the engine is full
	e.Resize(1)
	close(fill) // the task waits for room: one of two live workers
	for deadline := time.Now().Add(10 * time.Second); e.stuck.Load() != 1; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the task never started waiting for room")
		}
	}
	close(releaseB) // the second worker retires, above the limit
	select {
	case err := <-pushed:
		if !errors.Is(err, ErrFull) {
			t.Fatalf("Push from the only worker of a full engine = %v, want ErrFull", err)
		}
	case <-time.After(10 * time.Second):
		e.Resize(2) // let it go, so that the engine can stop
		t.Fatal("the task still waits for room that only it could free")
	}
}
