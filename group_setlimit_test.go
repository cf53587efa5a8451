package crew_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// gauge counts the tasks running at once.
type gauge struct {
	now atomic.Int64
	// after, once set, makes enter record in over any count above it.
	after, over atomic.Int64
}

// held queues n tasks through goTask that each count themselves in g until
// release is closed.
func (g *gauge) held(n int, release <-chan struct{}, goTask func(func())) {
	for range n {
		goTask(func() {
			if now, after := g.now.Add(1), g.after.Load(); after > 0 && now > after {
				g.over.Store(now)
			}
			defer g.now.Add(-1)
			<-release
		})
	}
}

// reaches waits until exactly n tasks run at once.
func (g *gauge) reaches(t *testing.T, n int64) {
	t.Helper()
	waitUntil(t, 5*time.Second, "tasks running at once", func() bool { return g.now.Load() == n })
}

func groupTask(g *crew.Group) func(func()) {
	return func(f func()) { g.Go(func(context.Context) error { f(); return nil }) }
}

// Raising a group's limit starts its queued tasks at once, up to the new
// limit; lowering it lets the running tasks finish and starts no task
// while as many as the new limit run.
func TestGroupSetLimit(t *testing.T) {
	leak.Check(t)
	for _, c := range []struct{ from, to int64 }{{1, 4}, {4, 1}} {
		p := crew.New(8)
		g := p.Group(context.Background(), crew.WithLimit(int(c.from)))
		var running gauge
		release := make(chan struct{})
		running.held(12, release, groupTask(g))
		running.reaches(t, c.from)
		if err := g.SetLimit(int(c.to)); err != nil {
			t.Fatal(err)
		}
		if c.to > c.from {
			running.reaches(t, c.to)
		}
		running.after.Store(c.to)
		close(release)
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if n := running.over.Load(); n != 0 {
			t.Errorf("limit %d to %d: a task started with %d running", c.from, c.to, n)
		}
		p.Stop()
	}
}

// A negative limit removes it; zero, and a nil or zero group, are errors.
func TestGroupSetLimitBadInput(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := p.Group(context.Background(), crew.WithLimit(1))
	if err := g.SetLimit(0); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("SetLimit(0) = %v, want ErrInvalid", err)
	}
	if err := g.SetLimit(-1); err != nil {
		t.Errorf("SetLimit(-1) = %v", err)
	}
	var running gauge
	release := make(chan struct{})
	running.held(4, release, groupTask(g))
	running.reaches(t, 4) // no limit but the pool's
	close(release)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var nilGroup *crew.Group
	var zero crew.Group
	var nilResults *crew.ResultGroup[int]
	for name, err := range map[string]error{
		"nil Group": nilGroup.SetLimit(1), "zero Group": zero.SetLimit(1), "nil ResultGroup": nilResults.SetLimit(1),
	} {
		if !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: SetLimit = %v, want ErrInvalid", name, err)
		}
	}
}

// A ResultGroup's limit changes as a Group's does, and its results stay in
// submission order.
func TestResultGroupSetLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	g := crew.NewResultGroup[int](context.Background(), p, crew.WithLimit(1))
	var running gauge
	release := make(chan struct{})
	i := 0
	running.held(4, release, func(f func()) {
		v := i
		i++
		g.Go(func(context.Context) (int, error) { f(); return v, nil })
	})
	running.reaches(t, 1)
	if err := g.SetLimit(4); err != nil {
		t.Fatal(err)
	}
	running.reaches(t, 4)
	close(release)
	got, err := g.Wait()
	if err != nil || len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Fatalf("Wait = %v, %v", got, err)
	}
}
