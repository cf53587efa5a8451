package crew

import (
	"sync"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

// A Shutdown that passes over a listed task races the task's Submit, which
// moves it from pushing to accepted as its push returns. Whichever comes
// first, the task must end marked: passed (Submit then reports it dropped)
// or dropped (Shutdown completes it). A task left accepted after
// Shutdown's look is never completed, and a running task that waits for
// it holds Shutdown for ever.
func TestPassOverRacingSubmitAlwaysMarksTheTask(t *testing.T) {
	leak.Check(t)
	const rounds = 200_000
	var tk Task
	var wg sync.WaitGroup
	for i := range rounds {
		tk.state.Store(pushing)
		start := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tk.state.CompareAndSwap(pushing, accepted) // Submit's push returned
		}()
		close(start)
		got := tk.dropUnstarted()
		wg.Wait()
		switch s := tk.state.Load(); {
		case s != dropped && s != passed:
			t.Fatalf("round %d: state %d after dropUnstarted and Submit, want dropped or passed", i, s)
		case got != s:
			t.Fatalf("round %d: dropUnstarted returned %d, state is %d", i, got, s)
		}
	}
}

// Cancel of a Retrying's task races the task's call, which, failing with
// an error the policy retries, moves it from started back to accepted to
// wait for its delay. Whichever comes first, Cancel must take effect:
// interrupted (the call then finishes the task instead of delaying it) or
// cancelled (Cancel finishes it). A Cancel that finds it started and then
// accepted does neither: it returns false, and the task is retried as if
// Cancel had never been called.
func TestCancelRacingRetryDelayIsNeverLost(t *testing.T) {
	leak.Check(t)
	const rounds = 200_000
	r := &Retrying{pending: map[*retryTask]struct{}{}}
	var wg sync.WaitGroup
	for i := range rounds {
		tk := &Task{done: make(chan struct{}), layered: true}
		tk.retry = &retryTask{r: r, t: tk}
		tk.state.Store(started) // its call is running
		start := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r.mu.Lock()
			tk.state.CompareAndSwap(started, accepted) // the call failed: later puts it aside
			r.mu.Unlock()
		}()
		close(start)
		ok := tk.Cancel()
		wg.Wait()
		switch s := tk.state.Load(); {
		case ok != (s == cancelled):
			t.Fatalf("round %d: Cancel returned %v, state is %d", i, ok, s)
		case s != cancelled && s != interrupted:
			t.Fatalf("round %d: state %d after Cancel and the call's failure, want cancelled or interrupted: the Cancel is lost", i, s)
		}
	}
}
