package crew_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// holdWorkers returns a pool of n workers, each held by a task, and the
// function that lets them all finish.
func holdWorkers(t *testing.T, n int, opts ...crew.Option) (*crew.Pool, func()) {
	t.Helper()
	p := crew.New(n, opts...)
	release := make(chan struct{})
	for range n {
		started := make(chan struct{})
		if err := p.Go(func() { close(started); <-release }); err != nil {
			t.Fatal(err)
		}
		recv(t, started, "a task holding a worker")
	}
	return p, sync.OnceFunc(func() { close(release) })
}

// Tasks that a group accepted before Stop began are work already queued:
// Stop runs them as the pool's workers free up, side by side, as it runs
// the pool's own queue, so a task that waits for a later task of its group
// (a consumer for its producer) is not left waiting for ever behind a
// single worker. With the pool's bounded queue full, their steps go past
// the bound.
func TestGroupTasksAcceptedBeforeStopRunSideBySide(t *testing.T) {
	t.Run("unbounded", func(t *testing.T) { groupTasksBeforeStop(t, false) })
	t.Run("full queue", func(t *testing.T) { groupTasksBeforeStop(t, true) })
}

func groupTasksBeforeStop(t *testing.T, full bool) {
	leak.Check(t)
	var p *crew.Pool
	var release func()
	if full {
		p, release = holdWorkers(t, 2, crew.WithQueueSize(1))
		if err := p.Go(func() {}); err != nil {
			t.Fatal(err)
		}
	} else {
		p, release = holdWorkers(t, 2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := p.Group(ctx)
	produced := make(chan struct{})
	g.Go(func(ctx context.Context) error {
		select {
		case <-produced:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	g.Go(func(context.Context) error { close(produced); return nil })
	stopped := make(chan struct{})
	go func() { defer close(stopped); p.Stop() }()
	// On the full queue, Go waits for room until Stop closes the pool.
	eventually(t, "Stop to close the pool", func() bool { return p.Go(func() {}) != nil })
	release()
	select {
	case <-stopped:
	case <-time.After(groupDeadline):
		cancel() // lets the waiting task give up, and Stop return
		<-stopped
		t.Fatal("Stop still waits: the group's later task never ran beside the one waiting for it")
	}
	if err := waitGroupErr(t, g); err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
}

// barrier is for n tasks that each wait until all n have started: they
// finish only if they all run at once.
type barrier struct {
	n       int64
	started atomic.Int64
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: int64(n), all: make(chan struct{})} }

// arrive counts a task in and waits for the others, or for ctx to end.
func (b *barrier) arrive(ctx context.Context) error {
	if b.started.Add(1) == b.n {
		close(b.all)
	}
	select {
	case <-b.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A group's tasks that each wait until all of them have started all get a
// worker of their own, as many tasks as workers: a group never leaves a
// queued task without a step that the pool will start while its running
// tasks wait for it, whatever path hands on the steps (Go, a step that
// goes on with the next task, a retry, a raised limit, a full queue, a
// paused pool, a task that panics or exits).
func TestGroupTasksWaitingForEachOtherAllStart(t *testing.T) {
	leak.Check(t)
	type run func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error
	group := func(opts ...crew.GroupOption) run {
		return func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := p.Group(ctx, opts...)
			for range n {
				g.Go(b.arrive)
			}
			return g.Wait()
		}
	}
	held := func(queue int, pause bool) run {
		return func(t *testing.T, _ *crew.Pool, ctx context.Context, n int, b *barrier) error {
			var opts []crew.Option
			if queue > 0 {
				opts = append(opts, crew.WithQueueSize(queue))
			}
			p, release := holdWorkers(t, n, opts...)
			defer p.Stop()
			defer release()
			g := p.Group(ctx)
			for range n {
				g.Go(b.arrive)
			}
			if pause {
				p.Pause()
			}
			release()
			if pause {
				p.Resume()
			}
			return g.Wait()
		}
	}
	cases := []struct {
		name string
		run  run
	}{
		{"Go", group()},
		{"Go, a limit above n", group(crew.WithLimit(1 << 20))},
		{"Go, all errors", group(crew.WithAllErrors())},
		{"workers held, then freed", held(0, false)},
		{"workers held, queue of 1", held(1, false)},
		{"workers held, paused, then resumed", held(0, true)},
		{"TryGo, limit n", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := p.Group(ctx, crew.WithLimit(n))
			for range n {
				if !g.TryGo(b.arrive) {
					t.Error("TryGo refused a task within the limit")
				}
			}
			return g.Wait()
		}},
		{"SetLimit from 1 to n", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := p.Group(ctx, crew.WithLimit(1))
			for range n {
				g.Go(b.arrive)
			}
			eventually(t, "the first task to start", func() bool { return b.started.Load() >= 1 })
			if err := g.SetLimit(n); err != nil {
				t.Fatal(err)
			}
			return g.Wait()
		}},
		{"first calls fail, retried", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := p.Group(ctx, crew.WithRetry(crew.Retry{Attempts: 2}))
			for range n {
				var calls atomic.Int32
				g.Go(func(ctx context.Context) error {
					if calls.Add(1) == 1 {
						return errors.New("first call")
					}
					return b.arrive(ctx)
				})
			}
			return g.Wait()
		}},
		{"panics and exits ahead, all errors", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := p.Group(ctx, crew.WithAllErrors())
			g.Go(func(context.Context) error { panic("ahead") })
			g.Go(func(context.Context) error { runtime.Goexit(); return nil })
			for range n {
				g.Go(b.arrive)
			}
			<-g.Done() // Wait, which could run the Goexit on this goroutine, finds them done
			err := g.Wait()
			var pe *crew.PanicError
			if !errors.As(err, &pe) || !errors.Is(err, crew.ErrGoexit) {
				t.Errorf("Wait = %v, want the panic and the Goexit", err)
			}
			return nil
		}},
		{"ResultGroup", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			g := crew.NewResultGroup[int](ctx, p)
			for i := range n {
				g.Go(func(ctx context.Context) (int, error) { return i, b.arrive(ctx) })
			}
			_, err := g.Wait()
			return err
		}},
		{"Stream", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			s := crew.NewStream(ctx, p)
			var errs []error
			for range n {
				s.Go(func(ctx context.Context) func() {
					err := b.arrive(ctx)
					return func() { errs = append(errs, err) }
				})
			}
			return errors.Join(append(errs, s.Wait())...)
		}},
		{"ForEach", func(t *testing.T, p *crew.Pool, ctx context.Context, n int, b *barrier) error {
			return crew.ForEach(ctx, p, make([]int, n), func(ctx context.Context, _ int) error { return b.arrive(ctx) })
		}},
	}
	for _, workers := range []int{1, 2, 8} {
		for _, c := range cases {
			p := crew.New(workers)
			ctx, cancel := context.WithTimeout(context.Background(), groupDeadline) // a guard: the tasks give up
			b := newBarrier(workers)
			var err error
			within(t, 2*groupDeadline, c.name, func() { err = c.run(t, p, ctx, workers, b) })
			if started := b.started.Load(); err != nil || started != int64(workers) {
				t.Errorf("%s, %d workers: %d of the tasks started, Wait = %v", c.name, workers, started, err)
			}
			cancel()
			p.Stop()
		}
	}
}
