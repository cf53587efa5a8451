package crew_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Stopping a pool while producers flood its layers: every task a layer
// accepted runs exactly once or is counted dropped, every Task completes,
// every layer's Wait returns and no key is left. Run for each layer, with
// Stop and with Shutdown (whose short deadline drops tasks), on a plain
// and on a bounded non-blocking pool.
func TestLayersStopWhileSubmitting(t *testing.T) {
	type layer struct {
		name   string
		make   func(p *crew.Pool) (goFn func(i int, f func()) error, submit func(i int, f func(context.Context) error) *crew.Task, wait func(), stats func() crew.LayerStats)
		pooled bool // Pool.Stop runs every accepted task
	}
	layers := []layer{
		{"Keyed", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			k := crew.NewKeyed[int](p)
			return func(i int, f func()) error { return k.Go(i%13, f) },
				func(i int, f func(context.Context) error) *crew.Task { return k.Submit(i%13, f) }, k.Wait, k.Stats
		}, true},
		{"KeyedRate", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			k := crew.NewKeyed[int](p, crew.WithKeyRate(crew.Rate{Limit: 1, Per: 20 * time.Microsecond, Burst: 4}))
			return func(i int, f func()) error { return k.Go(i%13, f) },
				func(i int, f func(context.Context) error) *crew.Task { return k.Submit(i%13, f) }, k.Wait, k.Stats
		}, false},
		{"KeyedLimit", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			k := crew.NewKeyed[int](p, crew.WithKeyLimit(3))
			return func(i int, f func()) error { return k.Go(i%13, f) },
				func(i int, f func(context.Context) error) *crew.Task { return k.Submit(i%13, f) }, k.Wait, k.Stats
		}, false}, // a key's only step, waiting for room in a full queue as Stop begins, is refused: its tasks are dropped (see Keyed.Go)
		{"KeyedLimitRate", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			k := crew.NewKeyed[int](p, crew.WithKeyLimit(2), crew.WithKeyRate(crew.Rate{Limit: 1, Per: 20 * time.Microsecond, Burst: 4}))
			return func(i int, f func()) error { return k.Go(i%13, f) },
				func(i int, f func(context.Context) error) *crew.Task { return k.Submit(i%13, f) }, k.Wait, k.Stats
		}, false},
		{"Priority", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			q := crew.NewPriority(p, crew.WithAging(time.Microsecond))
			return func(i int, f func()) error { return q.Go(i%5, f) },
				func(i int, f func(context.Context) error) *crew.Task { return q.Submit(i%5, f) }, q.Wait, q.Stats
		}, false}, // a Go racing with Stop may leave a task without a step (see Priority.Go)
		{"RateLimited", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: 10 * time.Microsecond, Burst: 8})
			return func(_ int, f func()) error { return rl.Go(f) },
				func(_ int, f func(context.Context) error) *crew.Task { return rl.Submit(f) }, rl.Wait, rl.Stats
		}, false},
		{"KeyedOnRateLimited", func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats) {
			rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: 10 * time.Microsecond, Burst: 8})
			k := crew.NewKeyed[int](rl)
			return func(i int, f func()) error { return k.Go(i%13, f) },
				func(i int, f func(context.Context) error) *crew.Task { return k.Submit(i%13, f) },
				func() { k.Wait(); rl.Wait() }, k.Stats
		}, false},
	}
	for _, l := range layers {
		for _, shutdown := range []bool{false, true} {
			for _, nonBlocking := range []bool{false, true} {
				name := fmt.Sprintf("%s/shutdown=%v/nonblocking=%v", l.name, shutdown, nonBlocking)
				t.Run(name, func(t *testing.T) {
					leak.Check(t)
					for range scaled(6, 3) {
						stopWhileSubmitting(t, l.make, shutdown, nonBlocking, l.pooled)
					}
				})
			}
		}
	}
}

