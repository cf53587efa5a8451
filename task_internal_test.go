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
