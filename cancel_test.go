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

// checkQuietStats checks the counters of a quiet pool: every task accepted ran, was
// dropped or was cancelled.
func checkQuietStats(t *testing.T, p *crew.Pool, want crew.Stats) {
	t.Helper()
	s := p.Stats()
	if s.Submitted != want.Submitted || s.Completed != want.Completed || s.Dropped != want.Dropped ||
		s.Cancelled != want.Cancelled || s.Queued != 0 || s.Running != 0 {
		t.Errorf("Stats = %+v, want Submitted %d, Completed %d, Dropped %d, Cancelled %d, nothing queued or running",
			s, want.Submitted, want.Completed, want.Dropped, want.Cancelled)
	}
	if s.Submitted != s.Completed+s.Dropped+s.Cancelled {
		t.Errorf("Stats: Submitted %d != Completed %d + Dropped %d + Cancelled %d", s.Submitted, s.Completed, s.Dropped, s.Cancelled)
	}
}

func TestCancelBeforeStart(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release }) // holds the only worker
	<-started
	var ran atomic.Bool
	task := p.Submit(func(context.Context) error { ran.Store(true); return nil })
	if !task.Cancel() {
		t.Fatal("Cancel of a queued task = false")
	}
	if task.Cancel() {
		t.Error("a second Cancel = true")
	}
	select {
	case <-task.Done():
	default:
		t.Fatal("Done not closed after Cancel")
	}
	if err := task.Wait(); err != context.Canceled {
		t.Fatalf("Wait() = %v, want context.Canceled", err)
	}
	if s := p.Stats(); s.Cancelled != 1 || s.Queued != 0 {
		t.Errorf("Stats with the worker held = %+v, want Cancelled 1, Queued 0", s)
	}
	close(release)
	p.Wait()
	if ran.Load() {
		t.Error("a task cancelled before it started ran")
	}
	checkQuietStats(t, p, crew.Stats{Submitted: 2, Completed: 1, Cancelled: 1})
	if s := p.Stats(); s.Failed != 0 {
		t.Errorf("Failed = %d, want 0: a cancelled task did not fail", s.Failed)
	}
}

func TestCancelOnPausedPool(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	p.Pause()
	tasks := make([]*crew.Task, 10)
	for i := range tasks {
		tasks[i] = p.Submit(func(context.Context) error { return nil })
	}
	for _, task := range tasks[:4] {
		if !task.Cancel() {
			t.Fatal("Cancel of a task queued on a paused pool = false")
		}
	}
	if s := p.Stats(); s.Cancelled != 4 || s.Queued != 6 {
		t.Errorf("Stats = %+v, want Cancelled 4, Queued 6", s)
	}
	p.Resume()
	p.Stop()
	for i, task := range tasks {
		want := error(nil)
		if i < 4 {
			want = context.Canceled
		}
		if err := task.Wait(); err != want {
			t.Errorf("task %d: Wait() = %v, want %v", i, err, want)
		}
	}
	checkQuietStats(t, p, crew.Stats{Submitted: 10, Completed: 6, Cancelled: 4})
}

func TestCancelWhileRunning(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	errSaw := errors.New("saw the cancellation")
	for _, tc := range []struct {
		name string
		wait func(ctx context.Context, proceed <-chan struct{}) error
	}{
		{"Done", func(ctx context.Context, _ <-chan struct{}) error { <-ctx.Done(); return ctx.Err() }},
		{"Err", func(ctx context.Context, proceed <-chan struct{}) error { <-proceed; return ctx.Err() }},
		{"derived", func(ctx context.Context, _ <-chan struct{}) error {
			ctx, cancel := context.WithTimeout(ctx, time.Hour)
			defer cancel()
			<-ctx.Done()
			return ctx.Err()
		}},
		{"AfterFunc", func(ctx context.Context, _ <-chan struct{}) error {
			called := make(chan struct{})
			context.AfterFunc(ctx, func() { close(called) })
			<-called
			return ctx.Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started, proceed := make(chan struct{}), make(chan struct{})
			task := p.Submit(func(ctx context.Context) error {
				close(started)
				if err := tc.wait(ctx, proceed); err != context.Canceled {
					return fmt.Errorf("context error %v, want context.Canceled", err)
				}
				return errSaw
			})
			<-started
			if task.Cancel() {
				t.Error("Cancel of a running task = true")
			}
			close(proceed)
			if err := task.Wait(); err != errSaw {
				t.Fatalf("Wait() = %v, want the function's %v", err, errSaw)
			}
			if p.Context().Err() != nil {
				t.Fatal("cancelling a task cancelled the pool's context")
			}
		})
	}
	p.Wait()
	checkQuietStats(t, p, crew.Stats{Submitted: 4, Completed: 4})
	if s := p.Stats(); s.Failed != 4 {
		t.Errorf("Failed = %d, want 4", s.Failed)
	}
}

