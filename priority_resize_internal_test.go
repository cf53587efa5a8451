package crew

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// A Priority step whose worker is one too many after Resize lowered the
// pool's limit does not run a task left without a step (see settle) after
// its own: it owes that task a step, which runs it, not dropped, once the
// pool has room.
func TestPriorityStepOverLimitAfterResizeOwesTasksWithoutAStep(t *testing.T) {
	leak.Check(t)
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s; goroutines:\n\n%s", what, leak.Dump())
		}
	}
	p := New(2, WithQueueSize(0))
	defer p.Stop()
	gateStarted, gate := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	if err := p.Go(func() { close(gateStarted); <-gate }); err != nil {
		t.Fatal(err)
	}
	within(gateStarted, "the gate task")
	q := NewPriority(p)
	owing := make(chan struct{}, 1)
	q.l.steps.send = func(ctx context.Context, s layerStep, mode pushMode) error {
		if mode == pushPast { // an owed step
			select {
			case owing <- struct{}{}:
			default:
			}
		}
		return q.l.steps.sendTo(ctx, s, mode)
	}
	started, head := make(chan struct{}), make(chan struct{})
	if err := q.Go(0, func() { close(started); <-head }); err != nil {
		t.Fatal(err)
	}
	within(started, "the first task")
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	// A task without a step, as a refused submission leaves one when
	// another step took its task: the running step adopts it.
	var ran atomic.Int64
	orphanRan := make(chan struct{})
	q.mu.Lock()
	q.heapPush(prioItem{key: q.key(0), seq: q.seq, slot: q.store(layerEntry{fn: func() {
		if ran.Add(1) == 1 {
			close(orphanRan)
		}
	}})})
	q.seq++
	q.l.accept()
	q.countOrphans()
	q.mu.Unlock()
	close(head)
	select {
	case <-owing:
	case <-orphanRan:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for the task without a step to be owed one, or to run; goroutines:\n\n%s", leak.Dump())
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tasks ran beside the gate, in a pool limited to one", n)
	}
	close(gate)
	q.Wait()
	if n := ran.Load(); n != 1 {
		t.Errorf("the task without a step ran %d times, want once", n)
	}
	if s := q.Stats(); s.Dropped != 0 {
		t.Errorf("Stats().Dropped = %d, want 0", s.Dropped)
	}
}
