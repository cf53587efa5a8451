package crew_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// peak tracks a level that goes up and down, and the highest it reached.
type peak struct{ now, max atomic.Int64 }

func (p *peak) add(n int64) {
	v := p.now.Add(n)
	for m := p.max.Load(); v > m && !p.max.CompareAndSwap(m, v); m = p.max.Load() {
	}
}

// subTasks submits n tasks of the weights weight(i) from producers
// goroutines, each adding its weight to level while it runs, and waits
// for them.
func subTasks(t *testing.T, s *crew.Subpool, producers, n int, weight func(i int) int, level, tasks *peak) {
	t.Helper()
	var ran atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range n {
				w := weight(p*n + i)
				task := func() {
					level.add(int64(w))
					tasks.add(1)
					tasks.add(-1)
					level.add(-int64(w))
					ran.Add(1)
				}
				var err error
				switch i % 3 {
				case 0:
					err = s.Weighted(w).Go(task)
				case 1:
					err = s.Weighted(w).Submit(func(context.Context) error { task(); return nil }).Wait()
				default:
					err = s.Weighted(w).GoContext(context.Background(), task)
				}
				if err != nil {
					t.Errorf("submission %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	s.Wait()
	if got := ran.Load(); got != int64(producers*n) {
		t.Fatalf("%d tasks ran, want %d", got, producers*n)
	}
}

// At most limit slots of a Subpool are held at once, whatever the
// producers and the weights; and the limit is reached.
func TestSubpoolLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(16)
	defer p.Stop()
	for name, weight := range map[string]func(int) int{
		"one":   func(int) int { return 1 },
		"mixed": func(i int) int { return 1 + i*7%3 },
	} {
		s := crew.NewSubpool(p, 3)
		var level, tasks peak
		subTasks(t, s, 8, scaled(300, 3), weight, &level, &tasks)
		if m := level.max.Load(); m > 3 {
			t.Fatalf("%s: running weights reached %d, limit 3", name, m)
		}
	}
	s := crew.NewSubpool(p, 3)

	// Reached: three blocked tasks all start, a fourth waits.
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	for range 4 {
		s.Go(func() { started <- struct{}{}; <-release })
	}
	for range 3 {
		recvWithin(t, started, "three tasks to start")
	}
	if st := s.Stats(); st.Running != 3 || st.InUse != 3 || st.Waiting != 1 || st.Unfinished != 4 || st.Limit != 3 {
		t.Errorf("Stats = %+v, want 3 running, 3 in use, 1 waiting", st)
	}
	select {
	case <-started:
		t.Fatal("a fourth task started beside three")
	default:
	}
	close(release)
	recvWithin(t, started, "the fourth task")
	s.Wait()
	if st := s.Stats(); st.Running != 0 || st.InUse != 0 || st.Waiting != 0 || st.Unfinished != 0 {
		t.Errorf("idle Stats = %+v", st)
	}
}

// A heavy task is admitted in its turn: lights submitted behind it wait
// for it, though they would fit, so a stream of them cannot starve it.
func TestSubpoolWeightedFIFO(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	s := crew.NewSubpool(p, 4)

	var mu sync.Mutex
	var order []string
	var running int
	var overlapped bool
	log := func(what string, w int) func() {
		return func() {
			mu.Lock()
			order = append(order, what)
			running += w
			if what == "heavy" && running != 4 {
				overlapped = true
			}
			mu.Unlock()
			mu.Lock()
			running -= w
			mu.Unlock()
		}
	}
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	for range 3 {
		s.Go(func() { started <- struct{}{}; <-release; log("first", 1)() })
	}
	for range 3 {
		recvWithin(t, started, "the first lights to start")
	}
	heavy := s.Weighted(4).Submit(func(context.Context) error { log("heavy", 4)(); return nil })
	// A stream of lights behind it, one slot free all along: none starts.
	stop := make(chan struct{})
	streamed := make(chan int)
	go func() {
		n := 0
		defer func() { streamed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Go(log("light", 1)); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	eventually(t, "lights to queue behind the heavy task", func() bool { return s.Stats().Waiting >= 20 })
	mu.Lock()
	early := len(order)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d tasks ran while the heavy one waited: %v", early, order)
	}
	close(release)
	if err := heavy.Wait(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	n := <-streamed
	s.Wait()
	mu.Lock()
	defer mu.Unlock()
	if overlapped {
		t.Error("the heavy task ran beside others")
	}
	if len(order) != 4+n {
		t.Fatalf("%d tasks ran, want %d", len(order), 4+n)
	}
	for i, what := range order[:3] {
		if what != "first" {
			t.Fatalf("task %d is %q, want the first lights before the heavy one: %v", i, what, order[:4])
		}
	}
	if order[3] != "heavy" {
		t.Fatalf("the heavy task started after %v", order[:4])
	}
}

// The tasks of a Subpool are the pool's: its limit bounds them together
// with the pool's other tasks.
func TestSubpoolUnderParentLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewSubpool(p, 4)
	var weights, tasks peak
	var wg sync.WaitGroup
	wg.Go(func() {
		for range scaled(300, 3) {
			p.Go(func() { tasks.add(1); tasks.add(-1) })
		}
	})
	subTasks(t, s, 4, scaled(200, 3), func(i int) int { return 1 + i%4 }, &weights, &tasks)
	wg.Wait()
	p.Wait()
	if m := tasks.max.Load(); m > 2 {
		t.Fatalf("%d tasks ran at once on a pool of 2", m)
	}
	if m := weights.max.Load(); m > 4 {
		t.Fatalf("weights %d ran at once, limit 4", m)
	}
}

// A Keyed on a Subpool runs its keys under the Subpool's limit.
func TestSubpoolUnderKeyed(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	s := crew.NewSubpool(p, 2)
	k := crew.NewKeyed[int](s)
	var level peak
	var ran atomic.Int64
	for i := range scaled(400, 4) {
		if err := k.Go(i%7, func() { level.add(1); level.add(-1); ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	k.Wait()
	s.Wait()
	if m := level.max.Load(); m > 2 {
		t.Fatalf("%d keyed tasks ran at once under a Subpool of 2", m)
	}
	if ran.Load() != int64(scaled(400, 4)) {
		t.Fatalf("%d ran", ran.Load())
	}
}

// Stop of a Subpool refuses new work, runs its queue and leaves the pool
// running.
func TestSubpoolStop(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1)
	release := make(chan struct{})
	started := make(chan struct{})
	var ran atomic.Int64
	s.Go(func() { close(started); <-release; ran.Add(1) })
	<-started
	tasks := make([]*crew.Task, 5)
	for i := range tasks {
		tasks[i] = s.Submit(func(context.Context) error { ran.Add(1); return nil })
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	eventually(t, "Stop to refuse", func() bool { return errors.Is(s.Go(func() {}), crew.ErrStopped) })
	if _, ok := s.TrySubmit(func(context.Context) error { return nil }); ok {
		t.Error("TrySubmit accepted a task after Stop")
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while a task ran")
	default:
	}
	close(release)
	recvWithin(t, stopped, "Stop")
	for i, task := range tasks {
		if err := task.Wait(); err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	if ran.Load() != 6 || s.Stats().Dropped != 0 {
		t.Fatalf("%d ran, %d dropped; want 6, 0", ran.Load(), s.Stats().Dropped)
	}
	s.Stop() // idempotent
	done := make(chan struct{})
	if err := p.Go(func() { close(done) }); err != nil {
		t.Fatalf("the pool refused work after its Subpool stopped: %v", err)
	}
	<-done
}

// Shutdown of a Subpool whose context ends drops its queue, with exact
// counts, waits for the running task, and leaves the pool running.
func TestSubpoolShutdown(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 2)
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	var ran atomic.Int64
	for range 2 {
		s.Go(func() { started <- struct{}{}; <-release; ran.Add(1) })
	}
	recvWithin(t, started, "a task")
	recvWithin(t, started, "a task")
	tasks := make([]*crew.Task, 4)
	for i := range tasks {
		tasks[i] = s.Weighted(1 + i%2).Submit(func(context.Context) error { ran.Add(1); return nil })
	}
	for range 3 {
		s.Go(func() { ran.Add(1) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error)
	go func() { done <- s.Shutdown(ctx) }()
	for i, task := range tasks {
		<-task.Done()
		if err := task.Wait(); !errors.Is(err, crew.ErrDropped) {
			t.Errorf("task %d: %v, want ErrDropped", i, err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v while tasks ran", err)
	default:
	}
	close(release)
	err := recvWithin(t, done, "Shutdown")
	var se *crew.ShutdownError
	if !errors.As(err, &se) || se.Dropped != 7 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want a ShutdownError of 7 dropped, canceled", err)
	}
	if st := s.Stats(); st.Dropped != 7 || st.Unfinished != 0 || st.InUse != 0 || ran.Load() != 2 {
		t.Fatalf("Stats = %+v, %d ran; want 7 dropped, 2 ran", st, ran.Load())
	}
	if err := s.Go(func() {}); !errors.Is(err, crew.ErrStopped) {
		t.Errorf("Go after Shutdown = %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown = %v", err)
	}
	done2 := make(chan struct{})
	p.Go(func() { close(done2) })
	<-done2

	// Nothing left: nil.
	s2 := crew.NewSubpool(p, 1)
	s2.Go(func() {})
	if err := s2.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of a Subpool that finished = %v", err)
	}
}

// A queued task that Task.Cancel kept from starting is not one that the
// Subpool's Shutdown drops: its ShutdownError counts only the dropped
// ones, as Stats' Dropped does, and the cancelled one counts in
// Cancelled.
func TestSubpoolShutdownLeavesCancelledOut(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewSubpool(p, 1)
	release := make(chan struct{})
	started := make(chan struct{})
	s.Go(func() { close(started); <-release })
	recvWithin(t, started, "the running task")
	var ran atomic.Bool
	queued := make([]*crew.Task, 3)
	for i := range queued {
		queued[i] = s.Submit(func(context.Context) error { ran.Store(true); return nil })
	}
	if !queued[1].Cancel() {
		t.Fatal("Cancel of a queued Subpool task = false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error)
	go func() { done <- s.Shutdown(ctx) }()
	for _, i := range []int{0, 2} {
		<-queued[i].Done()
	}
	close(release)
	err := recvWithin(t, done, "Shutdown")
	var se *crew.ShutdownError
	if !errors.As(err, &se) || se.Dropped != 2 {
		t.Fatalf("Shutdown = %v, want a ShutdownError of 2 dropped", err)
	}
	for i, want := range []error{crew.ErrDropped, context.Canceled, crew.ErrDropped} {
		if err := queued[i].Wait(); err != want {
			t.Errorf("task %d: %v, want %v", i, err, want)
		}
	}
	if st := s.Stats(); st.Dropped != 2 || st.Cancelled != 1 || st.Unfinished != 0 || ran.Load() {
		t.Errorf("Stats = %+v, a queued task ran: %v; want 2 dropped, 1 cancelled, none ran", st, ran.Load())
	}
}

// Stop of the pool runs every task the Subpool accepted, its waiting ones
// included, on the stopping pool's workers.
func TestSubpoolPoolStop(t *testing.T) {
	leak.Check(t)
	for _, queue := range []int{-1, 0, 2} {
		var opts []crew.Option
		if queue >= 0 {
			opts = append(opts, crew.WithQueueSize(queue))
		}
		p := crew.New(2, opts...)
		s := crew.NewSubpool(p, 2)
		release := make(chan struct{})
		started := make(chan struct{})
		var ran atomic.Int64
		s.Weighted(2).Go(func() { close(started); <-release; ran.Add(1) })
		<-started
		var tasks []*crew.Task
		for i := range 20 {
			tasks = append(tasks, s.Weighted(1+i%2).Submit(func(context.Context) error { ran.Add(1); return nil }))
		}
		stopped := make(chan struct{})
		go func() { p.Stop(); close(stopped) }()
		eventually(t, "the pool to refuse", func() bool { return errors.Is(s.Go(func() {}), crew.ErrStopped) })
		close(release)
		recvWithin(t, stopped, "Stop")
		for i, task := range tasks {
			if err := task.Wait(); err != nil {
				t.Errorf("queue %d: task %d: %v", queue, i, err)
			}
		}
		if ran.Load() != 21 || s.Stats().Dropped != 0 {
			t.Fatalf("queue %d: %d ran, %d dropped; want 21, 0", queue, ran.Load(), s.Stats().Dropped)
		}
		s.Wait()
		s.Stop()
	}
}

// Shutdown of the pool drops the Subpool's tasks that have not started,
// each counted once, and never hangs.
func TestSubpoolPoolShutdown(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	s := crew.NewSubpool(p, 2, crew.WithSubpoolQueue(100))
	started := make(chan struct{})
	var ran atomic.Int64
	blocker := s.Weighted(2).Submit(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		ran.Add(1)
		return nil
	})
	<-started
	var tasks []*crew.Task
	for i := range 30 {
		tasks = append(tasks, s.Weighted(1+i%2).Submit(func(context.Context) error { ran.Add(1); return nil }))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, 10*time.Second, "Shutdown", func() { p.Shutdown(ctx) })
	if err := blocker.Wait(); err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for _, task := range tasks {
		switch err := task.Wait(); {
		case errors.Is(err, crew.ErrDropped):
			dropped++
		case err != nil:
			t.Fatal(err)
		}
	}
	within(t, 10*time.Second, "Wait", s.Wait)
	if st := s.Stats(); int(st.Dropped) != dropped || dropped != 30 || ran.Load() != 1 {
		t.Fatalf("Stats %+v, %d tasks dropped, %d ran; want 30 dropped, 1 ran", st, dropped, ran.Load())
	}
	if err := s.Go(func() {}); !errors.Is(err, crew.ErrStopped) {
		t.Errorf("Go after the pool's Shutdown = %v", err)
	}
}

// Stop or Shutdown of the pool while producers submit to a bounded
// Subpool: every accepted task runs or is dropped, counted, and nothing
// hangs.
func TestSubpoolPoolStopWhileSubmitting(t *testing.T) {
	leak.Check(t)
	for round := range scaled(20, 4) {
		// Stop in even rounds; a bounded pool queue (size 0 or 1) in rounds
		// 2 and 3 of every 4.
		var opts []crew.Option
		if round%4 >= 2 {
			opts = append(opts, crew.WithQueueSize(round%2))
		}
		p := crew.New(1+round%3, opts...)
		s := crew.NewSubpool(p, 1+round%4, crew.WithSubpoolQueue(1+round%3))
		var accepted, ran atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					w := 1 + (g+i)%(1+round%4)
					err := s.Weighted(w).Go(func() { ran.Add(1) })
					if err != nil {
						if !errors.Is(err, crew.ErrStopped) {
							t.Error(err)
						}
						return
					}
					accepted.Add(1)
				}
			})
		}
		eventually(t, "tasks to run", func() bool { return ran.Load() > 10 })
		if round%2 == 0 {
			within(t, 10*time.Second, "Stop", p.Stop)
		} else {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			within(t, 10*time.Second, "Shutdown", func() { p.Shutdown(ctx) })
		}
		within(t, 10*time.Second, "producers", wg.Wait)
		within(t, 10*time.Second, "Wait", s.Wait)
		st := s.Stats()
		if got := ran.Load() + int64(st.Dropped); got != accepted.Load() {
			t.Fatalf("round %d: %d ran + %d dropped, %d accepted", round, ran.Load(), st.Dropped, accepted.Load())
		}
		// Stop drops only what waited behind a first submission it refused
		// (see Subpool.Go): at most the Subpool's queue bound.
		if round%4 == 0 && st.Dropped > uint64(1+round%3) {
			t.Errorf("round %d: Stop dropped %d", round, st.Dropped)
		}
	}
}

// The Context forms give up when their context ends: at once for one that
// has ended, after waiting for room for one that ends while they wait.
func TestSubpoolContextForms(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewSubpool(p, 1, crew.WithSubpoolQueue(1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Int64
	if err := s.GoContext(ctx, func() { ran.Add(1) }); !errors.Is(err, context.Canceled) {
		t.Errorf("GoContext(ended) = %v", err)
	}
	if err := s.Weighted(1).SubmitContext(ctx, func(context.Context) error { return nil }).Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("SubmitContext(ended) = %v", err)
	}
	//lint:ignore SA1012 a nil ctx is the bad input tested
	if err := s.GoContext(nil, func() {}); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck
		t.Errorf("GoContext(nil) = %v", err)
	}

	// A full queue: one running, one waiting.
	release := make(chan struct{})
	started := make(chan struct{})
	s.Go(func() { close(started); <-release })
	<-started
	s.Go(func() { ran.Add(1) })
	wctx, wcancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { errs <- s.GoContext(wctx, func() { ran.Add(1) }) }()
	go func() { errs <- s.SubmitContext(wctx, func(context.Context) error { return nil }).Wait() }()
	select {
	case err := <-errs:
		t.Fatalf("a Context form returned %v on a full queue", err)
	default:
	}
	wcancel()
	for range 2 {
		if err := recvWithin(t, errs, "the Context forms"); !errors.Is(err, context.Canceled) {
			t.Errorf("Context form = %v, want Canceled", err)
		}
	}
	// The plain form waits for room.
	plain := make(chan error)
	go func() { plain <- s.Go(func() { ran.Add(1) }) }()
	close(release)
	if err := recvWithin(t, plain, "Go to find room"); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	if ran.Load() != 2 {
		t.Fatalf("%d ran, want 2", ran.Load())
	}
}

// A full bounded queue: the Try forms refuse, the plain forms of a
// non-blocking Subpool fail with ErrQueueFull, and a Stop wakes a plain
// form that waits for room.
func TestSubpoolQueueFull(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	for _, nb := range []bool{false, true} {
		opts := []crew.SubpoolOption{crew.WithSubpoolQueue(2)}
		if nb {
			opts = append(opts, crew.WithSubpoolNonBlocking())
		}
		s := crew.NewSubpool(p, 1, opts...)
		release := make(chan struct{})
		started := make(chan struct{})
		s.Go(func() { close(started); <-release })
		<-started
		s.Go(func() {})
		s.Weighted(1).Go(func() {})
		if s.TryGo(func() {}) || s.Weighted(1).TryGo(func() {}) {
			t.Error("TryGo accepted a task on a full queue")
		}
		if task, ok := s.TrySubmit(func(context.Context) error { return nil }); ok || !errors.Is(task.Wait(), crew.ErrQueueFull) {
			t.Errorf("TrySubmit on a full queue: %v, %v", ok, task.Wait())
		}
		stopped := make(chan struct{})
		if nb {
			close(stopped)
			if err := s.Go(func() {}); !errors.Is(err, crew.ErrQueueFull) {
				t.Errorf("non-blocking Go = %v", err)
			}
			if err := s.Submit(func(context.Context) error { return nil }).Wait(); !errors.Is(err, crew.ErrQueueFull) {
				t.Errorf("non-blocking Submit = %v", err)
			}
		} else {
			waiting := make(chan error)
			go func() { waiting <- s.Go(func() {}) }()
			go func() { s.Stop(); close(stopped) }()
			eventually(t, "Stop to begin", func() bool { return errors.Is(s.Go(func() {}), crew.ErrStopped) })
			if err := recvWithin(t, waiting, "the waiting Go"); !errors.Is(err, crew.ErrStopped) {
				t.Errorf("a Go waiting for room when Stop began = %v", err)
			}
		}
		close(release)
		s.Stop()
		recvWithin(t, stopped, "Stop")
		if st := s.Stats(); st.Dropped != 0 || st.Unfinished != 0 {
			t.Errorf("Stats = %+v", st)
		}
	}
}

// Bad input gets an error wrapping ErrInvalid, never a hang or a crash.
func TestSubpoolBadInput(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	for name, f := range map[string]func(){
		"limit 0":            func() { crew.NewSubpool(p, 0) },
		"nil executor":       func() { crew.NewSubpool(nil, 1) },
		"queue 0":            func() { crew.NewSubpool(p, 1, crew.WithSubpoolQueue(0)) },
		"non-blocking alone": func() { crew.NewSubpool(p, 1, crew.WithSubpoolNonBlocking()) },
		"nil option":         func() { crew.NewSubpool(p, 1, nil) },
	} {
		err, panicked := newPanic(f)
		if !panicked || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: panicked %v with %v, want an ErrInvalid", name, panicked, err)
		}
	}

	s := crew.NewSubpool(p, 3)
	nop := func(context.Context) error { return nil }
	var ran atomic.Int64
	for _, w := range []int{0, -1, 4} {
		if err := s.Weighted(w).Go(func() { ran.Add(1) }); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Weighted(%d).Go = %v", w, err)
		}
		if s.Weighted(w).TryGo(func() { ran.Add(1) }) {
			t.Errorf("Weighted(%d).TryGo accepted", w)
		}
		if err := s.Weighted(w).GoContext(context.Background(), func() { ran.Add(1) }); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Weighted(%d).GoContext = %v", w, err)
		}
		if err := s.Weighted(w).Submit(nop).Wait(); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Weighted(%d).Submit = %v", w, err)
		}
		if task, ok := s.Weighted(w).TrySubmit(nop); ok || !errors.Is(task.Wait(), crew.ErrInvalid) {
			t.Errorf("Weighted(%d).TrySubmit = %v", w, task.Wait())
		}
		if err := s.Weighted(w).SubmitContext(context.Background(), nop).Wait(); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("Weighted(%d).SubmitContext = %v", w, err)
		}
	}
	if err := s.Go(nil); err != crew.ErrNilTask {
		t.Errorf("Go(nil) = %v", err)
	}
	if s.TryGo(nil) {
		t.Error("TryGo(nil) accepted")
	}
	if err := s.Submit(nil).Wait(); err != crew.ErrNilTask {
		t.Errorf("Submit(nil) = %v", err)
	}
	s.Wait()
	if ran.Load() != 0 || s.Stats().Unfinished != 0 {
		t.Fatalf("refused tasks ran or count: %d, %+v", ran.Load(), s.Stats())
	}

	// Zero and nil Subpools, and the zero Weighted.
	var nilSub *crew.Subpool
	for name, z := range map[string]*crew.Subpool{"zero": {}, "nil": nilSub} {
		if err, panicked := newPanic(func() {
			if err := z.Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s Subpool: Go = %v", name, err)
			}
			if z.TryGo(func() {}) {
				t.Errorf("%s Subpool: TryGo accepted", name)
			}
			if err := z.Submit(nop).Wait(); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s Subpool: Submit = %v", name, err)
			}
			if err := z.Weighted(2).Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s Subpool: Weighted.Go = %v", name, err)
			}
			if err := z.Shutdown(context.Background()); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s Subpool: Shutdown = %v", name, err)
			}
			z.Stop()
			z.Wait()
			if z.Stats() != (crew.SubpoolStats{}) {
				t.Errorf("%s Subpool: Stats = %+v", name, z.Stats())
			}
			if err := crew.NewKeyed[int](z).Go(1, func() {}); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("Keyed on a %s Subpool: Go = %v", name, err)
			}
		}); panicked {
			t.Errorf("%s Subpool panicked: %v", name, err)
		}
	}
	var zw crew.Weighted
	if err := zw.Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("zero Weighted: Go = %v", err)
	}
	if err := zw.Submit(nop).Wait(); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("zero Weighted: Submit = %v", err)
	}
}

