package crew_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// turnPatience is how long a task waits for its turn to finish before it
// finishes anyway. Tasks must all run at once for the order to hold; if
// one is held back (see TestTrapRendezvousTasks in traps_test.go), the
// order is given up rather than the test hung.
const turnPatience = time.Second

// finishOrder makes tasks finish in a chosen order: task i calls turn(i)
// to wait for its turn and hand the turn on.
type finishOrder struct {
	rank  []int
	gates []chan struct{}
	mu    sync.Mutex
	got   []int
	late  int // turns given up waiting for
}

func finishInOrder(order []int) *finishOrder {
	f := &finishOrder{rank: make([]int, len(order)), gates: make([]chan struct{}, len(order)+1)}
	for r, i := range order {
		f.rank[i] = r
	}
	for r := range f.gates {
		f.gates[r] = make(chan struct{})
	}
	close(f.gates[0])
	return f
}

func (f *finishOrder) turn(i int) {
	r := f.rank[i]
	late := false
	select {
	case <-f.gates[r]:
	case <-time.After(turnPatience):
		late = true
	}
	f.mu.Lock()
	f.got = append(f.got, i)
	if late {
		f.late++
	}
	f.mu.Unlock()
	close(f.gates[r+1])
}

// check fails t unless the tasks finished in order; if some task was held
// up by the engine, it only checks that the order was not the submission
// order.
func (f *finishOrder) check(t *testing.T, order []int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.late > 0 {
		t.Logf("%d tasks did not all run at once (engine batch hold?): finish order %v not checked", f.late, f.got)
		if slices.IsSorted(f.got) {
			t.Fatalf("tasks finished in submission order %v", f.got)
		}
		return
	}
	if !slices.Equal(f.got, order) {
		t.Fatalf("tasks finished in order %v, want %v", f.got, order)
	}
}

// TestResultGroupOrderedRandomFinish: results come back in submission order
// while the tasks finish in a random order.
func TestResultGroupOrderedRandomFinish(t *testing.T) {
	leak.Check(t)
	const n = 64
	p := crew.New(n) // every task can run at once
	defer p.Stop()
	order := rand.Perm(n)
	fo := finishInOrder(order)
	g := crew.NewResultGroup[int](context.Background(), p)
	for i := range n {
		g.Go(func(ctx context.Context) (int, error) {
			fo.turn(i)
			return i * 10, nil
		})
	}
	var res []int
	var err error
	within(t, groupDeadline, "ResultGroup.Wait", func() { res, err = g.Wait() })
	if err != nil {
		t.Fatal(err)
	}
	fo.check(t, order)
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	for i, v := range res {
		if v != i*10 {
			t.Fatalf("res[%d] = %d, want %d (results: %v)", i, v, i*10, res)
		}
	}
}

// Many results: the slots grow over several chunks.
func TestResultGroupManyResults(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 20000} {
		g := crew.NewResultGroup[int](context.Background(), p, crew.WithLimit(3))
		for i := range n {
			g.Go(func(ctx context.Context) (int, error) { return i, nil })
		}
		var res []int
		var err error
		within(t, groupDeadline, "Wait", func() { res, err = g.Wait() })
		if err != nil || len(res) != n {
			t.Fatalf("n=%d: %d results, err %v", n, len(res), err)
		}
		for i, v := range res {
			if v != i {
				t.Fatalf("n=%d: res[%d] = %d", n, i, v)
			}
		}
		again, _ := g.Wait()
		if len(again) != n || n > 0 && &again[0] != &res[0] {
			t.Fatalf("n=%d: a second Wait returned other results", n)
		}
	}
}

func TestResultGroupErrorsAndPanics(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	boom := errors.New("boom")
	// WithLimit(1): one task at a time, in order, Wait's help included.
	g := crew.NewResultGroup[string](context.Background(), p, crew.WithLimit(1))
	g.Go(func(ctx context.Context) (string, error) { return "a", nil })
	g.Go(func(ctx context.Context) (string, error) { return "partial", boom })
	var skipped atomic.Int64
	for range 5 {
		g.Go(func(ctx context.Context) (string, error) { skipped.Add(1); return "late", nil })
	}
	var res []string
	var err error
	within(t, groupDeadline, "Wait", func() { res, err = g.Wait() })
	if err != boom {
		t.Fatalf("Wait = %v, want %v", err, boom)
	}
	if len(res) != 7 || res[0] != "a" || res[1] != "partial" {
		t.Fatalf("results %q", res)
	}
	for i := 2; i < 7; i++ {
		if res[i] != "" {
			t.Fatalf("res[%d] = %q: a task after the error ran", i, res[i])
		}
	}
	if skipped.Load() != 0 {
		t.Fatalf("%d tasks ran after the error", skipped.Load())
	}
	if g.Go(func(ctx context.Context) (string, error) { return "", nil }) != crew.ErrGroupDone {
		t.Fatal("Go after Wait was accepted")
	}

	g = crew.NewResultGroup[string](context.Background(), p, crew.WithAllErrors())
	g.Go(func(ctx context.Context) (string, error) { panic("oops") })
	g.Go(func(ctx context.Context) (string, error) { return "b", nil })
	within(t, groupDeadline, "Wait", func() { res, err = g.Wait() })
	var pe *crew.PanicError
	if !errors.As(err, &pe) || len(res) != 2 || res[0] != "" || res[1] != "b" {
		t.Fatalf("Wait = %q, %v", res, err)
	}
	if g.Go(nil) != crew.ErrNilTask {
		t.Fatal("Go(nil) accepted")
	}
}
