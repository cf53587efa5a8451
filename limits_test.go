package crew_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Limits and counts: the worker limit after Resize, and Stats in a quiet
// pool. The worker limit without Resize is covered by
// TestWorkerLimitIsNeverExceeded (pool_test.go), the fuzz test and the
// stress tests.

// absenceWindow is how long a test watches for something that must not
// happen (a task starting beyond the limit). Absence can only be observed
// for a while; the bugs these tests catch show up within microseconds.
const absenceWindow = 100 * time.Millisecond

// After Resize(n), workers beyond n finish their current task and retire:
// no task may start while n or more run. Idle workers beyond n must not
// be woken for new tasks.
func TestResizeShrinkIdleWorkersStartNothingBeyondTheLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(4, crew.WithIdleTimeout(time.Minute))
	var running atomic.Int64
	release := make([]chan struct{}, 4)
	closed := make([]bool, 4)
	free := func(i int) {
		if !closed[i] {
			closed[i] = true
			close(release[i])
		}
	}
	defer func() {
		for i := range release {
			free(i)
		}
		mustReturn(t, trapDeadline, "Stop", p.Stop)
	}()
	for i := range release {
		release[i] = make(chan struct{})
		p.Go(func() { running.Add(1); <-release[i]; running.Add(-1) })
	}
	waitUntil(t, trapDeadline, "four tasks running", func() bool { return running.Load() == 4 })
	free(0)
	free(1)
	waitUntil(t, trapDeadline, "two workers idle", func() bool { s := p.Stats(); return running.Load() == 2 && s.Idle == 2 })
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	hold := make(chan struct{})
	defer close(hold)
	for range 3 {
		p.Go(func() { started.Add(1); <-hold })
	}
	deadline := time.Now().Add(absenceWindow)
	for time.Now().Before(deadline) && started.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	if n := started.Load(); n > 0 {
		t.Fatalf("after Resize(1), with 2 tasks still running, %d new tasks started; stats %+v", n, p.Stats())
	}
	free(2)
	free(3)
	waitUntil(t, trapDeadline, "a new task to start once the old ones end", func() bool { return started.Load() == 1 })
}

// After Resize(1) with two tasks running, the worker whose task ends first
// is beyond the limit: it retires, and starts nothing while the other task
// runs, not even tasks it has already taken from the queue (as a worker
// that took tasks in batches would hold the rest of its batch). held
// counts such tasks, taken but neither queued nor started.
func TestResizeShrinkFinishingWorkerRetires(t *testing.T) {
	leak.Check(t)
	for attempt := range 20 {
		p := crew.New(2, crew.WithIdleTimeout(time.Minute))
		gate := make(chan struct{})
		var gated atomic.Int64
		for range 2 {
			p.Go(func() { gated.Add(1); <-gate })
		}
		waitUntil(t, trapDeadline, "both workers", func() bool { return gated.Load() == 2 })
		const fast, slow = 4000, 200
		var started, running atomic.Int64
		sem := make(chan struct{})
		for range fast {
			p.Go(func() { started.Add(1) })
		}
		for range slow {
			p.Go(func() { started.Add(1); running.Add(1); <-sem; running.Add(-1) })
		}
		close(gate) // the tiny tasks run first, then the slow ones come
		waitUntil(t, trapDeadline, "two slow tasks running", func() bool { return running.Load() == 2 })
		// Both workers are blocked: nothing starts until sem is sent to.
		held := fast + slow - started.Load() - int64(p.Stats().Queued)
		if err := p.Resize(1); err != nil {
			t.Fatal(err)
		}
		before := started.Load()
		sem <- struct{}{} // one slow task ends; the other still runs
		deadline := time.Now().Add(absenceWindow)
		for time.Now().Before(deadline) && started.Load() == before {
			time.Sleep(100 * time.Microsecond)
		}
		n := started.Load() - before
		close(sem)
		mustReturn(t, trapDeadline, "Stop", p.Stop)
		if n > 0 {
			t.Fatalf("attempt %d: after Resize(1), with a task still running, %d more tasks started (%d were held in batches)", attempt, n, held)
		}
		if held > 0 || attempt >= 2 {
			return
		}
	}
}

