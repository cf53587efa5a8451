package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
	"github.com/gocrew/crew/internal/stress"
)

// Engine-level stress tests: they drive an Engine directly and check its
// internal counters (searching, admitted, the worker count, the idle list)
// while it runs and once it has stopped. Bounded in time like the pool's
// stress tests (see stress.Budget), and skipped with -short.

// stWithin runs f and fails the test with a goroutine dump if it does not
// return within d.
func stWithin(t *testing.T, d time.Duration, what string, f func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not return within %v; goroutines:\n\n%s", what, d, leak.Dump())
		return false
	}
}

type stTask struct {
	id   int64
	kind int // 0 plain, 1 panic, 2 Goexit, 3 yield
}

// stRound is one engine's life under load.
type stRound struct {
	t         *testing.T
	e         *Engine[stTask]
	runs      []atomic.Uint32
	limitHigh atomic.Int64
	running   atomic.Int64
	bounded   bool
	queue     int
	goexit    bool
	failed    atomic.Bool
	panics    atomic.Int64
	goexits   atomic.Int64
	drops     atomic.Int64
}

func (r *stRound) fail(format string, args ...any) {
	if !r.failed.Swap(true) {
		r.t.Errorf(format, args...)
	}
}

func (r *stRound) run(t stTask) {
	if n := r.runs[t.id].Add(1); n != 1 {
		r.fail("task %d ran %d times", t.id, n)
	}
	n := r.running.Add(1)
	defer r.running.Add(-1)
	if lim := r.limitHigh.Load(); n > lim {
		r.fail("%d tasks running, the limit was never above %d", n, lim)
	}
	switch t.kind {
	case 1:
		panic("stress")
	case 2:
		runtime.Goexit()
	case 3:
		runtime.Gosched()
	}
}

// check samples the engine's internal counters while it runs.
func (r *stRound) check() {
	e := r.e
	if s := e.searching.Load(); s < 0 {
		r.fail("searching = %d", s)
	}
	if w := e.workers.Load() & countMask; w > r.limitHigh.Load() {
		r.fail("%d workers, the limit was never above %d", w, r.limitHigh.Load())
	}
	if n := e.idle.n.Load(); n < 0 {
		r.fail("idle list length %d", n)
	}
	if r.bounded {
		// Resize may lower the capacity below what is already admitted,
		// so only the sign is checked.
		if a := e.admitted.Load(); a < 0 {
			r.fail("admitted = %d", a)
		}
	}
	if e.unfinished() < 0 {
		r.fail("unfinished = %d", e.unfinished())
	}
	if e.queued() < 0 {
		r.fail("queued = %d", e.queued())
	}
}

