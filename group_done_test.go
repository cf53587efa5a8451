package crew_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Done closes once Done was called and no task is left, counting the
// tasks that running tasks add; Go is refused from then on and Wait
// returns the outcome at once.
func TestGroupDone(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	g := crew.NewGroup(context.Background(), p)
	release := make(chan struct{})
	var ran atomic.Int64
	boom := errors.New("boom")
	g.Go(func(ctx context.Context) error {
		<-release
		ran.Add(1)
		// A task may still add tasks: the group has not ended.
		return g.Go(func(context.Context) error { ran.Add(1); return boom })
	})
	done := g.Done()
	select {
	case <-done:
		t.Fatal("Done closed with a task running")
	default:
	}
	close(release)
	recv(t, done, "the group's end")
	if err := g.Go(func(context.Context) error { return nil }); err != crew.ErrGroupDone {
		t.Fatalf("Go after Done closed = %v, want ErrGroupDone", err)
	}
	if err := g.Wait(); err != boom || ran.Load() != 2 {
		t.Fatalf("Wait = %v after %d tasks, want boom after 2", err, ran.Load())
	}

	// Done on a group with nothing left closes at once.
	rg := crew.NewResultGroup[int](context.Background(), p)
	recv(t, rg.Done(), "an empty group's end")
	if out, err := rg.Wait(); len(out) != 0 || err != nil {
		t.Fatalf("empty ResultGroup: %v, %v", out, err)
	}
	recv(t, (*crew.Group)(nil).Done(), "a nil group's Done")
	recv(t, new(crew.ResultGroup[int]).Done(), "a zero group's Done")
}

// A group whose pool shuts down ends without a Wait: its queued tasks are
// skipped, and Done closes.
func TestGroupDoneWithoutWaitWhenThePoolShutsDown(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	g := crew.NewGroup(context.Background(), p)
	started := make(chan struct{})
	g.Go(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	var ran atomic.Int64
	for range 10 {
		g.Go(func(context.Context) error { ran.Add(1); return nil })
	}
	done := g.Done()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Shutdown(ctx) // gives up at once: cancels the running task, drops the steps
	recv(t, done, "the group's end after Shutdown")
	if err := g.Wait(); err == nil || ran.Load() != 0 {
		t.Fatalf("Wait = %v, %d queued tasks ran", err, ran.Load())
	}
}
