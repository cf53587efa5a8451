package crew_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
	"github.com/gocrew/crew/internal/stress"
)

// Stress tests: many producers, concurrent Resize, Wait and Stats, and a
// Stop or Shutdown in the middle of the flood, checked task by task.
//
// They run for a bounded time: by default about 2 s each (under -race as
// well), longer with CREW_STRESS=long (30 s each), not at all with -short or
// CREW_STRESS=off. Without -race a round pushes 2,000,000 tasks from 2,000
// producers; under -race, which makes each task 10-20 times slower, a round
// pushes 200,000 from 1,000 producers. Run with -v to see the counts:
//
//	go test -run Stress -count=1 -v .            # millions, no race detector
//	go test -race -run Stress -count=1 -v .      # what CI runs with the suite
//	CREW_STRESS=long go test -run Stress -count=1 -v .

// stressScale returns the tasks per round and producers per round.
func stressScale() (tasks, producers int) {
	if raceDetectorOn {
		return 200_000, 1_000
	}
	return 2_000_000, 2_000
}

type stressCounts struct {
	rounds, accepted, ran, dropped, refused, resizes, waits, stats int64
}

func (c stressCounts) String() string {
	return fmt.Sprintf("%d rounds: %d tasks accepted, %d ran, %d dropped, %d refused; %d Resize, %d Wait, %d Stats calls",
		c.rounds, c.accepted, c.ran, c.dropped, c.refused, c.resizes, c.waits, c.stats)
}

// stressRound is one pool's life: producers flood it while a resizer, a
// waiter and a stats reader run beside them; when half of the tasks are
// accepted, the pool is stopped (Stop, or Shutdown with a deadline short
// enough to drop some). Every task is checked: run once or dropped, never
// run when refused, never more than the highest limit running at once.
type stressRound struct {
	t        *testing.T
	p        *crew.Pool
	noSubmit bool  // use Go instead of Submit (see submitRacesShutdown)
	limit    int64 // the highest limit the resizer sets
	tasks    int   // submissions to attempt
	runs     []atomic.Uint32
	next     atomic.Int64 // next task id
	accepted atomic.Int64
	refused  atomic.Int64
	running  atomic.Int64
	peak     atomic.Int64
	failed   atomic.Bool // stop the round early: a check failed
	mu       sync.Mutex
	subs     []stressSubmit // Submit tasks, checked at the end
}

type stressSubmit struct {
	id   int64
	task *crew.Task
}

var errStressTask = errors.New("stress: task error")

func (r *stressRound) body(id int64) error {
	if n := r.runs[id].Add(1); n != 1 && !r.failed.Swap(true) {
		r.t.Errorf("task %d ran %d times", id, n)
	}
	n := r.running.Add(1)
	if n > r.limit && !r.failed.Swap(true) {
		r.t.Errorf("%d tasks running at once, the limit was never above %d", n, r.limit)
	}
	raisePeak(&r.peak, n)
	defer r.running.Add(-1)
	switch id % 97 {
	case 0:
		runtime.Gosched()
	case 1:
		return errStressTask
	}
	return nil
}

// produce submits tasks until the quota is used or the pool stops.
func (r *stressRound) produce(rng *rand.Rand) {
	for !r.failed.Load() {
		id := r.next.Add(1) - 1
		if id >= int64(r.tasks) {
			return
		}
		var err error
		switch k := rng.IntN(100); {
		case k < 85 && (k < 80 || r.noSubmit):
			err = r.p.Go(func() { r.body(id) })
		case k < 85:
			task := r.p.Submit(func(context.Context) error { return r.body(id) })
			r.mu.Lock()
			r.subs = append(r.subs, stressSubmit{id, task})
			r.mu.Unlock()
			select {
			case <-task.Done():
				if e := task.Wait(); e == crew.ErrStopped || e == crew.ErrQueueFull {
					err = e
				}
			default:
			}
		case k < 95:
			if !r.p.TryGo(func() { r.body(id) }) {
				err = crew.ErrQueueFull // or stopped: either way refused
			}
		default:
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			err = r.p.GoContext(ctx, func() { r.body(id) })
			cancel()
		}
		switch {
		case err == nil:
			r.accepted.Add(1)
		case err == crew.ErrStopped:
			r.refused.Add(1)
			return
		case err == crew.ErrQueueFull, errors.Is(err, context.DeadlineExceeded):
			r.refused.Add(1)
		default:
			if !r.failed.Swap(true) {
				r.t.Errorf("submission failed with %v", err)
			}
			return
		}
	}
}

