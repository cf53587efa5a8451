package crew

import (
	"sync"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

// On a Subpool (or a RateLimited), a step that finds tasks without a step
// after its own task drops them (see adopt): it takes them off the heap
// under q.mu and counts them done after. A pending step that fails
// meanwhile (dropped by Subpool.Shutdown, or its submission refused by a
// stopped Subpool) settles: it must not take the tasks being dropped for a
// task that a running step runs, which would come back for the task it
// leaves without a step. Whichever comes first, both tasks must end
// dropped, none left in the heap for ever.
func TestPriorityAdoptRacingStepFailureLeavesNoTask(t *testing.T) {
	leak.Check(t)
	const rounds = 100_000
	p := New(1)
	defer p.Stop()
	q := NewPriority(NewSubpool(p, 1)) // a Subpool: adopt drops, never runs inline
	newTask := func() *Task {
		tk := &Task{p: p, done: make(chan struct{}), layered: true}
		tk.state.Store(accepted)
		return tk
	}
	var wg sync.WaitGroup
	for i := range rounds {
		// Two tasks queued, one step pending: one task has no step, and
		// the step that ran last is about to adopt it.
		a, b := newTask(), newTask()
		q.mu.Lock()
		for j, tk := range []*Task{a, b} {
			q.heapPush(prioItem{key: int64(j), seq: q.seq, slot: q.store(layerEntry{t: tk})})
			q.seq++
			q.l.accept()
		}
		q.pending = 1
		q.countOrphans()
		q.mu.Unlock()

		start := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			q.stepFailed(ErrDropped) // the pending step, dropped by Subpool.Shutdown
		}()
		close(start)
		if _, ok := q.adopt(); ok {
			t.Fatal("adopt on a Subpool took a task to run inline")
		}
		wg.Wait()

		q.mu.Lock()
		left := len(q.h)
		q.mu.Unlock()
		if n := q.l.unfinished.Load(); left != 0 || n != 0 {
			t.Fatalf("round %d: %d tasks left in the heap without a step, %d unfinished, after the adopting step and the failed step both returned", i, left, n)
		}
		for _, tk := range []*Task{a, b} {
			if err := tk.Wait(); err != ErrDropped {
				t.Fatalf("round %d: a task ended with %v, want ErrDropped", i, err)
			}
		}
	}
}
