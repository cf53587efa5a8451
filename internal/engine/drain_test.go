package engine

import (
	"context"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// A Drop that panics skips the calls for the tasks after its own, not their
// count: Wait returns once the running task has, and Stats counts every
// drained task as dropped.
func TestDrainCountsWhenDropPanics(t *testing.T) {
	leak.Check(t)
	calls := 0
	e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, IdleTimeout: time.Hour, Run: func(f func()) { f() },
		Drop: func(func()) { calls++; panic("drop") }})
	release := occupy(t, e, 1)
	for range 3 {
		if err := e.Push(nil, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	func() {
		defer func() {
			if r := recover(); r != "drop" {
				t.Errorf("Drain: recovered %v, want Drop's panic", r)
			}
		}()
		e.Drain()
	}()
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Wait(ctx); err != nil {
		t.Fatalf("Wait after the panicking Drain: %v (Stats %+v)", err, e.Stats())
	}
	e.Exit()
	if s := e.Stats(); calls != 1 || s.Dropped != 3 || s.Unfinished != 0 {
		t.Errorf("Drop called %d times, Stats %+v; want 1 call and 3 dropped", calls, s)
	}
}