func stopWhileSubmitting(t *testing.T,
	mk func(p *crew.Pool) (func(int, func()) error, func(int, func(context.Context) error) *crew.Task, func(), func() crew.LayerStats),
	shutdown, nonBlocking, pooled bool) {
	t.Helper()
	var opts []crew.Option
	if nonBlocking {
		opts = append(opts, crew.WithQueueSize(4), crew.WithNonBlocking())
	}
	p := crew.New(3, opts...)
	goFn, submit, wait, stats := mk(p)
	n := scaled(400, 4)
	runs := make([]atomic.Int32, 4*n)
	var accepted atomic.Int64
	var tasks sync.Map // id -> *crew.Task
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range n {
				id := g*n + i
				if i%4 == 0 {
					task := submit(id, func(context.Context) error { runs[id].Add(1); return nil })
					tasks.Store(id, task)
					continue
				}
				if err := goFn(id, func() { runs[id].Add(1) }); err == nil {
					accepted.Add(1)
				}
			}
		})
	}
	if shutdown {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Microsecond)
		defer cancel()
		within(t, schedDeadline, "Pool.Shutdown", func() { p.Shutdown(ctx) })
	} else {
		within(t, schedDeadline, "Pool.Stop", p.Stop)
	}
	wg.Wait()
	within(t, schedDeadline, "the layer's Wait", wait)
	var ranGo, dropped int64
	tasks.Range(func(k, v any) bool {
		id, task := k.(int), v.(*crew.Task)
		var err error
		within(t, schedDeadline, "Task.Wait", func() { err = task.Wait() })
		switch {
		case err == nil && runs[id].Load() == 1:
		case err == crew.ErrDropped && runs[id].Load() == 0:
			dropped++
		case (err == crew.ErrStopped || err == crew.ErrQueueFull) && runs[id].Load() == 0:
		default:
			t.Fatalf("Task %d: %v after %d runs", id, err, runs[id].Load())
		}
		runs[id].Store(0)
		return true
	})
	for id := range runs {
		switch runs[id].Load() {
		case 0:
		case 1:
			ranGo++
		default:
			t.Fatalf("task %d ran %d times", id, runs[id].Load())
		}
	}
	s := stats()
	// Go tasks that ran or were dropped are the accepted ones; a Go that
	// raced with the stop may have been counted dropped and still returned
	// its error, so dropped may exceed the difference.
	if ranGo+int64(s.Dropped)-dropped < accepted.Load() {
		t.Fatalf("%d Go tasks accepted, %d ran, %d dropped", accepted.Load(), ranGo, int64(s.Dropped)-dropped)
	}
	if pooled && !shutdown && s.Dropped != 0 {
		t.Fatalf("Stop dropped %d tasks", s.Dropped)
	}
	if s.Unfinished != 0 || s.Waiting != 0 {
		t.Fatalf("Stats after the stop = %+v", s)
	}
	// Idle keys whose bucket refills go when the layer learns of the stop
	// (on the pool context's goroutine) or when their bucket is full.
	waitFor(t, "no key left", func() bool { return stats().Keys == 0 })
}

// A Keyed or Priority built on a RateLimited learns when the RateLimited
// drops its step as the pool stops (the step waited for a token): it drops
// the task behind the step, so a plain task that waits for the layer while
// Stop runs returns, and so does Stop.
func TestLayerOnRateLimitedLearnsOfDroppedSteps(t *testing.T) {
	layers := map[string]func(rl *crew.RateLimited) (goFn func(func()) error, wait func(), stats func() crew.LayerStats){
		"Keyed": func(rl *crew.RateLimited) (func(func()) error, func(), func() crew.LayerStats) {
			k := crew.NewKeyed[string](rl)
			return func(f func()) error { return k.Go("a", f) }, k.Wait, k.Stats
		},
		"Priority": func(rl *crew.RateLimited) (func(func()) error, func(), func() crew.LayerStats) {
			q := crew.NewPriority(rl)
			return func(f func()) error { return q.Go(0, f) }, q.Wait, q.Stats
		},
	}
	for name, mk := range layers {
		t.Run(name, func(t *testing.T) {
			leak.Check(t)
			p := crew.New(2)
			// The only token goes to the first task; the next is due in
			// 200ms, long after Stop has closed the pool.
			rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: 200 * time.Millisecond})
			goFn, wait, stats := mk(rl)
			if err := rl.Go(func() {}); err != nil {
				t.Fatal(err)
			}
			var ran atomic.Bool
			if err := goFn(func() { ran.Store(true) }); err != nil {
				t.Fatal(err)
			}
			waited := make(chan struct{})
			p.Go(func() { wait(); close(waited) })
			within(t, schedDeadline, "Pool.Stop", p.Stop)
			recvWithin(t, waited, "the layer's Wait in a plain task")
			if ran.Load() {
				t.Fatal("the task ran after its step was dropped")
			}
			if s := stats(); s.Dropped != 1 || s.Unfinished != 0 {
				t.Fatalf("layer stats %+v, want 1 dropped and none unfinished", s)
			}
		})
	}
}

