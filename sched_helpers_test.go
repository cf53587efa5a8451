package crew_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
)

// Helpers of the scheduling tests: keyed_test.go, priority_test.go,
// ratelimit_test.go, funcpool_test.go and workerstate_test.go.

// schedDeadline bounds every wait of the scheduling tests: a hang fails
// the test instead of the test binary.
const schedDeadline = 10 * time.Second

// scaled returns n, or n/div under the race detector.
func scaled(n, div int) int {
	if schedRace {
		return max(1, n/div)
	}
	return n
}

// gate occupies one worker of p until the returned func is called (once or
// more); it returns once the gate task runs.
func gate(t *testing.T, p *crew.Pool) (release func()) {
	t.Helper()
	started := make(chan struct{})
	ch := make(chan struct{})
	if err := p.Go(func() { close(started); <-ch }); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, "the gate task to start")
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// recvWithin waits for ch to deliver or be closed, failing the test after
// schedDeadline.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(schedDeadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// quietPanics is a panic handler option that counts panics instead of
// logging them.
func quietPanics(n *atomic.Int64) crew.Option {
	return crew.WithPanicHandler(func(*crew.PanicError) { n.Add(1) })
}

// sentPanics is a panic handler option that sends each panic's value on
// the returned channel, which holds up to n of them.
func sentPanics(n int) (crew.Option, chan any) {
	ch := make(chan any, n)
	return crew.WithPanicHandler(func(pe *crew.PanicError) { ch <- pe.Value }), ch
}

// drained closes ch, whose senders are done, and returns what it held.
func drained[T any](ch chan T) []T {
	close(ch)
	var got []T
	for v := range ch {
		got = append(got, v)
	}
	return got
}

// poolHeldInDrain returns a one-worker pool whose Shutdown, once its
// deadline has passed, holds open the moment between dropping the queue
// and cancelling the pool's context: the Drop hook that the drop calls
// closes release, then waits until started is closed or a task (the
// released one's step) finishes.
func poolHeldInDrain(release, started chan struct{}) *crew.Pool {
	finished := make(chan struct{}, 1)
	var once sync.Once
	return crew.New(1, crew.WithHooks(crew.Hooks{
		TaskFinish: func(crew.TaskEvent) {
			select {
			case finished <- struct{}{}:
			default:
			}
		},
		Drop: func(ev crew.TaskEvent) {
			if ev.Err != crew.ErrDropped {
				return
			}
			once.Do(func() {
				close(release)
				select { // the released step goes on with the next task, or ends
				case <-started:
				case <-finished:
				case <-time.After(schedDeadline):
				}
			})
		},
	}))
}
