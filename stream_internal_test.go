package crew

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/gocrew/crew/internal/leak"
)

// A producer that reserved the last place in a stream's window pushes its
// task only after it let go of the stream's lock. Another producer, a task
// holding the pool's only worker, may look for a queued task to run in
// between, find none and park: the task pushed next must still get a
// worker, and the parked Go must return once its callback has run.
func TestStreamGoParkedBeforeReservedPushInsideSaturatedPool(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := New(1)
		defer p.Stop()
		s := NewStream(context.Background(), p) // a window of 1
		ran := make(chan string, 2)
		task := func(name string) func(context.Context) func() {
			return func(context.Context) func() { return func() { ran <- name } }
		}
		// The first producer's Go, up to its push: the window is full.
		s.mu.Lock()
		s.inflight++
		s.mu.Unlock()
		parked := make(chan error, 1)
		p.Go(func() { parked <- s.Go(task("second")) })
		synctest.Wait() // the second Go looked for a task to run and parked
		if err := s.c.push(task("first"), false); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-parked:
			if err != nil {
				t.Error(err)
			}
		default:
			t.Error("the task pushed behind a Go parked on the pool's only worker never ran, and that Go never returned")
			s.c.cancel(context.Canceled) // let the parked Go and the pool go
			<-parked
		}
		if err := s.Wait(); err != nil && err != context.Canceled {
			t.Error(err)
		}
	})
}