// The same with two steps of one Priority dropped at once: the first drop
// leaves its task to a step that is still pending, and the second must
// then drop both.
func TestPriorityOnRateLimitedLearnsOfTwoDroppedSteps(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: 200 * time.Millisecond})
	q := crew.NewPriority(rl)
	if err := rl.Go(func() {}); err != nil { // takes the only token
		t.Fatal(err)
	}
	var ran atomic.Int32
	for prio := range 2 {
		if err := q.Go(prio, func() { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan struct{})
	p.Go(func() { q.Wait(); close(waited) })
	within(t, schedDeadline, "Pool.Stop", p.Stop)
	recvWithin(t, waited, "Priority.Wait in a plain task")
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tasks ran after their steps were dropped", n)
	}
	if s := q.Stats(); s.Dropped != 2 || s.Unfinished != 0 {
		t.Fatalf("Priority stats %+v, want 2 dropped and none unfinished", s)
	}
}

// Once Shutdown's deadline has passed, a keyed step whose task returns
// while the pool's queue is being dropped drops the key's next task
// instead of running it itself, as it would during Stop: the pool must
// say it is giving up before the drop, not after it. The Drop hook, which
// the drop calls, holds that moment open.
func TestKeyedShutdownDropsWhatADrainingStepLeaves(t *testing.T) {
	leak.Check(t)
	releaseA, aStarted, bStarted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	p := poolHeldInDrain(releaseA, bStarted)
	k := crew.NewKeyed[int](p)
	if err := k.Go(1, func() { close(aStarted); <-releaseA }); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, aStarted, "A to start")
	var ranB atomic.Bool
	if err := k.Go(1, func() { ranB.Store(true); close(bStarted) }); err != nil {
		t.Fatal(err)
	}
	if err := p.Go(func() {}); err != nil { // queued behind A, for the drop
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	var se *crew.ShutdownError
	if err := p.Shutdown(ctx); !errors.As(err, &se) {
		t.Fatalf("Shutdown = %v, want a *ShutdownError", err)
	}
	k.Wait()
	if ranB.Load() {
		t.Fatal("B started after Shutdown's deadline had passed")
	}
	if s := k.Stats(); s.Dropped != 1 {
		t.Fatalf("Keyed stats %+v, want B dropped", s)
	}
}

