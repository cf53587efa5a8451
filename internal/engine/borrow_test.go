package engine

import (
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// parkedEngine returns an engine of one worker that has run a task and
// parked, asleep.
func parkedEngine(t *testing.T) *Engine[func()] {
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() }})
	if err := e.Push(nil, func() {}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to park", func() bool { return e.idle.asleep.Load() == 1 })
	return e
}

// At the limit, a parked worker lends its slot to a borrower and stays
// parked: a task pushed meanwhile waits, as the limit is taken, and runs
// once Return lists the worker again.
func TestBorrowTakesAParkedWorkersSlot(t *testing.T) {
	leak.Check(t)
	e := parkedEngine(t)
	defer stop(e)
	if !e.Borrow() {
		t.Fatal("Borrow at the limit with a parked worker failed")
	}
	if e.Borrow() {
		t.Fatal("a second Borrow succeeded beyond the limit")
	}
	ran := make(chan struct{})
	if err := e.Push(nil, func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	// Nobody can take it: the worker is off the idle list, and the
	// limit leaves no room for another.
	if st := e.Stats(); st.Workers != 1 || st.Idle != 0 || st.Queued != 1 || e.idle.n.Load() != 0 {
		t.Fatalf("while lent: %+v, %d listed; want one worker, none idle or listed, one task queued", st, e.idle.n.Load())
	}
	e.Return()
	<-ran
}

// A slot a parked worker lent and that comes back after Close wakes the
// worker, which retires: Exit does not wait for it for ever.
func TestBorrowedParkedSlotReturnedAfterClose(t *testing.T) {
	leak.Check(t)
	e := parkedEngine(t)
	if !e.Borrow() {
		t.Fatal("Borrow at the limit with a parked worker failed")
	}
	e.Close()
	e.Return()
	if !stWithin(t, 5*time.Second, "Wait and Exit", func() { e.Wait(nil); e.Exit() }) {
		t.Fatal("the lent worker never retired")
	}
}
