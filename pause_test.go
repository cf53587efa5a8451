package crew_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// A paused pool starts no queued task, lets the running ones finish, keeps
// queueing, and runs the queue once resumed. The bubble's Wait returns only
// when every goroutine is durably blocked, so a task that a paused worker
// started would have run by then.
func TestPauseStartsNothingUntilResume(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(4, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		var ran atomic.Int64
		release := make(chan struct{})
		running := p.Submit(func(context.Context) error { <-release; return nil })
		synctest.Wait()
		p.Pause()
		if !p.Paused() {
			t.Fatal("Paused() = false after Pause")
		}
		for range 100 {
			if err := p.Go(func() { ran.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		close(release)
		if err := running.Wait(); err != nil {
			t.Fatalf("the running task: %v", err)
		}
		synctest.Wait()
		if n := ran.Load(); n != 0 {
			t.Fatalf("%d tasks started while paused", n)
		}
		if st := p.Stats(); st.Queued != 100 || st.Running != 0 {
			t.Fatalf("paused: %+v, want 100 queued and none running", st)
		}
		p.Resume()
		p.Wait()
		if n := ran.Load(); n != 100 || p.Paused() {
			t.Fatalf("after Resume: %d of 100 ran, Paused() = %v", n, p.Paused())
		}
	})
}

// A bounded queue fills while the pool is paused: the Try forms fail and
// the Context forms wait until their context ends.
func TestPausedBoundedQueueFills(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(2))
	defer p.Stop()
	p.Pause()
	for i := range 3 { // one slot and two queue places
		if !p.TryGo(func() {}) {
			t.Fatalf("TryGo %d refused below the capacity", i)
		}
	}
	if p.TryGo(func() {}) {
		t.Fatal("TryGo accepted beyond the capacity of a paused pool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.GoContext(ctx, func() {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GoContext on a full paused pool: %v, want the context's error", err)
	}
}

// Stop resumes a paused pool and runs everything queued.
func TestStopRunsAPausedPoolsQueue(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	p.Pause()
	var ran atomic.Int64
	for range 50 {
		p.Go(func() { ran.Add(1) })
	}
	p.Stop()
	if n := ran.Load(); n != 50 {
		t.Fatalf("Stop of a paused pool ran %d of 50 tasks", n)
	}
	if p.Paused() {
		t.Error("a stopped pool still reports Paused")
	}
	p.Pause() // a no-op on a stopped pool
	if p.Paused() {
		t.Error("Pause paused a stopped pool")
	}
}

// Shutdown of a paused pool does not wait for its context: it drops the
// queue at once, counts it, completes the dropped Tasks with ErrDropped,
// and lets the running task finish.
func TestShutdownDropsAPausedPoolsQueue(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	release := make(chan struct{})
	started := make(chan struct{})
	running := p.Submit(func(ctx context.Context) error {
		close(started)
		<-release
		return nil
	})
	<-started
	p.Pause()
	var ran atomic.Int64
	for range 10 {
		p.Go(func() { ran.Add(1) })
	}
	queued := p.Submit(func(context.Context) error { ran.Add(1); return nil })
	close(release)
	err := p.Shutdown(context.Background()) // would wait for ever if it waited for the queue
	var se *crew.ShutdownError
	if !errors.As(err, &se) || !errors.Is(err, crew.ErrPaused) || se.Dropped != 11 {
		t.Fatalf("Shutdown of a paused pool: %v, want a ShutdownError for 11 drops unwrapping to ErrPaused", err)
	}
	if err := queued.Wait(); !errors.Is(err, crew.ErrDropped) {
		t.Errorf("a queued Submit task: %v, want ErrDropped", err)
	}
	if err := running.Wait(); err != nil {
		t.Errorf("the running task: %v", err)
	}
	if n, st := ran.Load(), p.Stats(); n != 0 || st.Dropped != 11 || st.Completed+st.Dropped != st.Submitted {
		t.Errorf("%d dropped tasks ran; stats %+v", n, st)
	}
}

// A group waited on from outside a paused pool runs none of its tasks
// itself; they run once the pool resumes.
func TestPausedPoolHoldsAGroup(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(4, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		p.Pause()
		var ran atomic.Int64
		g := p.Group(context.Background())
		for range 8 {
			g.Go(func(context.Context) error { ran.Add(1); return nil })
		}
		waited := make(chan error, 1)
		go func() { waited <- g.Wait() }()
		synctest.Wait()
		if n := ran.Load(); n != 0 {
			t.Fatalf("%d group tasks ran while the pool was paused", n)
		}
		p.Resume()
		if err := <-waited; err != nil || ran.Load() != 8 {
			t.Fatalf("after Resume: Wait %v, %d of 8 ran", err, ran.Load())
		}
	})
}

