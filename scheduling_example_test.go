package crew_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

func ExampleNewFunc() {
	var total atomic.Int64
	p := crew.NewFunc(4, func(ctx context.Context, n int) error {
		total.Add(int64(n))
		return nil
	})
	for i := 1; i <= 100; i++ {
		p.Invoke(i) // queues the int itself: no allocation
	}
	p.Stop()
	fmt.Println(total.Load())
	// Output: 5050
}

func ExampleWithErrorHandler() {
	var mu sync.Mutex
	var failed []string
	p := crew.NewFunc(2, func(ctx context.Context, name string) error {
		if strings.HasPrefix(name, "bad") {
			return fmt.Errorf("cannot process %s", name)
		}
		return nil
	}, crew.WithErrorHandler(func(err error) {
		mu.Lock()
		failed = append(failed, err.Error())
		mu.Unlock()
	}))
	for _, name := range []string{"a", "bad-b", "c"} {
		p.Invoke(name)
	}
	p.Stop()
	fmt.Println(failed, p.Stats().Failed)
	// Output: [cannot process bad-b] 1
}

// Each worker owns a buffer: tasks use it without a lock, and it is
// released when the worker retires.
func ExampleNewFuncWithState() {
	var made, released atomic.Int64
	var mu sync.Mutex
	var out []string
	p := crew.NewFuncWithState(2,
		func(ctx context.Context) (*strings.Builder, error) { // once per worker
			made.Add(1)
			return new(strings.Builder), nil
		},
		func(b *strings.Builder) { released.Add(1) }, // when the worker retires
		func(ctx context.Context, b *strings.Builder, word string) error {
			b.Reset() // this worker's own buffer: no other call uses it now
			b.WriteString(strings.ToUpper(word))
			mu.Lock()
			out = append(out, b.String())
			mu.Unlock()
			return nil
		})
	for _, w := range []string{"a", "b", "c", "d"} {
		p.Invoke(w)
	}
	p.Stop()
	fmt.Println(len(out), made.Load() <= 2, made.Load() == released.Load())
	// Output: 4 true true
}

// Tasks of one key run one at a time, in order; keys run in parallel.
func ExampleKeyed() {
	p := crew.New(8)
	defer p.Stop()
	k := crew.NewKeyed[string](p)

	balance := map[string]*int{"alice": new(int), "bob": new(int)} // only read while tasks run
	for range 100 {
		// No lock: tasks of one account never overlap, and each sees the
		// effects of the ones submitted before it.
		k.Go("alice", func() { *balance["alice"] += 2 })
		k.Go("bob", func() { *balance["bob"] -= 1 })
	}
	k.Wait()
	fmt.Println(*balance["alice"], *balance["bob"], k.Stats().Keys)
	// Output: 200 -100 0
}

// A Keyed built on a RateLimited runs the tasks of each key in order, and
// those of all keys together at the limiter's rate.
func ExampleNewKeyed() {
	p := crew.New(8)
	defer p.Stop()
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 1000, Per: time.Second, Burst: 10})
	k := crew.NewKeyed[string](rl)

	sent := map[string]*[]int{"ann": new([]int), "bob": new([]int)} // only read while tasks run
	for i := range 3 {
		for _, user := range []string{"ann", "bob"} {
			// No lock: the tasks of one key never overlap.
			if err := k.Go(user, func() { *sent[user] = append(*sent[user], i) }); err != nil {
				fmt.Println(err)
			}
		}
	}
	k.Wait()
	fmt.Println(*sent["ann"], *sent["bob"])
	// Output: [0 1 2] [0 1 2]
}

func ExampleKeyed_Submit() {
	p := crew.New(4)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	var log []string // key 7's tasks run one at a time, in order
	for i := range 3 {
		k.Go(7, func() { log = append(log, fmt.Sprint("step ", i)) })
	}
	t := k.Submit(7, func(ctx context.Context) error { return errors.New("step 3 failed") })
	fmt.Println(t.Wait())
	fmt.Println(log)
	// Output:
	// step 3 failed
	// [step 0 step 1 step 2]
}

// A per-key rate: each key starts at most 2 tasks per 10ms (a burst of 2).
func ExampleWithKeyRate() {
	p := crew.New(4)
	defer p.Stop()
	k := crew.NewKeyed[string](p, crew.WithKeyRate(crew.Rate{Limit: 2, Per: 10 * time.Millisecond, Burst: 2}))
	start := time.Now()
	for range 6 {
		k.Go("api.example.com", func() {})
	}
	k.Wait()
	// 2 at once, then one every 5ms: at least 20ms.
	fmt.Println(time.Since(start) >= 20*time.Millisecond)
	// Output: true
}

func ExamplePriority() {
	p := crew.New(1)
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(time.Second))

	// Hold the only worker while tasks queue up. (Wait until it holds it:
	// the pool's queue is sharded, so a later task might start first.)
	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started

	var order []string
	for _, t := range []struct {
		name string
		prio int
	}{{"batch", 0}, {"report", 1}, {"user request", 10}, {"backup", 0}} {
		q.Go(t.prio, func() { order = append(order, t.name) })
	}
	close(release)
	q.Wait()
	fmt.Println(strings.Join(order, ", "))
	// Output: user request, report, batch, backup
}

// WithAging(0) makes priorities strict: tasks of one priority start in
// submission order, and only after every queued task of a higher one.
func ExampleNewPriority() {
	p := crew.New(1)
	defer p.Stop()
	q := crew.NewPriority(p, crew.WithAging(0))

	// Hold the only worker while tasks queue up.
	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started

	var order []string
	for _, name := range []string{"low 1", "high 1", "low 2", "high 2"} {
		prio := 0
		if strings.HasPrefix(name, "high") {
			prio = 1
		}
		q.Go(prio, func() { order = append(order, name) })
	}
	close(release)
	q.Wait()
	fmt.Println(strings.Join(order, ", "))
	// Output: high 1, high 2, low 1, low 2
}

func ExampleRateLimited() {
	p := crew.New(4)
	defer p.Stop()
	// At most 100 starts per second, evenly spread, bursts of up to 5.
	rl := crew.NewRateLimited(p, crew.Rate{Limit: 100, Per: time.Second, Burst: 5})
	var n atomic.Int64
	start := time.Now()
	for range 10 {
		rl.Go(func() { n.Add(1) })
	}
	rl.Wait()
	// 5 at once, then one every 10ms.
	fmt.Println(n.Load(), time.Since(start) >= 50*time.Millisecond)
	// Output: 10 true
}

// Submit on a RateLimited returns a Task, so that the error of a
// rate-limited call comes back to its caller.
func ExampleNewRateLimited() {
	p := crew.New(4)
	defer p.Stop()
	// At most 50 calls per second, in bursts of up to 10.
	api := crew.NewRateLimited(p, crew.Rate{Limit: 50, Per: time.Second, Burst: 10})

	var tasks []*crew.Task
	for id := range 3 {
		tasks = append(tasks, api.Submit(func(ctx context.Context) error {
			if id == 1 {
				return fmt.Errorf("item %d: not found", id)
			}
			return nil
		}))
	}
	for id, t := range tasks {
		if err := t.Wait(); err != nil {
			fmt.Println("item", id, "failed:", err)
		}
	}
	// Output: item 1 failed: item 1: not found
}