// runStressRound runs one round on a pool built with opts and adds its
// counts to c.
func runStressRound(t *testing.T, c *stressCounts, limit, tasks, producers int, shutdown bool, opts ...crew.Option) {
	var handled atomic.Int64
	opts = append(opts, crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1) }))
	r := &stressRound{t: t, p: crew.New(limit, opts...), limit: int64(limit), tasks: tasks, runs: make([]atomic.Uint32, tasks)}
	r.noSubmit = shutdown && !submitRacesShutdown()
	p := r.p
	var wg sync.WaitGroup
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(rand.New(rand.NewPCG(uint64(i), 42)))
		}()
	}
	// Beside the producers: a resizer, a waiter and a stats reader.
	quit := make(chan struct{})
	var side sync.WaitGroup
	var resizes, waits, stats atomic.Int64
	side.Add(3)
	go func() {
		defer side.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-quit:
				return
			default:
			}
			if err := p.Resize(1 + rng.IntN(limit)); err != nil && err != crew.ErrStopped {
				t.Errorf("Resize = %v", err)
			}
			resizes.Add(1)
			time.Sleep(50 * time.Microsecond)
		}
	}()
	go func() {
		defer side.Done()
		for {
			select {
			case <-quit:
				return
			default:
			}
			p.Wait() // returns at an idle moment, or once the pool has stopped
			waits.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	go func() {
		defer side.Done()
		for {
			select {
			case <-quit:
				return
			default:
			}
			s := p.Stats()
			stats.Add(1)
			if s.Submitted < s.Completed+s.Dropped || s.Workers > limit || s.MaxWorkers < 1 || s.MaxWorkers > limit {
				if !r.failed.Swap(true) {
					t.Errorf("inconsistent stats while running: %+v", s)
				}
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()

	// Stop in the middle of the flood.
	waitUntil(t, time.Minute, "half of the tasks to be accepted", func() bool {
		return r.failed.Load() || r.accepted.Load()+r.refused.Load() >= int64(tasks/2)
	})
	var dropped int64
	if shutdown {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		var err error
		mustReturn(t, time.Minute, "Shutdown", func() { err = p.Shutdown(ctx) })
		cancel()
		var se *crew.ShutdownError
		if errors.As(err, &se) {
			dropped = int64(se.Dropped)
		} else if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	} else {
		mustReturn(t, time.Minute, "Stop", p.Stop)
	}
	if s := p.Stats(); s.Workers != 0 {
		t.Errorf("%d workers after the pool stopped", s.Workers)
	}
	mustReturn(t, time.Minute, "the producers", wg.Wait)
	close(quit)
	mustReturn(t, time.Minute, "the resizer, waiter and stats reader", side.Wait)

	// Every task, one by one.
	var ran int64
	for id := range r.next.Load() {
		if id >= int64(tasks) {
			break
		}
		switch r.runs[id].Load() {
		case 0:
		case 1:
			ran++
		default:
			t.Fatalf("task %d ran %d times", id, r.runs[id].Load())
		}
	}
	s := p.Stats()
	if got := int64(s.Dropped); got != dropped {
		t.Errorf("Stats.Dropped = %d, Shutdown reported %d", got, dropped)
	}
	if lost := r.accepted.Load() - ran - dropped; lost != 0 {
		t.Errorf("%d accepted, %d ran, %d dropped: %d lost", r.accepted.Load(), ran, dropped, lost)
	}
	if s.Submitted != uint64(r.accepted.Load()) || s.Completed != uint64(ran) || s.Queued != 0 || s.Running != 0 {
		t.Errorf("stats after the pool stopped: %+v; accepted %d, ran %d", s, r.accepted.Load(), ran)
	}
	droppedSubmits := 0
	for _, sub := range r.subs {
		var err error
		select {
		case <-sub.task.Done():
			err = sub.task.Wait()
		default:
			t.Fatalf("Submit task %d not done after the pool stopped", sub.id)
		}
		runs := r.runs[sub.id].Load()
		switch err {
		case crew.ErrStopped, crew.ErrQueueFull:
			if runs != 0 {
				t.Fatalf("Submit task %d refused with %v, but ran", sub.id, err)
			}
		case crew.ErrDropped:
			droppedSubmits++
			if runs != 0 {
				t.Fatalf("Submit task %d dropped, but ran", sub.id)
			}
		case nil, errStressTask:
			if runs != 1 {
				t.Fatalf("Submit task %d completed with %v, but ran %d times", sub.id, err, runs)
			}
			if want := error(nil); sub.id%97 == 1 && err != errStressTask || sub.id%97 != 1 && err != want {
				t.Fatalf("Submit task %d completed with %v", sub.id, err)
			}
		default:
			t.Fatalf("Submit task %d completed with %v", sub.id, err)
		}
	}
	if int64(droppedSubmits) > dropped {
		t.Errorf("%d Submit tasks report ErrDropped, Shutdown reported %d", droppedSubmits, dropped)
	}
	if r.peak.Load() > int64(limit) {
		t.Errorf("peak %d tasks running with limits up to %d", r.peak.Load(), limit)
	}
	if handled.Load() != 0 {
		t.Errorf("%d panics reported, no task panics", handled.Load())
	}
	c.rounds++
	c.accepted += r.accepted.Load()
	c.ran += ran
	c.dropped += dropped
	c.refused += r.refused.Load()
	c.resizes += resizes.Load()
	c.waits += waits.Load()
	c.stats += stats.Load()
}

// Millions of tasks (without -race) from thousands of producers, with
// concurrent Resize, Wait and Stats, and a Shutdown or a Stop mid-flight.
func TestStressProducersResizeShutdown(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	tasks, producers := stressScale()
	var c stressCounts
	start := time.Now()
	for round := 0; round == 0 || time.Since(start) < budget; round++ {
		runStressRound(t, &c, 64, tasks, producers, round%2 == 0)
		if t.Failed() {
			break
		}
	}
	t.Logf("unbounded queue, limit 1-64, %d producers: %v in %v", producers, c, time.Since(start).Round(time.Millisecond))
}

// The same with a bounded queue, where producers block for room (Go,
// Submit), give up (GoContext with a deadline) or are refused (TryGo),
// and Stop or Shutdown must release every blocked producer.
func TestStressBoundedQueueBlockedProducers(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	tasks, producers := stressScale()
	tasks /= 4 // producers spend most of their time blocked
	var c stressCounts
	start := time.Now()
	for round := 0; round == 0 || time.Since(start) < budget; round++ {
		runStressRound(t, &c, 16, tasks, producers, round%2 == 1, crew.WithQueueSize(64))
		if t.Failed() {
			break
		}
	}
	t.Logf("queue of 64, limit 1-16, %d producers: %v in %v", producers, c, time.Since(start).Round(time.Millisecond))
}

// A non-blocking pool: nothing waits, ErrQueueFull is frequent.
func TestStressNonBlocking(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	tasks, producers := stressScale()
	tasks /= 4
	var c stressCounts
	start := time.Now()
	for round := 0; round == 0 || time.Since(start) < budget; round++ {
		runStressRound(t, &c, 8, tasks, producers/4, round%2 == 0, crew.WithQueueSize(256), crew.WithNonBlocking())
		if t.Failed() {
			break
		}
	}
	t.Logf("non-blocking queue of 256, limit 1-8, %d producers: %v in %v", producers/4, c, time.Since(start).Round(time.Millisecond))
}

// Pools created and stopped in a loop with work in flight and short idle
// timeouts: workers are started, parked, retired and told to exit over and
// over. No goroutine may survive and no task may be lost.
func TestStressPoolLifecycle(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	start := time.Now()
	pools, tasks := 0, 0
	for time.Since(start) < budget {
		rng := rand.New(rand.NewPCG(uint64(pools), 1))
		limit := 1 + rng.IntN(32)
		opts := []crew.Option{crew.WithIdleTimeout(time.Duration(1+rng.IntN(500)) * time.Microsecond)}
		if rng.IntN(2) == 0 {
			opts = append(opts, crew.WithMinWorkers(rng.IntN(limit+1)))
		}
		p := crew.New(limit, opts...)
		var ran atomic.Int64
		n := rng.IntN(2000)
		for i := range n {
			if err := p.Go(func() { ran.Add(1) }); err != nil {
				t.Fatal(err)
			}
			if i%300 == 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) // let workers park and retire
			}
		}
		// Half the pools stop straight after the last push, while
		// workers park (see TestTrapStopWhileWorkersPark).
		if rng.IntN(2) == 0 {
			mustReturn(t, 10*time.Second, "Wait", p.Wait)
		}
		mustReturn(t, 10*time.Second, "Stop", p.Stop)
		if ran.Load() != int64(n) {
			t.Fatalf("pool %d: %d of %d tasks ran", pools, ran.Load(), n)
		}
		if s := p.Stats(); s.Workers != 0 {
			t.Fatalf("pool %d: %d workers after Stop", pools, s.Workers)
		}
		pools++
		tasks += n
	}
	t.Logf("%d pools, %d tasks", pools, tasks)
}