// A task's context ends when the pool's does, and once the task has
// returned; until then it is live.
func TestSubmitContextEnds(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	ctxs := make(chan context.Context, 2)
	live := func(ctx context.Context) error {
		if ctx.Err() != nil {
			return fmt.Errorf("a running task's context ended: %v", ctx.Err())
		}
		ctxs <- ctx
		return nil
	}
	lazy := p.Submit(live)
	made := p.Submit(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return errors.New("Done closed while the task ran")
		default:
		}
		return live(ctx)
	})
	for _, task := range []*crew.Task{lazy, made} {
		if err := task.Wait(); err != nil {
			t.Fatal(err)
		}
		ctx := <-ctxs
		if ctx.Err() != context.Canceled {
			t.Errorf("Err() after the task returned = %v, want context.Canceled", ctx.Err())
		}
		select {
		case <-ctx.Done():
		default:
			t.Error("Done not closed after the task returned")
		}
		if task.Cancel() {
			t.Error("Cancel after the task finished = true")
		}
		if err := task.Wait(); err != nil {
			t.Errorf("Wait() after a late Cancel = %v, want nil", err)
		}
	}

	started, saw := make(chan struct{}), make(chan error, 1)
	p.Submit(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		saw <- ctx.Err()
		return nil
	})
	<-started
	shut, cancel := context.WithCancel(context.Background())
	cancel()
	p.Shutdown(shut)
	if err := <-saw; err != context.Canceled {
		t.Errorf("a running task saw %v when Shutdown's deadline passed, want context.Canceled", err)
	}
	checkQuietStats(t, p, crew.Stats{Submitted: 3, Completed: 3})
}

func TestCancelDoesNothingToOtherTasks(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	var nilTask *crew.Task
	var nilFuture *crew.Future[int]
	tasks := map[string]*crew.Task{
		"nil":         nilTask,
		"zero":        {},
		"nil func":    p.Submit(nil),
		"zero pool":   new(crew.Pool).Submit(func(context.Context) error { return nil }),
		"zero layer":  new(crew.Keyed[int]).Submit(1, func(context.Context) error { return nil }),
		"nil context": p.SubmitContext(nil, func(context.Context) error { return nil }), //nolint:staticcheck // bad input on purpose
	}
	if nilFuture.Cancel() || new(crew.Future[int]).Cancel() || crew.Submit[int](p, nil).Cancel() {
		t.Error("Cancel of a nil, zero or refused Future = true")
	}
	p.Stop()
	tasks["stopped"] = p.Submit(func(context.Context) error { return nil })
	for name, task := range tasks {
		before := task.Wait()
		if task.Cancel() {
			t.Errorf("%s: Cancel = true", name)
		}
		if err := task.Wait(); err != before || err == nil {
			t.Errorf("%s: Wait() = %v after Cancel, %v before", name, err, before)
		}
	}
	if s := p.Stats(); s.Cancelled != 0 {
		t.Errorf("Cancelled = %d, want 0", s.Cancelled)
	}
}

func TestFutureCancel(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	p.Pause()
	var ran atomic.Bool
	fu := crew.Submit(p, func(context.Context) (int, error) { ran.Store(true); return 1, nil })
	if !fu.Cancel() {
		t.Fatal("Cancel of a queued Future = false")
	}
	if v, err := fu.Wait(); v != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait() = %d, %v, want 0, context.Canceled", v, err)
	}
	p.Resume()
	p.Wait()
	if ran.Load() {
		t.Error("a cancelled Future's function ran")
	}

	started := make(chan struct{})
	fu = crew.Submit(p, func(ctx context.Context) (int, error) {
		close(started)
		<-ctx.Done()
		return 2, nil
	})
	<-started
	if fu.Cancel() {
		t.Error("Cancel of a running Future = true")
	}
	if v, err := fu.Wait(); v != 2 || err != nil {
		t.Errorf("Wait() = %d, %v, want 2, nil", v, err)
	}
}

