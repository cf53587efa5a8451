package engine

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// Starting a worker allocates the worker and nothing else: a go statement
// that passed the worker to its goroutine would allocate a closure too,
// once per start. With no other worker live, the worker's slab holds only
// it (see enlist).
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

// Workers are allocated a slab at a time, each as large as the live
// workers were: a burst of 512 starts makes at most 32 allocations (slabs
// and the list of live workers), not one per worker.
func TestEnlistAllocatesSlabs(t *testing.T) {
	leak.Check(t)
	e := newFuncEngine(1)
	defer stop(e)
	const workers = 512
	allocs := testing.AllocsPerRun(1, func() {
		for range workers {
			e.enlist()
		}
	})
	e.allMu.Lock()
	all := slices.Clone(e.all)
	e.allMu.Unlock()
	for _, w := range all {
		e.delist(w)
	}
	if allocs > 32 {
		t.Errorf("%v allocations for %d workers, want at most 32", allocs, workers)
	}
}

// A stall check with GOMAXPROCS workers may wake a parked worker, never
// start one. Here the engine has that many workers, all busy, and a
// stand-in worker is listed and unlisted in a loop, as a worker in its
// last look is. A parked-rate wake that fell back to starting a worker
// when the one it saw had left the list would start workers here at the
// parked rate.
func TestWakeStaleAtTheLimitStartsNoWorker(t *testing.T) {
	leak.Check(t)
	limit := int64(runtime.GOMAXPROCS(0))
	e := New(Config[func()]{MaxWorkers: 100_000, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer stop(e)
	defer close(occupy(t, e, limit))

	standIn := &worker[func()]{e: e}
	done := make(chan struct{})
	flickered := make(chan struct{})
	go func() {
		defer close(flickered)
		for {
			select {
			case <-done:
				return
			default:
			}
			e.idleMu.Lock()
			e.idle.push(standIn)
			e.idleMu.Unlock()
			e.idleMu.Lock()
			woken := !standIn.parked
			if !woken {
				e.idle.remove(standIn)
			}
			e.idleMu.Unlock()
			if woken {
				standIn.goAhead.pass() // take the go-ahead back for the next round
			}
		}
	}()
	started := 0
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
		before := e.workers.Load()
		e.wakeStale()
		if e.workers.Load() > before {
			started++
		}
	}
	close(done)
	<-flickered
	if started > 0 {
		t.Errorf("wakeStale with %d busy workers (GOMAXPROCS) started %d more", limit, started)
	}
}

// A stall beside a searcher that does not run, as one that yielded behind
// a million runnable producers, wakes no new worker beyond GOMAXPROCS: the
// processors are busy, and a new worker would wait like the searcher.
func TestStallStartsNoWorkerBeyondGOMAXPROCS(t *testing.T) {
	leak.Check(t)
	procs := int64(runtime.GOMAXPROCS(0))
	e := New(Config[func()]{MaxWorkers: 100_000, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer stop(e)
	release := occupy(t, e, procs)
	e.searching.Add(1) // the searcher that does not run
	// occupy may have started one more worker than it needed, as a
	// searcher that finds work and a push can each start one.
	before := e.workers.Load() & countMask
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); runtime.Gosched() {
		if err := e.Push(nil, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	started := e.workers.Load()&countMask - before
	e.searching.Add(-1)
	close(release)
	if started > 0 {
		t.Errorf("stalls beside a searcher that does not run started %d workers beyond the %d live", started, before)
	}
}

// With nobody to wake (every worker busy at the limit, none parked), a
// push makes no stall look: a look reads lines that workers write, a cost
// that busy producers should not pay. A look that ran would leave the
// shard's read count in checked.
func TestNoStallLookWithNobodyToWake(t *testing.T) {
	leak.Check(t)
	e := busy(t, 2)
	e.searching.Add(1) // a searcher, so that pushes look for stalls rather than wake
	defer e.searching.Add(-1)
	for i := range e.shards {
		e.shards[i].checked.Store(notChecked) // a look would note a read count here
	}
	for range 64 * len(e.shards) {
		if err := e.Push(nil, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e.shards {
		if c := e.shards[i].checked.Load(); c != notChecked {
			t.Errorf("shard %d: a push looked for a stall (checked = %d) with every worker busy at the limit", i, c)
		}
	}
}

// A searcher that does not run (here a stand-in count) is noticed by the
// third push into a shard after the workers stopped taking tasks: that
// push wakes the parked worker. After 2*shards+1 pushes some shard has had
// three. The sooner a stall is noticed, the shorter the wait of the tasks
// queued behind a searcher that does not run.
func TestStallNoticedWithinThreePushesIntoAShard(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MinWorkers: 2, MaxWorkers: 2, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer stop(e)
	defer close(occupy(t, e, 1))
	for deadline := time.Now().Add(5 * time.Second); e.idle.n.Load() != 1; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("the other worker did not park: %+v", e.Stats())
		}
	}
	e.searching.Add(1) // the searcher that does not run
	defer e.searching.Add(-1)
	var ran atomic.Bool
	bound := 2*len(e.shards) + 1
	for pushes := 1; ; pushes++ {
		if err := e.Push(nil, func() { ran.Store(true) }); err != nil {
			t.Fatal(err)
		}
		if e.idle.n.Load() == 0 || ran.Load() {
			return // woken
		}
		if pushes == bound {
			t.Fatalf("the parked worker was not woken in %d pushes over %d shards", pushes, len(e.shards))
		}
	}
}

// busy returns an engine of at most n workers, all running tasks that
// block until the test ends.
func busy(t *testing.T, n int) *Engine[func()] {
	t.Helper()
	e := New(Config[func()]{MaxWorkers: n, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	release := occupy(t, e, int64(n))
	t.Cleanup(func() {
		close(release)
		stop(e)
	})
	return e
}

// occupy runs n tasks on e that block until the returned channel is
// closed, and returns once they all run. It waits for the tasks' own
// signal, not for the engine's counts: a task leaves the queue before its
// worker's last look as a searcher (foundWork), and that look, if it came
// after the caller's next push, could start a worker the caller did not
// ask for.
func occupy(t *testing.T, e *Engine[func()], n int64) chan struct{} {
	t.Helper()
	release := make(chan struct{})
	var running atomic.Int64
	task := func() { running.Add(1); <-release }
	for range n {
		if err := e.Push(nil, task); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); running.Load() != n; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("the %d tasks did not all start: %+v", n, e.Stats())
		}
	}
	return release
}

// A producer does not pace itself by long tasks: a yield at a full ring
// would wait until the worker that takes its processor runs out of tasks
// or is preempted, making an unbounded Push as slow as the tasks. On one
// processor, with short tasks first (so the producer yields), then 1,000
// tasks of 50 µs of processor time each. A producer paced by them would
// make its last push only after most had run; one that stops yielding once
// a long task is timed makes it with a few ringfuls run. The test fails if
// more than half have run.
func TestLongTasksDoNotPaceTheProducer(t *testing.T) {
	leak.Check(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, IdleTimeout: time.Second, Run: func(f func()) { f() }})
	defer stop(e)
	push := func(n int, task func()) {
		for range n {
			if err := e.Push(nil, task); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := func() {
		if err := e.Wait(nil); err != nil {
			t.Fatal(err)
		}
	}
	push(2*timeEvery, func() {})
	wait()
	if e.longTasks.Load() {
		t.Fatal("empty tasks timed as long")
	}
	const tasks = 1000
	var ran atomic.Int64
	push(tasks, func() {
		for began := time.Now(); time.Since(began) < 50*time.Microsecond; {
		}
		ran.Add(1)
	})
	if n := ran.Load(); n > tasks/2 {
		t.Errorf("%d of %d tasks of 50 µs had run when the last Push returned: the producer waited for them", n, tasks)
	}
	wait()
	if !e.longTasks.Load() {
		t.Error("tasks of 50 µs not timed as long")
	}
	// Short tasks again: one task in timeLongEvery is timed while tasks
	// are long, so that many short ones end the long-task mode.
	push(timeLongEvery, func() {})
	wait()
	if e.longTasks.Load() {
		t.Errorf("%d empty tasks after long ones did not end the long-task mode", timeLongEvery)
	}
}

// At the worker limit a producer that finds its ring full yields before
// it spills on few processors only: on more, runtime.Gosched costs more
// than the spill (see yieldBeforeSpill).
func TestProducersYieldOnFewProcessorsOnly(t *testing.T) {
	leak.Check(t)
	for _, procs := range []int{1, yieldProcs, yieldProcs + 1, 16} {
		prev := runtime.GOMAXPROCS(procs)
		e := New(Config[func()]{MaxWorkers: 1, MinWorkers: 1, QueueSize: -1, IdleTimeout: time.Second, Run: func(f func()) { f() }})
		runtime.GOMAXPROCS(prev)
		if got, want := e.yieldBeforeSpill(), procs <= yieldProcs; got != want {
			t.Errorf("engine made on %d processors, at its worker limit: yieldBeforeSpill() = %v, want %v", procs, got, want)
		}
		stop(e)
	}
}

// Workers of a closed engine retire as they find the queue empty, rather
// than park until Exit wakes them: parked, each would hold a sudog, one
// allocation per worker of a pool stopped behind a backlog. The tasks
// still all run.
func TestClosedEngineWorkersRetireWithoutParking(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 8, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer stop(e)
	release := occupy(t, e, 8)
	var ran atomic.Int64
	for range 1000 {
		if err := e.Push(nil, func() { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	close(release)
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Workers != 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("the closed engine's workers did not retire: %+v", e.Stats())
		}
	}
	if s := e.Stats(); ran.Load() != 1000 || s.Unfinished != 0 || s.Idle != 0 {
		t.Errorf("%d of 1000 tasks ran; Stats %+v", ran.Load(), s)
	}
}

// A closed engine whose one queued task sits in a cell that a producer has
// claimed and not yet filled starts no worker for it: its workers park for
// the producer's wake. Workers that left instead would each start the
// next, a churn of starts for as long as the cell stays unfilled.
func TestClosedEngineStartsNoWorkerForAClaimedCell(t *testing.T) {
	leak.Check(t)
	var starts atomic.Int64
	e := New(Config[func()]{MaxWorkers: 4, QueueSize: -1, IdleTimeout: time.Hour,
		NewRunner: func() (func(func()), func()) {
			starts.Add(1)
			return func(f func()) { f() }, nil
		}})
	defer stop(e)
	if err := e.Push(nil, func() {}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to park", func() bool { return e.Stats().Idle == 1 })
	fill := claimCell(t, e)
	e.Close()
	before := starts.Load()
	time.Sleep(50 * time.Millisecond) // a window for starts that must not come
	started := starts.Load() - before
	var ran atomic.Bool
	fill(func() { ran.Store(true) })
	waitFor(t, "the claimed task to run", ran.Load)
	if started > 1 {
		t.Errorf("%d workers started in 50 ms for one claimed cell of a closed engine", started)
	}
}

// A closed engine keeps no minimum: once its workers have retired, neither
// the reaper nor a Resize starts new ones. A reaper armed before Close
// that kept the minimum would start workers that run the user's NewRunner
// only to retire at once.
func TestClosedEngineKeepsNoMinimum(t *testing.T) {
	leak.Check(t)
	var starts atomic.Int64
	const idle = 20 * time.Millisecond
	e := New(Config[func()]{MaxWorkers: 4, MinWorkers: 2, QueueSize: -1, IdleTimeout: idle,
		NewRunner: func() (func(func()), func()) {
			starts.Add(1)
			return func(f func()) { f() }, nil
		}})
	defer stop(e)
	close(occupy(t, e, 4))
	waitFor(t, "the workers to park", func() bool { return e.Stats().Idle == 4 }) // the reaper is armed
	e.Close()
	waitFor(t, "the workers to retire", func() bool { return e.Stats().Workers == 0 })
	before := starts.Load()
	e.Resize(3)
	time.Sleep(5 * idle) // a window for the reaper's starts that must not come
	if n := starts.Load() - before; n != 0 {
		t.Errorf("the closed engine started %d workers after all had retired", n)
	}
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Workers of a closed engine that parked while a claimed cell was still
// unfilled all retire once one of them has taken that task, without Exit:
// a pool stopped from inside its own task may never call Exit, and the
// idle timeout may be long.
func TestClosedEngineParkedWorkersRetireOnceTheQueueEmpties(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 4, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer stop(e)
	close(occupy(t, e, 4))
	waitFor(t, "the workers to park", func() bool { return e.Stats().Idle == 4 })
	fill := claimCell(t, e)
	e.Close() // wakes the four; each finds the claimed cell counted and parks again
	waitFor(t, "the workers to park again", func() bool { return e.Stats().Idle == 4 })
	var ran atomic.Bool
	fill(func() { ran.Store(true) })
	waitFor(t, "the task to run and every worker to retire", func() bool { return ran.Load() && e.Stats().Workers == 0 })
}

// Producers push tiny tasks, spilling beyond the rings, until one of the
// tasks closes the engine from inside: every accepted task runs, and every
// worker retires without Exit, whatever the idle timeout and minimum.
func TestClosedFromInsideWithABacklogLeavesNoWorker(t *testing.T) {
	leak.Check(t)
	for round := range 200 {
		idle := time.Hour
		if round%2 == 1 {
			idle = 20 * time.Millisecond
		}
		var e *Engine[func()]
		e = New(Config[func()]{MaxWorkers: 4 + round%5, MinWorkers: round % 3, QueueSize: -1, IdleTimeout: idle, Run: func(f func()) { f() }})
		var pushed atomic.Int64
		closeAt := int64(200 + round*13%2000)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					f := func() {}
					if pushed.Add(1) == closeAt {
						f = e.Close
					}
					if e.Push(nil, f) != nil {
						return
					}
				}
			})
		}
		wg.Wait()
		waitFor(t, "the tasks to finish and the workers to retire", func() bool {
			s := e.Stats()
			return s.Unfinished == 0 && s.Workers == 0
		})
		e.Exit()
	}
}

// claimCell claims the next cell of e's first ring as a producer's
// pushRing does, and returns the rest of that push: fill the cell with a
// task and wake a worker, as enqueue does.
func claimCell(t *testing.T, e *Engine[func()]) (fill func(func())) {
	t.Helper()
	s := &e.shards[0]
	n := s.written.Load()
	if !s.written.CompareAndSwap(n, n+1) {
		t.Fatal("no producer should have pushed meanwhile")
	}
	return func(task func()) {
		c := &s.ring[n%ringSize]
		c.t = task
		c.seq.Store(n + 1)
		if e.searching.Load() == 0 {
			e.wake()
		}
	}
}

// Concurrent Resize calls leave the capacity of a bounded engine at the
// limit that the last of them stored, plus the queue. Resize stores the
// two one after the other, so calls must not interleave (resizeMu):
// interleaved, they would leave the limit and the capacity from different
// calls, and the engine would admit more tasks than its limit and queue
// allow, or fewer.
func TestConcurrentResizeKeepsTheCapacityInStep(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: 0, Run: func(f func()) { f() }})
	defer func() { e.Close(); e.Wait(nil); e.Exit() }()
	for round := range 20000 {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 10 {
					e.Resize(1 + (g+i)%8)
					if i%3 == 0 {
						runtime.Gosched()
					}
				}
			})
		}
		wg.Wait()
		if limit, c := e.maxWorkers.Load(), e.capacity.Load(); c != limit {
			t.Fatalf("round %d: limit %d, capacity %d with a queue of 0", round, limit, c)
		}
	}
}