// Pause, Resume and Paused on a zero pool do nothing and report false;
// Resume on a running pool does nothing.
func TestPauseBadInput(t *testing.T) {
	leak.Check(t)
	var zero crew.Pool
	zero.Pause()
	zero.Resume()
	if zero.Paused() {
		t.Error("a zero pool reports Paused")
	}
	var nilFunc *crew.FuncPool[int]
	nilFunc.Pause()
	nilFunc.Resume()
	if nilFunc.Paused() {
		t.Error("a nil FuncPool reports Paused")
	}
	p := crew.New(1)
	defer p.Stop()
	p.Resume()
	if p.Paused() {
		t.Error("Resume paused a running pool")
	}
}

// A function pool pauses as a Pool does.
func TestFuncPoolPause(t *testing.T) {
	leak.Check(t)
	var sum atomic.Int64
	p := crew.NewFunc(2, func(_ context.Context, v int) error { sum.Add(int64(v)); return nil })
	p.Pause()
	for i := range 10 {
		p.Invoke(i + 1)
	}
	if st := p.Stats(); st.Completed != 0 {
		t.Fatalf("a paused function pool completed %d calls", st.Completed)
	}
	p.Resume()
	p.Wait()
	if sum.Load() != 55 {
		t.Fatalf("sum %d, want 55", sum.Load())
	}
	p.Stop()
}

// A group's Wait that borrowed a slot and runs the group's tasks in it
// stops starting them once the pool is paused, and waits: at most the two
// free slots of the pool may each have been taking a task as Pause
// returned. (Had it ignored the pause, it would have run every task and
// returned.)
func TestPauseStopsAWaiterRunningTheGroup(t *testing.T) {
	leak.Check(t)
	for range 50 {
		p := crew.New(3, crew.WithIdleTimeout(time.Minute))
		release := make(chan struct{})
		started := make(chan struct{})
		p.Go(func() { close(started); <-release })
		<-started
		g := p.Group(context.Background())
		var pausing, paused atomic.Bool
		var after atomic.Int64
		for range 20 {
			g.Go(func(context.Context) error {
				switch {
				case pausing.CompareAndSwap(false, true):
					p.Pause()
					paused.Store(true)
				case paused.Load():
					after.Add(1)
				default:
					// Started before Pause returned: wait for it, so that a
					// pausing task descheduled before its Pause does not let
					// the others run the whole group meanwhile.
					for !paused.Load() {
						runtime.Gosched()
					}
				}
				return nil
			})
		}
		waited := make(chan error, 1)
		go func() { waited <- g.Wait() }()
		var err error
		returned := false
		waitUntil(t, 5*time.Second, "Wait to park or return", func() bool {
			select {
			case err = <-waited:
				returned = true
				return true
			default:
				return paused.Load() && parkedIn(leak.Dump(), ").await(")
			}
		})
		if n := after.Load(); n > 2 || returned {
			t.Fatalf("%d group tasks started after Pause (Wait returned: %v), want at most 2 and Wait waiting", n, returned)
		}
		p.Resume()
		if err = <-waited; err != nil {
			t.Fatal(err)
		}
		close(release)
		p.Stop()
	}
}

// parkedIn reports whether some goroutine of the dump waits in a select
// with fn on its stack.
func parkedIn(dump, fn string) bool {
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// Pause is idempotent once Shutdown has begun: a pool that was paused
// when one of its own calls called Shutdown (which leaves it paused, its
// queue to run once resumed) stays paused through a later Pause, and runs
// its queue only at Resume. A Pause that resumed it would start the queue
// the caller meant to hold.
func TestPauseAfterShutdownFromInsideKeepsThePoolPaused(t *testing.T) {
	leak.Check(t)
	started := make(chan struct{})
	release := make(chan struct{})
	shutdown := make(chan error, 1)
	var ran atomic.Int64
	var p *crew.FuncPool[int]
	p = crew.NewFunc(1, func(_ context.Context, v int) error {
		if v == 0 {
			close(started)
			<-release
			shutdown <- p.Shutdown(context.Background())
			return nil
		}
		ran.Add(1)
		return nil
	})
	if err := p.Invoke(0); err != nil {
		t.Fatal(err)
	}
	<-started
	p.Pause()
	if err := p.Invoke(1); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := recvWithin(t, shutdown, "Shutdown from inside the call"); !errors.Is(err, crew.ErrInsideTask) {
		t.Fatalf("Shutdown from inside a call = %v, want ErrInsideTask", err)
	}
	if !p.Paused() {
		t.Fatal("Shutdown from inside a call resumed the paused pool")
	}
	p.Pause()
	if !p.Paused() || ran.Load() != 0 {
		t.Fatalf("after a second Pause: Paused() = %v, %d queued calls ran; want paused, none", p.Paused(), ran.Load())
	}
	p.Resume()
	within(t, schedDeadline, "Stop", p.Stop)
	if ran.Load() != 1 {
		t.Fatalf("%d queued calls ran after Resume and Stop, want 1", ran.Load())
	}
}
