package crew_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

// Up to two tasks of a user at once, started in the order they were
// queued; other users' tasks run beside them.
func ExampleWithKeyLimit() {
	p := crew.New(8)
	defer p.Stop()
	k := crew.NewKeyed[string](p, crew.WithKeyLimit(2))
	var running, most, done atomic.Int64
	for range 10 {
		k.Go("ann", func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // an upload
			running.Add(-1)
			done.Add(1)
		})
	}
	k.Wait()
	fmt.Println(done.Load(), most.Load() <= 2)
	// Output: 10 true
}

// Hold one account's tasks while it is migrated; other accounts go on.
func ExampleKeyed_Pause() {
	p := crew.New(4)
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	var mu sync.Mutex
	var log []string
	record := func(s string) func() {
		return func() { mu.Lock(); log = append(log, s); mu.Unlock() }
	}

	k.Pause("alice")
	k.Go("alice", record("alice 1")) // queued: the key is paused
	k.Go("alice", record("alice 2"))
	bob := make(chan struct{})
	k.Go("bob", func() { record("bob 1")(); close(bob) })
	<-bob
	mu.Lock()
	fmt.Println(log, k.Stats().Waiting)
	mu.Unlock()

	k.Resume("alice")
	k.Wait()
	fmt.Println(log)
	// Output:
	// [bob 1] 2
	// [bob 1 alice 1 alice 2]
}

// Resume starts a paused key's queued tasks, in order, and deletes the key
// once it is idle.
func ExampleKeyed_Resume() {
	p := crew.New(2)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	k.Pause(7)
	var order []int // key 7's tasks run one at a time
	for i := range 3 {
		k.Go(7, func() { order = append(order, i) })
	}
	fmt.Println(len(order), k.Stats().Keys)
	k.Resume(7)
	k.Wait()
	fmt.Println(order, k.Stats().Keys)
	// Output:
	// 0 1
	// [0 1 2] 0
}

func ExampleKeyed_Paused() {
	p := crew.New(1)
	defer p.Stop()
	k := crew.NewKeyed[string](p)
	k.Pause("tenant-a") // a key with no task yet pauses all the same
	fmt.Println(k.Paused("tenant-a"), k.Paused("tenant-b"))
	k.Resume("tenant-a")
	fmt.Println(k.Paused("tenant-a"), k.Stats().Keys)
	// Output:
	// true false
	// false 0
}