// PushPast queues past a full bound: the task runs, TryPush is still
// refused while the engine holds more than its capacity, room comes back
// only once the tasks over the bound have finished, and a closed engine
// refuses PushPast too.
func TestPushPastGoesBeyondTheBound(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: 0, Run: func(f func()) { f() }})
	defer func() { e.Close(); e.Wait(nil); e.Exit() }()
	gate, held := make(chan struct{}), make(chan struct{})
	if err := e.TryPush(func() { close(held); <-gate }); err != nil {
		t.Fatal(err)
	}
	<-held
	if err := e.TryPush(func() {}); err != ErrFull {
		t.Fatalf("TryPush on a full engine = %v, want ErrFull", err)
	}
	ran := make(chan struct{})
	if err := e.PushPast(func() { close(ran) }); err != nil {
		t.Fatalf("PushPast on a full engine = %v", err)
	}
	if got := e.admitted.Load(); got != 2 {
		t.Fatalf("admitted = %d after PushPast, want 2 (capacity 1)", got)
	}
	if err := e.TryPush(func() {}); err != ErrFull {
		t.Fatalf("TryPush past the bound = %v, want ErrFull", err)
	}
	close(gate)
	<-ran
	if err := e.Wait(nil); err != nil {
		t.Fatal(err)
	}
	if got := e.admitted.Load(); got != 0 {
		t.Fatalf("admitted = %d once idle, want 0", got)
	}
	if err := e.TryPush(func() {}); err != nil {
		t.Fatalf("TryPush once idle = %v", err)
	}
	e.Close()
	if err := e.PushPast(func() {}); err != ErrStopped {
		t.Fatalf("PushPast on a closed engine = %v, want ErrStopped", err)
	}
}