// Wait and Shutdown from inside one of the Subpool's own tasks, which they
// would wait for, report ErrInsideTask; Stop returns at once.
func TestSubpoolInsideTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewSubpool(p, 2)
	var waitErr any
	var stopErr error
	done := make(chan struct{})
	s.Go(func() {
		defer close(done)
		func() {
			defer func() { waitErr = recover() }()
			s.Wait()
		}()
		s.Stop()
		stopErr = s.Shutdown(context.Background())
	})
	recvWithin(t, done, "the task")
	if e, ok := waitErr.(error); !ok || !errors.Is(e, crew.ErrInsideTask) {
		t.Errorf("Wait inside = %v, want an ErrInsideTask panic", waitErr)
	}
	if !errors.Is(stopErr, crew.ErrInsideTask) {
		t.Errorf("Shutdown inside = %v", stopErr)
	}
	s.Stop()

	// A plain task of the pool may wait for the Subpool.
	s2 := crew.NewSubpool(p, 1)
	var ran atomic.Int64
	for range 5 {
		s2.Go(func() { ran.Add(1) })
	}
	waited := p.Submit(func(context.Context) error { s2.Wait(); return nil })
	if err := waited.Wait(); err != nil || ran.Load() != 5 {
		t.Fatalf("Wait inside a plain task: %v, %d ran", err, ran.Load())
	}
}