// stRunRound pushes tasks from producers while resizing, then stops the
// engine mid-flight with Close and either Wait or Drain, and checks that
// every accepted task ran once or was dropped, and that the engine's
// counters came back to rest.
func stRunRound(t *testing.T, seed uint64, tasks, producers, limit, queue int, goexit, drain bool) (accepted, ran, dropped int64) {
	r := &stRound{t: t, runs: make([]atomic.Uint32, tasks), bounded: queue >= 0, queue: queue, goexit: goexit}
	r.limitHigh.Store(int64(limit))
	r.e = New(Config[stTask]{
		MaxWorkers:  limit,
		MinWorkers:  limit / 4,
		QueueSize:   queue,
		IdleTimeout: 200 * time.Microsecond,
		Run:         r.run,
		OnPanic: func(t stTask, v any, stack []byte) {
			if t.kind != 1 || v != "stress" || len(stack) == 0 {
				r.fail("OnPanic(%+v, %v)", t, v)
			}
			r.panics.Add(1)
		},
		OnGoexit: func(t stTask) {
			if t.kind != 2 {
				r.fail("OnGoexit(%+v)", t)
			}
			r.goexits.Add(1)
		},
		Drop: func(t stTask) {
			if r.runs[t.id].Load() != 0 {
				r.fail("task %d dropped after it ran", t.id)
			}
			r.drops.Add(1)
		},
	})
	e := r.e
	var next, acc atomic.Int64
	var wg sync.WaitGroup
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for !r.failed.Load() {
				id := next.Add(1) - 1
				if id >= int64(tasks) {
					return
				}
				task := stTask{id: id}
				switch k := rng.IntN(1000); {
				case k < 5:
					task.kind = 1
				case k < 8 && goexit:
					task.kind = 2
				case k < 50:
					task.kind = 3
				}
				var err error
				if rng.IntN(4) == 0 {
					err = e.TryPush(task)
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					err = e.Push(ctx, task)
					cancel()
				}
				switch {
				case err == nil:
					acc.Add(1)
				case err == ErrStopped:
					return
				case err == ErrFull, errors.Is(err, context.DeadlineExceeded):
				default:
					r.fail("push: %v", err)
					return
				}
			}
		}()
	}
	quit := make(chan struct{})
	var side sync.WaitGroup
	side.Add(2)
	go func() { // resizer
		defer side.Done()
		rng := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-quit:
				return
			default:
			}
			n := 1 + rng.IntN(limit)
			e.Resize(n)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	go func() { // monitor
		defer side.Done()
		for {
			select {
			case <-quit:
				return
			default:
			}
			r.check()
			time.Sleep(10 * time.Microsecond)
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for acc.Load() < int64(tasks/2) && next.Load() < int64(tasks) && !r.failed.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("no progress: %+v", e.Stats())
		}
		time.Sleep(100 * time.Microsecond)
	}
	e.Close()
	if drain {
		e.Drain()
	}
	if !stWithin(t, 30*time.Second, "Wait after Close", func() { e.Wait(nil) }) {
		t.Fatalf("stats %+v", e.Stats())
	}
	stWithin(t, 30*time.Second, "Exit", e.Exit)
	stWithin(t, 30*time.Second, "producers", wg.Wait)
	close(quit)
	side.Wait()

	for id := range min(next.Load(), int64(tasks)) {
		switch r.runs[id].Load() {
		case 0:
		case 1:
			ran++
		default:
			t.Fatalf("task %d ran %d times", id, r.runs[id].Load())
		}
	}
	accepted, dropped = acc.Load(), int64(e.dropped.Load())
	if ran+dropped != accepted {
		t.Errorf("accepted %d, ran %d, dropped %d", accepted, ran, dropped)
	}
	if r.drops.Load() != dropped {
		t.Errorf("Drop called %d times, dropped %d", r.drops.Load(), dropped)
	}
	if e.unfinished() != 0 || e.queued() != 0 {
		t.Errorf("after Exit: unfinished %d, queued %d", e.unfinished(), e.queued())
	}
	if w := e.workers.Load(); w != exitBit {
		t.Errorf("after Exit: workers word %#x, want exitBit alone", w)
	}
	if s := e.searching.Load(); s != 0 {
		t.Errorf("after Exit: searching = %d", s)
	}
	if n := e.idle.n.Load(); n != 0 {
		t.Errorf("after Exit: %d workers on the idle list", n)
	}
	if r.bounded && e.admitted.Load() != 0 {
		t.Errorf("after Exit: admitted = %d", e.admitted.Load())
	}
	if got := e.completed.Load(); got != uint64(ran) {
		t.Errorf("completed = %d, %d ran", got, ran)
	}
	if p := e.panicked.Load(); p != uint64(r.panics.Load()) {
		t.Errorf("panicked = %d, OnPanic saw %d", p, r.panics.Load())
	}
	return accepted, ran, dropped
}

func TestEngineStress(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	tasks, producers := 500_000, 500
	if stRaceEnabled {
		tasks, producers = 50_000, 200
	}
	goexit := true
	var rounds, accepted, ran, dropped int64
	start := time.Now()
	for round := uint64(0); round == 0 || time.Since(start) < budget; round++ {
		queue := -1
		switch round % 3 {
		case 1:
			queue = 0
		case 2:
			queue = 64
		}
		a, rn, d := stRunRound(t, round, tasks, producers, 32, queue, goexit, round%2 == 1)
		rounds++
		accepted += a
		ran += rn
		dropped += d
		if t.Failed() {
			break
		}
	}
	t.Logf("%d rounds: %d tasks accepted, %d ran, %d dropped in %v", rounds, accepted, ran, dropped, time.Since(start).Round(time.Millisecond))
}

// Tasks that wait for tasks queued after them need a worker each, all at
// once: a chain of links, each blocked until the next has run, among many
// tiny tasks from several producers. Every link must find a worker below
// the limit, whatever the parking and spilling in between; a missed wake
// leaves the chain stuck with nobody searching. Such a miss is rare, so
// the test runs as many rounds as its time allows.
func TestEngineStressChainedTasks(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	const links, producers, filler = 60, 4, 50
	start := time.Now()
	rounds := 0
	for ; rounds == 0 || time.Since(start) < budget; rounds++ {
		idle := []time.Duration{0, 100 * time.Microsecond}[rounds%2]
		e := New(Config[func()]{MaxWorkers: links + producers, QueueSize: -1, IdleTimeout: idle, Run: func(f func()) { f() }})
		var ran [links + 1]chan struct{}
		for i := range ran {
			ran[i] = make(chan struct{})
		}
		close(ran[links])
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := p; i < links; i += producers {
					e.Push(nil, func() { <-ran[i+1]; close(ran[i]) })
					for range filler {
						e.Push(nil, func() {})
					}
				}
			})
		}
		wg.Wait()
		ok := stWithin(t, 10*time.Second, "the chain", func() { <-ran[0] })
		if !ok {
			t.Fatalf("round %d, idle timeout %v: chain stuck; stats %+v", rounds, idle, e.Stats())
		}
		stop(e)
	}
	t.Logf("%d rounds in %v", rounds, time.Since(start).Round(time.Millisecond))
}