// When Stop or Shutdown returns, the layers have dropped what the pool
// will never run: the dropped Tasks are done and counted, not dropped
// later by a layer that learns of the end on a goroutine of its own. A
// RateLimited's task waiting for a token is dropped by Stop; a keyed task
// whose step Shutdown's deadline drops, by Shutdown.
func TestLayersHaveDroppedWhenStopReturns(t *testing.T) {
	leak.Check(t)
	done := func(task *crew.Task) bool {
		select {
		case <-task.Done():
			return true
		default:
			return false
		}
	}
	for i := range 50 {
		p := crew.New(1)
		r := crew.NewRateLimited(p, crew.Rate{Limit: 1, Per: time.Hour})
		if err := r.Go(func() {}); err != nil { // takes the only token
			t.Fatal(err)
		}
		task := r.Submit(func(context.Context) error { return nil }) // waits an hour
		p.Stop()
		if !done(task) || r.Stats().Dropped != 1 {
			t.Fatalf("round %d: RateLimited after Stop: task done %v, stats %+v", i, done(task), r.Stats())
		}
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("round %d: task = %v, want ErrDropped", i, err)
		}
	}
	for i := range 100 {
		p := crew.New(1)
		k := crew.NewKeyed[int](p)
		release := gate(t, p)
		task := k.Submit(1, func(context.Context) error { return nil }) // its step waits behind the gate
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		shutdown := make(chan error)
		go func() { shutdown <- p.Shutdown(ctx) }()
		waitUntil(t, trapDeadline, "Shutdown to drop the step", func() bool { return p.Stats().Queued == 0 })
		release()
		<-shutdown
		if !done(task) || k.Stats().Dropped != 1 {
			t.Fatalf("round %d: Keyed after Shutdown: task done %v, stats %+v", i, done(task), k.Stats())
		}
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("round %d: task = %v, want ErrDropped", i, err)
		}
	}
}

// Nor when a layer's own timer finds the pool stopped while Stop waits for
// a running task, and drops the waiting tasks itself: Stop returns once
// they are dropped, not as soon as the layer's response to the pool's end
// has found nothing left to drop. The next token comes due 300 ms after
// the first task, once Stop has closed the pool and while it waits for the
// gate; the drop of many tasks takes long enough to be seen.
func TestLayersTimerDropsFinishBeforeStopReturns(t *testing.T) {
	leak.Check(t)
	n := scaled(50000, 5)
	rate := crew.Rate{Limit: 1, Per: 300 * time.Millisecond}
	for _, c := range []struct {
		name string
		make func(p *crew.Pool) (goFn func(func()) error, submit func(func(context.Context) error) *crew.Task, stats func() crew.LayerStats, wait func())
	}{
		{"RateLimited", func(p *crew.Pool) (func(func()) error, func(func(context.Context) error) *crew.Task, func() crew.LayerStats, func()) {
			r := crew.NewRateLimited(p, rate)
			return r.Go, r.Submit, r.Stats, r.Wait
		}},
		{"Keyed WithKeyRate", func(p *crew.Pool) (func(func()) error, func(func(context.Context) error) *crew.Task, func() crew.LayerStats, func()) {
			k := crew.NewKeyed[int](p, crew.WithKeyRate(rate))
			return func(f func()) error { return k.Go(1, f) },
				func(f func(context.Context) error) *crew.Task { return k.Submit(1, f) }, k.Stats, k.Wait
		}},
	} {
		p := crew.New(1)
		goFn, submit, stats, wait := c.make(p)
		ran := make(chan struct{})
		if err := goFn(func() { close(ran) }); err != nil { // takes the token
			t.Fatal(err)
		}
		recvWithin(t, ran, c.name+": the first task")
		var runs atomic.Int64 // none should run, but counted all the same
		tasks := make([]*crew.Task, n)
		for i := range tasks {
			tasks[i] = submit(func(context.Context) error { runs.Add(1); return nil })
		}
		release := gate(t, p) // Stop waits for it while the token comes due
		stopped := make(chan struct{})
		go func() { p.Stop(); close(stopped) }()
		waitUntil(t, schedDeadline, c.name+": Stop to close the pool", func() bool { return p.Go(func() {}) == crew.ErrStopped })
		waitUntil(t, schedDeadline, c.name+": the timer to take the waiting tasks", func() bool { return stats().Waiting == 0 })
		release()
		recvWithin(t, stopped, c.name+": Stop")
		pending := notDone(tasks)
		if s := stats(); pending > 0 || s.Dropped+uint64(runs.Load()) != uint64(n) {
			t.Errorf("%s: right after Stop, %d of %d tasks not done, %d ran; stats %+v", c.name, pending, n, runs.Load(), s)
		}
		wait()
	}
}