// Random weights and producers, with a Stop or Shutdown of the Subpool at
// a random moment: limits hold, every accepted task runs or is dropped,
// each counted once.
func TestSubpoolRandomStop(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	for round := range scaled(20, 4) {
		rng := rand.New(rand.NewPCG(uint64(round), 1))
		limit := 1 + rng.IntN(6)
		s := crew.NewSubpool(p, limit)
		var level peak
		var accepted, ran, droppedTasks atomic.Int64
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for i := 0; ; i++ {
					w := 1 + (g*7+i)%limit
					body := func() { level.add(int64(w)); level.add(-int64(w)); ran.Add(1) }
					if i%2 == 0 {
						if err := s.Weighted(w).Go(body); err != nil {
							return
						}
						accepted.Add(1)
						continue
					}
					task, ok := s.Weighted(w).TrySubmit(func(context.Context) error { body(); return nil })
					if !ok {
						if errors.Is(task.Wait(), crew.ErrStopped) {
							return
						}
						continue
					}
					accepted.Add(1)
					wg.Go(func() {
						if errors.Is(task.Wait(), crew.ErrDropped) {
							droppedTasks.Add(1)
						}
					})
				}
			})
		}
		eventually(t, "tasks to run", func() bool { return ran.Load() > int64(rng.IntN(50)) })
		if round%2 == 0 {
			within(t, 10*time.Second, "Stop", s.Stop)
		} else {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			within(t, 10*time.Second, "Shutdown", func() { s.Shutdown(ctx) })
		}
		within(t, 10*time.Second, "producers", wg.Wait)
		st := s.Stats()
		if ran.Load()+int64(st.Dropped) != accepted.Load() || st.Unfinished != 0 || st.InUse != 0 {
			t.Fatalf("round %d: %d ran + %d dropped != %d accepted; %+v", round, ran.Load(), st.Dropped, accepted.Load(), st)
		}
		if droppedTasks.Load() > int64(st.Dropped) || round%2 == 0 && st.Dropped != 0 {
			t.Fatalf("round %d: %d Tasks dropped, %d counted", round, droppedTasks.Load(), st.Dropped)
		}
		if m := level.max.Load(); m > int64(limit) {
			t.Fatalf("round %d: weights %d ran at once, limit %d", round, m, limit)
		}
	}
}

// Stats().Running never counts a task that has returned: a task that
// starts as the one before it hands over its slot sees itself alone under
// a limit of one.
func TestSubpoolRunningCountsOnlyRunningTasks(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	s := crew.NewSubpool(p, 1)
	var worst atomic.Int64
	for range scaled(20000, 10) {
		s.Go(func() {
			r := int64(s.Stats().Running)
			for w := worst.Load(); r > w && !worst.CompareAndSwap(w, r); w = worst.Load() {
			}
		})
	}
	s.Wait()
	if w := worst.Load(); w != 1 {
		t.Fatalf("a task saw Stats().Running = %d under a limit of 1", w)
	}
}