// layerUnderTest submits to one of the layers.
type layerUnderTest struct {
	name   string
	submit func(func(context.Context) error) *crew.Task
	wait   func()
	stats  func() crew.LayerStats
}

func layersOn(p *crew.Pool) []layerUnderTest {
	k := crew.NewKeyed[int](p)
	q := crew.NewPriority(p)
	r := crew.NewRateLimited(p, crew.Rate{Limit: 1 << 30, Per: time.Second, Burst: 1 << 20})
	return []layerUnderTest{
		{"Keyed", func(f func(context.Context) error) *crew.Task { return k.Submit(1, f) }, k.Wait, k.Stats},
		{"Priority", func(f func(context.Context) error) *crew.Task { return q.Submit(0, f) }, q.Wait, q.Stats},
		{"RateLimited", r.Submit, r.Wait, r.Stats},
	}
}

func TestCancelLayerTasks(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	for _, l := range layersOn(p) {
		t.Run(l.name, func(t *testing.T) {
			started, release := make(chan struct{}), make(chan struct{})
			first := l.submit(func(ctx context.Context) error {
				close(started)
				<-release
				return ctx.Err()
			})
			<-started
			var ran atomic.Bool
			second := l.submit(func(context.Context) error { ran.Store(true); return nil })
			if !second.Cancel() {
				t.Fatal("Cancel of a queued layer task = false")
			}
			if err := second.Wait(); err != context.Canceled {
				t.Fatalf("Wait() = %v, want context.Canceled", err)
			}
			if first.Cancel() {
				t.Error("Cancel of the running task = true")
			}
			close(release)
			if err := first.Wait(); err != context.Canceled {
				t.Errorf("the running task saw its context error %v, want context.Canceled", err)
			}
			l.wait()
			if ran.Load() {
				t.Error("a cancelled layer task ran")
			}
			if s := l.stats(); s.Cancelled != 1 || s.Dropped != 0 || s.Unfinished != 0 {
				t.Errorf("LayerStats = %+v, want Cancelled 1", s)
			}
			if second.Cancel() || first.Cancel() {
				t.Error("Cancel of a finished task = true")
			}
		})
	}
	if s := p.Stats(); s.Cancelled != 0 {
		t.Errorf("the pool counts %d cancelled tasks: a layer's count its own", s.Cancelled)
	}
}

// A layer's Submit task that panics ran: it counts in the pool's
// Panicked and Failed, not in the layer's Cancelled, which counts only the
// tasks Cancel kept from starting.
func TestLayerTaskPanicIsNotCancelled(t *testing.T) {
	leak.Check(t)
	var handled atomic.Int64
	p := crew.New(2, crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1) }))
	defer p.Stop()
	sp := crew.NewSubpool(p, 2)
	layers := append(layersOn(p), layerUnderTest{"Subpool", sp.Submit, sp.Wait, func() crew.LayerStats { return sp.Stats().LayerStats }})
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			task := l.submit(func(context.Context) error { panic("boom") })
			var pe *crew.PanicError
			if err := task.Wait(); !errors.As(err, &pe) || pe.Value != "boom" {
				t.Fatalf("Wait() = %v, want the task's *PanicError", err)
			}
			l.wait()
			if s := l.stats(); s.Cancelled != 0 || s.Dropped != 0 || s.Unfinished != 0 {
				t.Errorf("LayerStats after a task panicked = %+v, want nothing cancelled, dropped or unfinished", s)
			}
		})
	}
	if s := p.Stats(); s.Panicked != uint64(len(layers)) || s.Failed != uint64(len(layers)) || handled.Load() != 0 {
		t.Errorf("Stats = %+v, panic handler called %d times; want %d panicked and failed, the handler not called (Wait returns the panic)",
			s, handled.Load(), len(layers))
	}
}

