package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// inTask runs f as a task of e and returns its result.
func inTask(t *testing.T, e *Engine[func()], f func() bool) bool {
	t.Helper()
	got := make(chan bool, 1)
	if err := e.Push(nil, func() { got <- f() }); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("task did not run")
		return false
	}
}

func TestInWorkerTellsEnginesApart(t *testing.T) {
	leak.Check(t)
	// Numbers with long and short, dense and sparse digit runs.
	for _, first := range []uint64{0, 1 << 20, 1<<40 - 3, 1<<63 - 5} {
		t.Run(fmt.Sprint(first), func(t *testing.T) {
			if lastID.Load() < first {
				lastID.Store(first)
			}
			a, b := newFuncEngine(2), newFuncEngine(2)
			defer stop(a)
			defer stop(b)
			if a.InWorker() || b.InWorker() {
				t.Fatal("InWorker is true outside any task")
			}
			if !inTask(t, a, a.InWorker) {
				t.Error("a.InWorker is false inside a task of a")
			}
			if inTask(t, a, b.InWorker) {
				t.Error("b.InWorker is true inside a task of a")
			}
			if !inTask(t, b, b.InWorker) {
				t.Error("b.InWorker is false inside a task of b")
			}
		})
	}
}

func TestInWorkerOnADeepStack(t *testing.T) {
	leak.Check(t)
	e := newFuncEngine(1)
	defer stop(e)
	var deep func(n int) bool
	deep = func(n int) bool {
		if n == 0 {
			return e.InWorker()
		}
		return deep(n - 1)
	}
	if !inTask(t, e, func() bool { return deep(1000) }) {
		t.Error("InWorker is false a thousand frames deep in a task")
	}
}

func TestRunAsMarksItsCallsOnly(t *testing.T) {
	leak.Check(t)
	// Numbers with zero digits, every digit value and all 16 digits.
	for _, id := range []uint64{1, 0x10, 0x1000000000000000, 0x123456789abcdef0, 1<<64 - 1} {
		other := id ^ 0x100 // one digit apart
		var inside, nested, otherInside bool
		RunAs(id, Func(func() {
			inside = CallerIs(id)
			otherInside = CallerIs(other)
			RunAs(other, Func(func() { nested = CallerIs(id) && CallerIs(other) }))
		}))
		switch {
		case !inside:
			t.Errorf("CallerIs(%#x) is false inside RunAs(%#x)", id, id)
		case otherInside:
			t.Errorf("CallerIs(%#x) is true inside RunAs(%#x) only", other, id)
		case !nested:
			t.Errorf("nested RunAs(%#x) inside RunAs(%#x): not under both", other, id)
		case CallerIs(id):
			t.Errorf("CallerIs(%#x) is true after RunAs returned", id)
		}
	}
	ran := false
	RunAs(0, Func(func() { ran = !CallerIs(0) }))
	if !ran {
		t.Error("RunAs(0, f) did not run f, or CallerIs(0) is true")
	}
}

func TestRunAsAllocatesNothing(t *testing.T) {
	leak.Check(t)
	id := NewID()
	n := 0
	f := Func(func() { n++ })
	if allocs := testing.AllocsPerRun(100, func() { RunAs(id, f) }); allocs != 0 || n == 0 {
		t.Errorf("RunAs: %v allocations per call (f ran %d times), want 0", allocs, n)
	}
}

func TestCallerIsAllocatesNothingOnceItKnowsTheStack(t *testing.T) {
	leak.Check(t)
	id := NewID()
	var allocs float64
	var under bool
	RunAs(id, Func(func() {
		// AllocsPerRun's warm-up call learns the stack's frames.
		allocs = testing.AllocsPerRun(100, func() { under = CallerIs(id) })
	}))
	if !under {
		t.Errorf("CallerIs(%d) is false inside RunAs(%d)", id, id)
	}
	if allocs != 0 {
		t.Errorf("CallerIs: %v allocations per call, want 0", allocs)
	}
}

func TestCallerIsWithAFullCache(t *testing.T) {
	leak.Check(t)
	defer func(n int) { maxFrames = n }(maxFrames)
	maxFrames = 0 // full: no walk adds to the cache
	id, other := NewID(), NewID()
	RunAs(id, Func(func() {
		if !CallerIs(id) || CallerIs(other) {
			t.Errorf("with a full cache, CallerIs(id) = %v and CallerIs(other) = %v inside RunAs(id); want true, false", CallerIs(id), CallerIs(other))
		}
	}))
	if CallerIs(id) {
		t.Error("with a full cache, CallerIs(id) is true after RunAs returned")
	}
}
