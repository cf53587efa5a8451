package crew_test

import (
	"context"
	"sync"
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
// single worker.
func TestGroupTasksAcceptedBeforeStopRunSideBySide(t *testing.T) {
	leak.Check(t)
	p, release := holdWorkers(t, 2)
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