// A cancelled layer task that the layer had not reached as the pool shut
// down counts as cancelled, not dropped.
func TestCancelLayerTasksRaceShutdown(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	ls := layersOn(p)
	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started
	var tasks [][]*crew.Task
	for _, l := range ls {
		var ts []*crew.Task
		for range 4 {
			ts = append(ts, l.submit(func(context.Context) error { return nil }))
		}
		ts[1].Cancel()
		ts[3].Cancel()
		tasks = append(tasks, ts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	go func() {
		eventually(t, "the pool to end", func() bool {
			select {
			case <-p.Done():
				return true
			default:
				return false
			}
		})
		close(release)
	}()
	if err := p.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with an ended context and a task running = nil")
	}
	for i, l := range ls {
		for j, task := range tasks[i] {
			want := crew.ErrDropped
			if j%2 == 1 {
				want = context.Canceled
			}
			if err := task.Wait(); err != want {
				t.Errorf("%s task %d: Wait() = %v, want %v", l.name, j, err, want)
			}
		}
		if s := l.stats(); s.Cancelled != 2 || s.Dropped != 2 || s.Unfinished != 0 {
			t.Errorf("%s: LayerStats = %+v, want Cancelled 2, Dropped 2", l.name, s)
		}
	}
}

// Shutdown counts the places of cancelled tasks that its drain removes as
// cancelled, not dropped.
func TestCancelThenShutdown(t *testing.T) {
	leak.Check(t)
	for _, paused := range []bool{true, false} {
		p := crew.New(1)
		started, release := make(chan struct{}), make(chan struct{})
		if paused {
			p.Pause()
		} else {
			p.Go(func() { close(started); <-release })
			<-started
		}
		tasks := make([]*crew.Task, 10)
		for i := range tasks {
			tasks[i] = p.Submit(func(context.Context) error { return nil })
		}
		for _, task := range tasks[:4] {
			task.Cancel()
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		go func() {
			<-p.Done()
			close(release)
		}()
		err := p.Shutdown(ctx)
		var se *crew.ShutdownError
		if !errors.As(err, &se) || se.Dropped != 6 {
			t.Fatalf("paused %v: Shutdown() = %v, want a ShutdownError with 6 dropped", paused, err)
		}
		for i, task := range tasks {
			want := crew.ErrDropped
			if i < 4 {
				want = context.Canceled
			}
			if err := task.Wait(); err != want {
				t.Errorf("paused %v: task %d: Wait() = %v, want %v", paused, i, err, want)
			}
		}
		completed := uint64(1)
		if paused {
			completed = 0
		}
		checkQuietStats(t, p, crew.Stats{Submitted: 10 + completed, Completed: completed, Dropped: 6, Cancelled: 4})
	}
}

// Cancels race the workers, Stop and Shutdown: every task accepted ran, was
// cancelled or was dropped, and the counters say so exactly.
func TestCancelRacesWorkersAndShutdown(t *testing.T) {
	leak.Check(t)
	rounds := scaled(200, 4)
	for round := range rounds {
		stop := round % 3 // 0: Shutdown at once, 1: Shutdown soon, 2: Stop
		p := crew.New(1+round%4, crew.WithQueueSize(64*(round%2)))
		paused := round%4 == 3 // cancelled tasks wait in the queue for Shutdown's drain
		if paused {
			p.Pause()
		}
		const n = 64
		var ran atomic.Int64
		tasks := make([]*crew.Task, 0, n)
		var mu sync.Mutex
		cancelled := 0
		var wg sync.WaitGroup
		submitted := make(chan *crew.Task, n)
		ready := make(chan struct{}) // some tasks were submitted, and some cancelled
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(submitted)
			for i := range n {
				task := p.Submit(func(ctx context.Context) error {
					ran.Add(1)
					if i%5 == 0 {
						<-ctx.Done() // a running task waits to be cancelled, by its Cancel or Shutdown's
					}
					return nil
				})
				select {
				case <-task.Done():
					if task.Wait() == crew.ErrStopped {
						continue
					}
				default:
				}
				submitted <- task
				if paused && i == n/2 {
					p.Resume()
				}
			}
		}()
		go func() {
			defer wg.Done()
			signal := sync.OnceFunc(func() { close(ready) })
			defer signal()
			i := 0
			for task := range submitted {
				if i == (round%5)*n/8 {
					signal()
				}
				mu.Lock()
				tasks = append(tasks, task)
				mu.Unlock()
				if i%5 == 0 || i%3 == 0 {
					if task.Cancel() {
						mu.Lock()
						cancelled++
						mu.Unlock()
					}
				}
				i++
			}
		}()
		var shutdownDropped int
		<-ready
		switch stop {
		case 0, 1:
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(stop)*50*time.Microsecond)
			err := p.Shutdown(ctx)
			cancel()
			var se *crew.ShutdownError
			if errors.As(err, &se) {
				shutdownDropped = se.Dropped
			}
		default:
			wg.Wait()
			// Tasks that wait for their context need a Cancel, or Stop's end.
			for _, task := range tasks {
				if task.Cancel() {
					cancelled++
				}
			}
			p.Stop()
		}
		wg.Wait()
		p.Stop()
		var nilN, cancelledN, droppedN int
		for _, task := range tasks {
			switch err := task.Wait(); err {
			case nil:
				nilN++
			case context.Canceled:
				cancelledN++
			case crew.ErrDropped:
				droppedN++
			default:
				t.Fatalf("round %d: Wait() = %v", round, err)
			}
		}
		s := p.Stats()
		switch {
		case cancelledN != cancelled || uint64(cancelledN) != s.Cancelled:
			t.Fatalf("round %d: %d Cancel calls took effect, %d tasks report context.Canceled, Stats.Cancelled = %d", round, cancelled, cancelledN, s.Cancelled)
		case int64(nilN) != ran.Load() || uint64(nilN) != s.Completed:
			t.Fatalf("round %d: %d tasks ran, %d report nil, Stats.Completed = %d", round, ran.Load(), nilN, s.Completed)
		case uint64(droppedN) != s.Dropped || droppedN != shutdownDropped:
			t.Fatalf("round %d: %d tasks report ErrDropped, Stats.Dropped = %d, ShutdownError.Dropped = %d", round, droppedN, s.Dropped, shutdownDropped)
		case s.Submitted != uint64(len(tasks)):
			t.Fatalf("round %d: %d tasks accepted, Stats.Submitted = %d", round, len(tasks), s.Submitted)
		}
		checkQuietStats(t, p, crew.Stats{Submitted: s.Submitted, Completed: uint64(nilN), Dropped: uint64(droppedN), Cancelled: uint64(cancelledN)})
	}
}