// Stats in a quiet pool (one task blocked, nothing else moving) must be
// exact: Running at most MaxWorkers, Completed counting every finished task,
// Queued every task that has not started. Workers publish their finished
// tasks to the shared counters in batches, so Stats must not rely on those.
func TestStatsExactInAQuietPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	gate := make(chan struct{})
	var fastRan, holdStarted, gateRan atomic.Int64
	// The queue is not strictly FIFO across its shards: the worker may
	// reach the gate task only after the others, or never.
	p.Go(func() { <-gate; gateRan.Add(1) })
	hold := make(chan struct{})
	defer close(hold)
	const fast, held = 1000, 1000
	for range fast {
		p.Go(func() { fastRan.Add(1) })
	}
	for range held {
		p.Go(func() { holdStarted.Add(1); <-hold })
	}
	close(gate)
	// The only worker blocks in the first task of the second kind it
	// starts; from then on nothing moves.
	waitUntil(t, trapDeadline, "one blocked task", func() bool { return holdStarted.Load() == 1 })
	done := fastRan.Load() + gateRan.Load()
	s := p.Stats()
	if s.Running != 1 {
		t.Errorf("Running = %d with MaxWorkers = %d and one task running", s.Running, s.MaxWorkers)
	}
	if want := uint64(done); s.Completed != want {
		t.Errorf("Completed = %d, %d tasks have finished", s.Completed, want)
	}
	if want := 1 + fast + held - int(done) - 1; s.Queued != want {
		t.Errorf("Queued = %d, %d tasks have not started", s.Queued, want)
	}
	if t.Failed() {
		t.Logf("stats %+v", s)
	}
}

// underPanicNil runs child in a child process of the test binary under
// GODEBUG=panicnil=1 (the behaviour of Go before 1.21, which a program can
// ask for: panic(nil) recovers as nil, as runtime.Goexit does), and fails
// t with the child's output if the child fails.
func underPanicNil(t *testing.T, child func(t *testing.T)) {
	if os.Getenv("CREW_PANICNIL_CHILD") == "1" {
		child(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CREW_PANICNIL_CHILD=1", "GODEBUG=panicnil=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child with GODEBUG=panicnil=1: %v\n%s", err, out)
	}
}

// Under GODEBUG=panicnil=1, a worker that took a panic(nil) for Goexit
// would hand its slot to a new worker and then, as its goroutine does not
// end, keep running uncounted: the limit would no longer hold.
func TestPanicNilUnderGODEBUGKeepsTheLimit(t *testing.T) {
	underPanicNil(t, panicNilChild)
}

func panicNilChild(t *testing.T) {
	leak.Check(t)
	var handled atomic.Int64
	p := crew.New(2, crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1) }))
	for range 10 {
		p.Go(func() { panic(nil) }) //nolint:govet // the point of the test
	}
	mustReturn(t, trapDeadline, "Wait", p.Wait)
	var running, peak atomic.Int64
	hold := make(chan struct{})
	for range 10 {
		p.Go(func() { raisePeak(&peak, running.Add(1)); <-hold; running.Add(-1) })
	}
	waitUntil(t, trapDeadline, "two tasks running", func() bool { return running.Load() >= 2 })
	deadline := time.Now().Add(absenceWindow)
	for time.Now().Before(deadline) && peak.Load() <= 2 {
		runtime.Gosched()
	}
	s := p.Stats()
	close(hold)
	mustReturn(t, trapDeadline, "Stop", p.Stop)
	if peak.Load() > 2 || s.Workers > 2 || s.Idle > s.Workers {
		t.Errorf("after 10 panic(nil): %d tasks ran at once with a limit of 2; stats %+v", peak.Load(), s)
	}
	if n := handled.Load(); n != 10 {
		t.Errorf("the panic handler saw %d of the 10 panic(nil)", n)
	}
}

