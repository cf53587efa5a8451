package crew

import (
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

// ownerFunc is a stepOwner that calls itself when told a step was dropped.
type ownerFunc func()

func (f ownerFunc) stepDropped() { f() }

// An owed step that the pool refuses once it has stopped fires the Drop
// hook with ErrStopped, as every step the pool refuses does (see Hooks),
// and its owner is told before owe returns.
func TestOwedStepRefusedByAStoppedPoolFiresDrop(t *testing.T) {
	leak.Check(t)
	var drops atomic.Int32
	p := New(1, WithQueueSize(0), WithHooks(Hooks{Drop: func(e TaskEvent) {
		if e.Err == ErrStopped {
			drops.Add(1)
		}
	}}))
	p.Stop()
	var st stepper
	st.init(p)
	var told atomic.Int32
	st.owe(layerStep{run: func() { t.Error("a step the stopped pool refused ran") }, owner: ownerFunc(func() { told.Add(1) })})
	if n := told.Load(); n != 1 {
		t.Fatalf("the owner was told %d times of its refused step, want 1", n)
	}
	if n := drops.Load(); n != 1 {
		t.Fatalf("Drop fired %d times with ErrStopped for the refused step, want 1", n)
	}
}