// A worker's last look at the queues before it parks must not skip a shard
// whose lock is busy: if the holder will not wake anyone (Close, which locks
// every shard in turn at the start of Stop, or a worker that then retires),
// a task the parking worker was meant to find stays queued with everybody
// asleep, and Wait and Stop hang. The test holds a shard's lock while the
// only worker parks.
func TestEngineParkLooksAtBusyShards(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	defer func() {
		e.Close()
		if stWithin(t, 5*time.Second, "Wait", func() { e.Wait(nil) }) {
			e.Exit()
		}
	}()
	hold, running := make(chan struct{}), make(chan struct{})
	e.Push(nil, func() { close(running); <-hold })
	<-running
	// A task accepted earlier, while the worker counted as a searcher (so
	// its producer woke nobody), in a shard whose spill queue is now locked.
	ran := make(chan struct{})
	s := &e.shards[0]
	s.mu.Lock()
	s.q.Push(func() { close(ran) })
	s.spilled.Add(1)
	s.spilling.Store(true)
	close(hold)
	// The worker finishes its task and searches: asleep in park had it
	// skipped the busy shard, or waiting for the shard's lock.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := leak.Dump()
		if strings.Contains(d, "[sync.Cond.Wait") && strings.Contains(d, ").park(") ||
			strings.Contains(d, "[sync.Mutex.Lock") && strings.Contains(d, ").popBehindRing(") {
			break
		}
		if time.Now().After(deadline) {
			s.mu.Unlock()
			t.Fatalf("the worker did not park; goroutines:\n\n%s", d)
		}
		time.Sleep(100 * time.Microsecond)
	}
	s.mu.Unlock()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatalf("the task in the busy shard was never run: the worker parked without it; stats %+v", e.Stats())
	}
}

// Stats().Queued must never be negative. The shard length is read without
// a lock, each count after the one subtracted from it (see shard.len):
// read the other way, a push and a pop between the two reads would make it
// wrap around.
func TestEngineQueuedNeverNegative(t *testing.T) {
	leak.Check(t)
	// More threads than cores, so that the operating system deschedules
	// readers at any instruction, between the two loads among others.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	// A short queue keeps the shards nearly empty, so that pops soon
	// overtake the pushes a descheduled reader saw.
	e := New(Config[func()]{MaxWorkers: 4, QueueSize: 2, IdleTimeout: time.Second, Run: func(f func()) { f() }})
	defer func() { e.Close(); e.Wait(nil); e.Exit() }()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
				e.Push(nil, func() {})
			}
		}()
	}
	defer func() { close(quit); wg.Wait() }()
	// Several readers, so that the scheduler preempts some of them between
	// the two loads.
	var negative atomic.Int64
	var reads atomic.Int64
	var readers sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for time.Now().Before(deadline) && negative.Load() == 0 {
				for range 1000 {
					if q := e.Stats().Queued; q < 0 {
						negative.Store(q)
					}
				}
				reads.Add(1000)
			}
		}()
	}
	readers.Wait()
	if q := negative.Load(); q < 0 {
		t.Fatalf("Stats().Queued = %d (after at most %d reads)", q, reads.Load())
	}
	t.Logf("%d reads, none negative", reads.Load())
}

// A worker whose last look before parking finds a task passes on the wake
// that a producer may have spent on it. Here the look takes x, pushed
// while the worker still counted as a searcher (so it woke nobody); y's
// producer then found no searcher and woke the listed worker. x waits for
// y, and only a second worker can run y: a worker that kept the wake for
// itself would leave the pool stuck below its limit.
func TestEngineLastLookPassesTheWakeOn(t *testing.T) {
	leak.Check(t)
	e := New(Config[func()]{MaxWorkers: 2, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	yRan := make(chan struct{})
	var closeY, listed sync.Once
	ranY := func() { closeY.Do(func() { close(yRan) }) }
	e.testListed = func(home uint32) {
		listed.Do(func() {
			if _, r := e.shards[home&e.mask].push(func() { <-yRan }); r != accepted {
				t.Errorf("pushing x: %v", r)
			}
			e.Push(nil, ranY)
		})
	}
	e.Push(nil, func() {}) // starts the worker, which then parks
	select {
	case <-yRan:
	case <-time.After(5 * time.Second):
		t.Errorf("y never ran: the worker's last look took x and woke nobody for y; stats %+v", e.Stats())
		ranY() // let x finish, so that the engine can stop
	}
	stop(e)
}

// Stats.Idle counts a parked worker only once it is past its last look at
// the queues. Until then it may take a task without a wake-up, and so
// without checking a limit that Resize has just lowered: a caller that
// counted it idle, shrank the pool and submitted tasks could see more
// tasks running than the new limit.
func TestEngineIdleCountsWorkersPastTheirLastLook(t *testing.T) {
	leak.Check(t)
	e := newFuncEngine(1)
	defer stop(e)
	duringLook := make(chan int, 1)
	e.testListed = func(uint32) {
		select {
		case duringLook <- e.Stats().Idle:
		default:
		}
	}
	e.Push(nil, func() {})
	if idle := <-duringLook; idle != 0 {
		t.Errorf("Stats().Idle = %d while the only worker takes its last look, want 0", idle)
	}
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Idle != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the parked worker never counted as idle: %+v", e.Stats())
		}
		runtime.Gosched()
	}
}