// Under GODEBUG=panicnil=1, a panic handler that calls runtime.Goexit for
// a call's panic(nil) ends the worker after the call was counted as
// failed: the worker's end must not report it again, as a Goexit of the
// call's own, which would count one call as two failures.
func TestPanicNilHandlerGoexitCountsOneFailure(t *testing.T) {
	underPanicNil(t, func(t *testing.T) {
		leak.Check(t)
		var handled atomic.Int64
		p := crew.NewFunc(1, func(context.Context, int) error { panic(nil) }, //nolint:govet // the point of the test
			crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1); runtime.Goexit() }))
		if err := p.Invoke(1); err != nil {
			t.Fatal(err)
		}
		mustReturn(t, trapDeadline, "Stop", p.Stop)
		if s := p.Stats(); handled.Load() != 1 || s.Failed != 1 || s.Panicked != 1 || s.Completed != 1 {
			t.Errorf("one call's panic(nil), whose handler called Goexit: handler ran %d times, stats %+v; want 1 failed, panicked and completed", handled.Load(), s)
		}
	})
}

// Stats read while Shutdown drops the queue never count a task twice:
// Submitted stays at the tasks accepted, so a counter exported from it
// (crewprom, crewotel) never goes down.
func TestStatsSubmittedDuringShutdownDrop(t *testing.T) {
	leak.Check(t)
	submittedNeverAbove(t, 2000, scaled(100, 4), func(p *crew.Pool, release func()) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		go release()
		p.Shutdown(ctx)
	})
}

// The minimum survives a Resize below it: once the limit grows again, idle
// workers retire down to WithMinWorkers, not to the lowest limit it had:
// Resize must not lower the minimum for good, nor may two Resizes at once
// leave it above the limit.
func TestResizeBelowTheMinimumKeepsIt(t *testing.T) {
	leak.Check(t)
	p := crew.New(4, crew.WithMinWorkers(3), crew.WithIdleTimeout(10*time.Millisecond))
	defer p.Stop()
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, trapDeadline, "workers to retire to the limit", func() bool { return p.Stats().Workers == 1 })
	if err := p.Resize(4); err != nil {
		t.Fatal(err)
	}
	var gate sync.WaitGroup
	gate.Add(4)
	for range 4 {
		p.Go(func() { gate.Done(); gate.Wait() }) // needs four workers at once
	}
	p.Wait()
	waitUntil(t, trapDeadline, "idle workers to retire to the minimum", func() bool { return p.Stats().Workers <= 3 })
	for deadline := time.Now().Add(absenceWindow); time.Now().Before(deadline); {
		if w := p.Stats().Workers; w < 3 {
			t.Fatalf("%d workers after %v idle, want the minimum 3", w, absenceWindow)
		}
	}
}

// After Resize below the minimum and back, the pool starts workers up to
// the minimum again, as New does, rather than staying at the lowest limit
// until a burst comes.
func TestResizeBackAboveTheMinimumRestoresIt(t *testing.T) {
	leak.Check(t)
	p := crew.New(4, crew.WithMinWorkers(4), crew.WithIdleTimeout(10*time.Millisecond))
	defer p.Stop()
	waitUntil(t, trapDeadline, "the 4 minimum workers", func() bool { return p.Stats().Workers == 4 })
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, trapDeadline, "workers to retire to the limit", func() bool { return p.Stats().Workers == 1 })
	if err := p.Resize(4); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, trapDeadline, "the minimum back", func() bool { return p.Stats().Workers == 4 })
}

// A Resize that grows the limit back while the workers beyond the shrunk
// limit retire leaves the pool at its minimum: a retiring worker may have
// read the old limit, and released its slot after Resize counted it as
// live, which would leave the pool below its minimum for good. The race is
// rare, so the test repeats it for 2 s.
func TestResizeBackWhileWorkersRetireKeepsTheMinimum(t *testing.T) {
	leak.Check(t)
	const n = 4
	p := crew.New(n, crew.WithMinWorkers(n))
	defer p.Stop()
	for deadline, round := time.Now().Add(2*time.Second), 0; time.Now().Before(deadline); round++ {
		release := make(chan struct{})
		var started sync.WaitGroup
		started.Add(n)
		for range n {
			p.Go(func() { started.Done(); <-release })
		}
		started.Wait()
		if err := p.Resize(1); err != nil {
			t.Fatal(err)
		}
		close(release) // the workers beyond 1 retire as they finish
		for range round % 50 {
			runtime.Gosched()
		}
		if err := p.Resize(n); err != nil { // races their retirement
			t.Fatal(err)
		}
		p.Wait()
		waitUntil(t, trapDeadline, fmt.Sprintf("the minimum of %d workers after round %d", n, round), func() bool { return p.Stats().Workers >= n })
	}
}

