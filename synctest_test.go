package crew_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Pools, layers and groups made inside a testing/synctest bubble let its
// clock advance and synctest.Wait return: idle workers, keys waiting for a
// token and producers waiting for room are durably blocked, not busy.
func TestInsideSynctest(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int64
		task := func() { ran.Add(1) }
		p := crew.New(2, crew.WithIdleTimeout(time.Minute))
		p.Go(task)
		p.Wait()
		time.Sleep(time.Millisecond) // returns only if the parked workers let the clock move
		synctest.Wait()

		k := crew.NewKeyed[int](p, crew.WithKeyRate(crew.Rate{Limit: 1, Per: time.Second}))
		start := time.Now()
		for range 3 {
			k.Go(1, task)
		}
		k.Wait() // the key waits two seconds of the bubble's time for its tokens
		if waited := time.Since(start); waited < 2*time.Second {
			t.Errorf("three tasks of a key limited to one a second took %v", waited)
		}

		g := p.Group(context.Background(), crew.WithLimit(1))
		for range 4 {
			g.Go(func(ctx context.Context) error {
				time.Sleep(time.Second)
				ran.Add(1)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Error(err)
		}

		bounded := crew.New(1, crew.WithQueueSize(0))
		release := make(chan struct{})
		bounded.Go(func() { <-release })
		blocked := make(chan error, 1)
		go func() { blocked <- bounded.Go(task) }() // waits for room
		synctest.Wait()
		close(release)
		if err := <-blocked; err != nil {
			t.Error(err)
		}
		bounded.Stop()

		time.Sleep(2 * time.Minute) // idle workers retire after their timeout
		synctest.Wait()
		if s := p.Stats(); s.Workers != 0 {
			t.Errorf("%d workers live after twice the idle timeout", s.Workers)
		}
		p.Stop()
		if n := ran.Load(); n != 9 {
			t.Errorf("%d tasks ran, want 9", n)
		}
	})
}

// An idle timeout of math.MaxInt64 keeps idle workers however long the
// pool idles, and the default retires them.
func TestIdleTimeoutMaxKeepsWorkers(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		forever := crew.New(4, crew.WithIdleTimeout(math.MaxInt64))
		usual := crew.New(4)
		for _, p := range []*crew.Pool{forever, usual} {
			for range 4 {
				p.Go(func() { time.Sleep(time.Millisecond) })
			}
			p.Wait()
		}
		time.Sleep(1000 * time.Hour)
		synctest.Wait()
		if st := forever.Stats(); st.Workers != 4 {
			t.Errorf("WithIdleTimeout(math.MaxInt64): %d workers after 1,000 idle hours, want 4", st.Workers)
		}
		if st := usual.Stats(); st.Workers != 0 {
			t.Errorf("the default idle timeout: %d workers after 1,000 idle hours, want 0", st.Workers)
		}
		forever.Stop()
		usual.Stop()
	})
}
