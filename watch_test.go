package crew

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

type fakeWatcher struct {
	slot  int
	ended atomic.Int32
}

func (f *fakeWatcher) poolEnded()      { f.ended.Add(1) }
func (f *fakeWatcher) watchSlot() *int { return &f.slot }
func (f *fakeWatcher) poolStopping()   {}

// checkSlots fails t unless every watcher in ws's list knows its index.
func checkSlots(t *testing.T, ws *watchers) {
	t.Helper()
	for i, w := range ws.list {
		if got := *w.watchSlot(); got != i {
			t.Fatalf("watcher at %d keeps slot %d", i, got)
		}
	}
}

// Watchers join and leave in any order, each keeping its index; the end
// of the context cancels those left, once each, and no later one joins.
func TestWatchersJoinLeaveAndEnd(t *testing.T) {
	leak.Check(t)
	var ws watchers
	ctx := context.Background() // its AfterFunc never runs: the test calls end
	fs := make([]*fakeWatcher, 100)
	for i := range fs {
		fs[i] = &fakeWatcher{slot: -1}
		if !ws.add(ctx, fs[i]) {
			t.Fatal("add refused before the end")
		}
	}
	checkSlots(t, &ws)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, i := range rng.Perm(len(fs))[:60] {
		ws.remove(fs[i])
		ws.remove(fs[i]) // a second remove does nothing
		if fs[i].slot != -1 {
			t.Fatalf("removed watcher keeps slot %d", fs[i].slot)
		}
		checkSlots(t, &ws)
	}
	if len(ws.list) != 40 {
		t.Fatalf("%d watchers left, want 40", len(ws.list))
	}
	left := append([]watcher(nil), ws.list...)
	ws.end()
	for _, f := range fs {
		want := int32(0)
		if contains(left, f) {
			want = 1
		}
		if n := f.ended.Load(); n != want || f.slot != -1 {
			t.Fatalf("a watcher (left at the end: %v) was cancelled %d times, slot %d", want == 1, n, f.slot)
		}
	}
	late := &fakeWatcher{slot: -1}
	if ws.add(ctx, late) || late.slot != -1 {
		t.Fatal("a watcher joined after the end")
	}
	ws.remove(late)
	if late.ended.Load() != 0 {
		t.Fatal("a watcher refused after the end was cancelled or kept a slot")
	}
}

func contains(ws []watcher, f *fakeWatcher) bool {
	for _, w := range ws {
		if w == watcher(f) {
			return true
		}
	}
	return false
}

// Groups made before and after the pool's context ends are cancelled by
// it, and groups that returned from Wait have left the pool's watchers.
func TestGroupsFollowThePoolsContext(t *testing.T) {
	leak.Check(t)
	parent, cancel := context.WithCancelCause(context.Background())
	p := New(4, WithContext(parent))
	defer p.Stop()
	done := NewGroup(context.Background(), p)
	done.Go(func(context.Context) error { return nil })
	if err := done.Wait(); err != nil {
		t.Fatal(err)
	}
	before := make([]*Group, 10)
	for i := range before {
		before[i] = NewGroup(context.Background(), p)
	}
	p.core().groups.mu.Lock()
	n := len(p.core().groups.list)
	p.core().groups.mu.Unlock()
	if n != len(before) {
		t.Fatalf("%d groups watch the pool, want %d", n, len(before))
	}
	cause := errors.New("parent gone")
	cancel(cause)
	after := NewGroup(context.Background(), p)
	for _, g := range append(before, after) {
		g.Go(func(ctx context.Context) error {
			<-ctx.Done()
			return context.Cause(ctx)
		})
		if err := g.Wait(); !errors.Is(err, cause) {
			t.Fatalf("Wait = %v, want the pool's cause", err)
		}
	}
	p.core().groups.mu.Lock()
	defer p.core().groups.mu.Unlock()
	if len(p.core().groups.list) != 0 {
		t.Fatalf("%d groups left in the pool's watchers", len(p.core().groups.list))
	}
}