// A task that calls runtime.Goexit ends its worker's goroutine; a pool
// kept at a minimum of workers replaces it even when no task waits, not
// only when unfinished tasks need a worker.
func TestGoexitKeepsTheMinimumWorkers(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithMinWorkers(2), crew.WithIdleTimeout(10*time.Millisecond))
	defer p.Stop()
	waitUntil(t, trapDeadline, "the 2 minimum workers", func() bool { return p.Stats().Workers == 2 })
	p.Go(runtime.Goexit)
	p.Wait()
	waitUntil(t, trapDeadline, "a replacement for the worker that Goexit ended", func() bool { return p.Stats().Workers == 2 })
}

// A WorkerStart hook that ends its goroutine (runtime.Goexit, as
// t.FailNow does) ends the worker before it is ready: the minimum does not
// replace it, or every replacement would end the same way, without end,
// starting thousands of workers within absenceWindow.
func TestGoexitInWorkerStartDoesNotChurnTheMinimum(t *testing.T) {
	leak.Check(t)
	var starts atomic.Int64
	p := crew.New(1, crew.WithMinWorkers(1), crew.WithHooks(crew.Hooks{
		WorkerStart: func(crew.WorkerEvent) {
			starts.Add(1)
			runtime.Goexit()
		},
	}))
	defer p.Stop()
	for deadline := time.Now().Add(absenceWindow); time.Now().Before(deadline) && starts.Load() <= 2; {
		runtime.Gosched()
	}
	if n := starts.Load(); n > 2 {
		t.Errorf("%d workers started, and ended in WorkerStart, in an idle pool of minimum 1", n)
	}
}

// Resize starts workers for the queued tasks that no searching worker
// will take, not one per step up to the new limit: one queued task behind
// a busy worker must not make Resize(1<<20) start thousands of workers.
func TestResizeStartsWorkersForQueuedTasksOnly(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	release := gate(t, p)
	defer release()
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	if err := p.Resize(1 << 20); err != nil {
		t.Fatal(err)
	}
	w := p.Stats().Workers
	recvWithin(t, ran, "the queued task")
	if w > 3 {
		t.Errorf("Resize with one task queued behind one running started %d workers, want 1 or 2", w-1)
	}
}

// A worker that moves a spilled backlog back into its shard's ring counts
// the moved tasks in two places for a moment; Stats must not count them
// twice, or Submitted would run over the tasks accepted, and the
// exporters' submitted counters would go down.
func TestStatsSubmittedWhileABacklogMoves(t *testing.T) {
	leak.Check(t)
	submittedNeverAbove(t, 20000, scaled(20, 4), func(p *crew.Pool, release func()) {
		release()
		p.Wait()
	})
}

// submittedNeverAbove queues n tasks behind a busy worker of a one-worker
// pool and calls finish, which releases the worker, while it watches
// Stats().Submitted: that must never exceed the n+1 tasks accepted. It
// does so rounds times.
func submittedNeverAbove(t *testing.T, n, rounds int, finish func(p *crew.Pool, release func())) {
	t.Helper()
	for round := range rounds {
		p := crew.New(1)
		release := gate(t, p)
		for range n {
			p.Go(func() {})
		}
		stop := make(chan struct{})
		most := make(chan uint64)
		go func() {
			var m uint64
			for {
				select {
				case <-stop:
					most <- m
					return
				default:
				}
				m = max(m, p.Stats().Submitted)
			}
		}()
		finish(p, release)
		close(stop)
		m := <-most
		p.Stop()
		if m > uint64(n+1) {
			t.Fatalf("round %d: Stats().Submitted reached %d with %d tasks accepted", round, m, n+1)
		}
	}
}

// Stats().Running never exceeds the live workers, though producers push
// between its reads: reading the queue before the pushed count would show
// far more tasks running than the pool has workers.
func TestStatsRunningNeverAboveTheWorkers(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				p.Go(func() {})
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for deadline := time.Now().Add(absenceWindow); time.Now().Before(deadline); {
		if s := p.Stats(); s.Running > s.Workers || s.Running > s.MaxWorkers {
			t.Fatalf("Stats = %+v: more running than workers", s)
		}
	}
}