// Cancel adds no allocation: a Submit still costs three (the Task, its
// channel and its run method) when the task does not call its context's
// Done, and Cancel none; Go none.
func TestCancelAllocations(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	task := func(ctx context.Context) error {
		if ctx.Value(p) != nil || ctx.Err() != nil {
			return errors.New("a live context has a value or an error")
		}
		return nil
	}
	if a := testing.AllocsPerRun(1000, func() { p.Submit(task).Wait() }); a > 3 {
		t.Errorf("Submit and Wait of a task that does not call Done: %v allocations, want 3", a)
	}
	p.Pause()
	if a := testing.AllocsPerRun(1000, func() { p.Submit(task).Cancel() }); a > 3 {
		t.Errorf("Submit and Cancel: %v allocations, want 3", a)
	}
	p.Resume()
	if a := testing.AllocsPerRun(1000, func() { p.Go(func() {}) }); a != 0 {
		t.Errorf("Go: %v allocations, want 0", a)
	}
}

// Stats read while cancels race Shutdown: the counters never go down.
func TestCancelStatsNeverGoDown(t *testing.T) {
	leak.Check(t)
	for round := range scaled(50, 4) {
		p := crew.New(2)
		var tasks []*crew.Task
		for range 200 {
			tasks = append(tasks, p.Submit(func(context.Context) error { return nil }))
		}
		done := make(chan struct{})
		var last crew.Stats
		var failed error
		go func() {
			defer close(done)
			for {
				s := p.Stats()
				if s.Completed < last.Completed || s.Dropped < last.Dropped || s.Cancelled < last.Cancelled || s.Submitted < last.Submitted {
					failed = fmt.Errorf("round %d: Stats went from %+v to %+v", round, last, s)
					return
				}
				if s.Completed+s.Dropped+s.Cancelled > s.Submitted {
					failed = fmt.Errorf("round %d: Stats %+v count more than it accepted", round, s)
					return
				}
				last = s
				select {
				case <-p.Done():
					return
				default:
				}
			}
		}()
		cancelled := make(chan struct{})
		go func() {
			defer close(cancelled)
			for i := len(tasks) - 1; i >= 0; i -= 2 {
				tasks[i].Cancel()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Microsecond)
		p.Shutdown(ctx)
		cancel()
		<-done
		<-cancelled
		if failed != nil {
			t.Fatal(failed)
		}
		for _, task := range tasks {
			task.Wait()
		}
	}
}
