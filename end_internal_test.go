package crew

import (
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

// Shutdown past its deadline marks the end before it drains the queue, so
// a worker may still start a queued task in between. A first call to Done
// made there must not return a closed channel: Done is closed only once
// the pool will start none of its queued tasks.
func TestDoneFirstCalledBetweenMarkAndDrainIsNotClosed(t *testing.T) {
	leak.Check(t)
	p := New(1)
	release := make(chan struct{})
	running := make(chan struct{})
	if err := p.Go(func() { close(running); <-release }); err != nil {
		t.Fatal(err)
	}
	<-running
	started := make(chan bool, 1)
	var done <-chan struct{}
	if err := p.Go(func() {
		select {
		case <-done:
			started <- true // Done was closed, and yet the pool starts a queued task
		default:
			started <- false
		}
	}); err != nil {
		t.Fatal(err)
	}

	p.c.end.mark() // as Shutdown does once its deadline has passed, before its drain
	p.c.end.release()
	done = p.Done()
	close(release) // the worker is free, and starts the queued task before any drain
	if <-started {
		t.Error("the pool started a queued task after Done was closed")
	}

	p.Stop()
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Stop returned")
	}
}
