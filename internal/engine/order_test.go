package engine

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// starts records the order in which tasks start.
type starts struct {
	mu    sync.Mutex
	order []int
}

func (s *starts) task(i int) func() {
	return func() {
		s.mu.Lock()
		s.order = append(s.order, i)
		s.mu.Unlock()
	}
}

// passedBy returns, for the worst task, how many tasks pushed after it (a
// higher number) started before it.
func (s *starts) passedBy() (most, task int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, i := range s.order {
		n := 0
		for _, j := range s.order[:k] {
			if j > i {
				n++
			}
		}
		if n > most {
			most, task = n, i
		}
	}
	return most, task
}

// pushFrom pushes each tasks from each of producers goroutines at once,
// numbered p*each+i for producer p's i-th, and returns once all are
// pushed.
func pushFrom(t *testing.T, e *Engine[func()], producers, each int) *starts {
	var s starts
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if err := e.Push(nil, s.task(p*each+i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	return &s
}

// pushYielding pushes 2000 tasks from one goroutine, numbered in order,
// yielding its processor after every every-th, and stops e.
func pushYielding(t *testing.T, e *Engine[func()], every int) *starts {
	var s starts
	for i := range 2000 {
		if err := e.Push(nil, s.task(i)); err != nil {
			t.Fatal(err)
		}
		if i%every == 0 {
			runtime.Gosched()
		}
	}
	stop(e)
	return &s
}

func TestSmallEnginesHaveOneShard(t *testing.T) {
	for _, workers := range []int{1, 2, 8, 2*shardWorkers - 1} {
		if n := shardCount(workers); n != 1 {
			t.Errorf("shardCount(%d) = %d, want 1", workers, n)
		}
	}
	procs := runtime.GOMAXPROCS(0)
	if n := shardCount(1 << 20); n < 2*procs || n >= 4*procs {
		t.Errorf("shardCount(1<<20) = %d at GOMAXPROCS=%d, want twice GOMAXPROCS rounded up to a power of two", n, procs)
	}
}

// With one worker, one producer's tasks start in the order they were
// pushed, while the worker runs, parks and is woken: a single shard is a
// FIFO through its ring and its spill queue.
func TestOneWorkerKeepsOneProducersOrder(t *testing.T) {
	leak.Check(t)
	for round := range 20 {
		e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, Run: func(f func()) { f() }})
		s := pushYielding(t, e, round+1)
		if most, task := s.passedBy(); most != 0 {
			t.Fatalf("round %d: task %d started after %d tasks pushed after it", round, task, most)
		}
	}
}

// With one worker and several producers, each producer's tasks start in
// the order it pushed them, within the ring and beyond it: the ring is a
// FIFO in the order producers claim its cells, and a worker takes no
// spilled task while a cell before it is still being filled.
func TestOneWorkerKeepsEachProducersOrder(t *testing.T) {
	leak.Check(t)
	const producers, each = 8, ringSize
	for range 200 {
		e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, Run: func(f func()) { f() }})
		release := make(chan struct{})
		if err := e.Push(nil, func() { <-release }); err != nil {
			t.Fatal(err)
		}
		s := pushFrom(t, e, producers, each)
		close(release)
		stop(e)
		last := make([]int, producers)
		for p := range last {
			last[p] = -1
		}
		for _, i := range s.order {
			p := i / each
			if i <= last[p] {
				t.Fatalf("producer %d: task %d started after its task %d", p, i%each, last[p]%each)
			}
			last[p] = i
		}
	}
}

// A worker takes one task from each shard in turn, the turn one producer
// fills them in: a backlog that one producer left in several shards is
// taken in the order it was pushed, not a shard at a time.
func TestBacklogOverShardsTakenInOrder(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 1 << 10, QueueSize: -1, Run: func(f func()) { f() }})
	defer stop(e)
	if len(e.shards) < 2 {
		t.Skip("one shard at GOMAXPROCS=1")
	}
	e.Resize(1)
	var s starts
	running, release := make(chan struct{}), make(chan struct{})
	if err := e.Push(nil, func() { close(running); <-release }); err != nil {
		t.Fatal(err)
	}
	<-running
	const backlog = 100 * ringSize
	for i := range backlog {
		if err := e.Push(nil, s.task(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := e.Wait(nil); err != nil {
		t.Fatal(err)
	}
	if most, task := s.passedBy(); most != 0 {
		t.Fatalf("task %d of a backlog over %d shards started after %d tasks pushed after it", task, len(e.shards), most)
	}
}

// While one producer and one worker race over several shards, a task is
// passed by at most a few later tasks per shard: a worker that finds a
// shard momentarily empty (a cell claimed and not yet filled) takes the
// next shard's task and comes back within one turn over the shards.
func TestRaceOverShardsPassesATaskByFew(t *testing.T) {
	leak.Check(t)
	for round := range 20 {
		e := New(Config[func()]{MaxWorkers: 1 << 10, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
		e.Resize(1)
		s := pushYielding(t, e, round+1)
		if most, task := s.passedBy(); most > 2*len(e.shards) {
			t.Fatalf("round %d: task %d started after %d tasks pushed after it, over %d shards", round, task, most, len(e.shards))
		}
	}
}

// With several producers racing one worker over several shards, each
// producer's tasks are taken in turn from the shards, as a single
// producer's are; the shards' backlogs differ by the producers' offsets,
// so a task is passed by a few more of its producer's later tasks per
// shard. A producer that loses its processor between claiming a ring cell
// and filling it holds that shard's later tasks back while the worker
// takes the other shards' (see doc.go): a run in which that happens for
// long may exceed the bound, so the test fails only when three runs in a
// row do.
func TestManyProducersOverShardsKeepTheirOrderClosely(t *testing.T) {
	leak.Check(t)
	const producers, each = 8, 500
	var worst string
	for range 3 {
		e := New(Config[func()]{MaxWorkers: 1 << 10, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
		e.Resize(1)
		s := pushFrom(t, e, producers, each)
		stop(e)
		byProducer := make([]starts, producers)
		for _, i := range s.order {
			byProducer[i/each].order = append(byProducer[i/each].order, i)
		}
		worst = ""
		for p := range byProducer {
			if most, task := byProducer[p].passedBy(); most > 8*len(e.shards) {
				worst = fmt.Sprintf("producer %d: its task %d started after %d of its later tasks, over %d shards", p, task%each, most, len(e.shards))
			}
		}
		if worst == "" {
			return
		}
	}
	t.Errorf("in three runs in a row, %s", worst)
}
