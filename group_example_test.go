package crew_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

func ExampleGroup() {
	p := crew.New(8)
	defer p.Stop()

	g := p.Group(context.Background())
	var sizes [3]int
	for i, name := range []string{"a.txt", "bb.txt", "ccc.txt"} {
		g.Go(func(ctx context.Context) error {
			sizes[i] = len(name) // each task writes its own element
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
	}
	fmt.Println(sizes)
	// Output: [5 6 7]
}

// NewGroup is Pool.Group as a function. The group's context derives from
// ctx: when ctx ends, the running tasks see their context cancelled and
// those not yet started are skipped.
func ExampleNewGroup() {
	p := crew.New(8)
	defer p.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := crew.NewGroup(ctx, p, crew.WithLimit(2)) // at most 2 of its tasks at once
	var squares [4]int
	for i := range squares {
		g.Go(func(ctx context.Context) error {
			squares[i] = i * i // each task writes its own element
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(squares)
	// Output: [0 1 4 9]
}

// The first error cancels the group: tasks that have not started are
// skipped, running ones see their context cancelled.
func ExampleGroup_firstError() {
	p := crew.New(1)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithLimit(1))
	var started atomic.Int64
	g.Go(func(ctx context.Context) error { return errors.New("disk full") })
	for range 10 {
		g.Go(func(ctx context.Context) error { started.Add(1); return nil })
	}
	fmt.Println(g.Wait(), started.Load())
	// Output: disk full 0
}

// Go after Wait returns an error instead of panicking.
func ExampleGroup_Go() {
	p := crew.New(2)
	defer p.Stop()

	g := p.Group(context.Background())
	g.Go(func(ctx context.Context) error { return nil })
	g.Wait()
	fmt.Println(g.Go(func(ctx context.Context) error { return nil }))
	// Output: crew: group is done: Go after Wait returned
}

// TryGo starts a task only if the group's limit lets it start at once;
// otherwise the caller keeps the work, to do it itself or shed it.
func ExampleGroup_TryGo() {
	p := crew.New(4)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithLimit(1))
	release := make(chan struct{})
	fmt.Println(g.TryGo(func(ctx context.Context) error { <-release; return nil }))
	fmt.Println(g.TryGo(func(ctx context.Context) error { return nil })) // the limit is reached
	close(release)
	fmt.Println(g.Wait())
	// Output:
	// true
	// false
	// <nil>
}

// A panic comes back from Wait as a *PanicError.
func ExampleGroup_Wait() {
	p := crew.New(2)
	defer p.Stop()

	g := p.Group(context.Background())
	g.Go(func(ctx context.Context) error { panic("bug") })
	var pe *crew.PanicError
	fmt.Println(errors.As(g.Wait(), &pe), pe.Value)
	// Output: true bug
}

func ExampleWithLimit() {
	p := crew.New(100)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithLimit(2))
	var running, peak atomic.Int64
	for range 20 {
		g.Go(func(ctx context.Context) error {
			n := running.Add(1)
			if n > peak.Load() {
				peak.Store(n) // racy max, but n never exceeds the limit
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			return nil
		})
	}
	g.Wait()
	fmt.Println(peak.Load() <= 2)
	// Output: true
}

func ExampleGroup_SetLimit() {
	p := crew.New(100)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithLimit(1))
	started := make(chan int, 3)
	release := make(chan struct{})
	for i := range 3 {
		g.Go(func(ctx context.Context) error {
			started <- i
			<-release
			return nil
		})
	}
	fmt.Println("started:", <-started) // one at a time so far
	g.SetLimit(3)                      // the two queued tasks start now
	a, b := <-started, <-started
	fmt.Println("then:", min(a, b), max(a, b))
	close(release)
	fmt.Println(g.Wait(), g.SetLimit(0) != nil)
	// Output:
	// started: 0
	// then: 1 2
	// <nil> true
}

func ExampleWithAllErrors() {
	p := crew.New(4)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithAllErrors())
	for _, host := range []string{"a", "b", "c"} {
		g.Go(func(ctx context.Context) error {
			if host == "b" {
				return nil
			}
			return fmt.Errorf("%s: unreachable", host)
		})
	}
	fmt.Println(g.Wait()) // in submission order
	// Output:
	// a: unreachable
	// c: unreachable
}

func ExampleWithCancelOnError() {
	p := crew.New(8)
	defer p.Stop()

	// Every error that happened, and nothing started after the first one.
	g := p.Group(context.Background(), crew.WithLimit(1), crew.WithAllErrors(), crew.WithCancelOnError())
	var ran atomic.Int64
	for i := range 5 {
		g.Go(func(ctx context.Context) error {
			ran.Add(1)
			return fmt.Errorf("task %d failed", i)
		})
	}
	fmt.Println(g.Wait())
	fmt.Println("ran:", ran.Load())
	// Output:
	// task 0 failed
	// ran: 1
}

func ExampleWithTaskTimeout() {
	p := crew.New(2)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithTaskTimeout(10*time.Millisecond))
	g.Go(func(ctx context.Context) error {
		select {
		case <-time.After(time.Minute): // a call that hangs
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	fmt.Println(g.Wait())
	// Output: context deadline exceeded
}

func ExampleWithRepanic() {
	p := crew.New(2)
	defer p.Stop()

	g := p.Group(context.Background(), crew.WithRepanic())
	g.Go(func(ctx context.Context) error { panic("bug") })
	defer func() {
		pe := recover().(*crew.PanicError)
		fmt.Println("recovered:", pe.Value)
	}()
	g.Wait()
	// Output: recovered: bug
}

func ExampleResultGroup() {
	p := crew.New(4)
	defer p.Stop()

	g := crew.NewResultGroup[string](context.Background(), p)
	for _, ms := range []int{3, 1, 2} {
		g.Go(func(ctx context.Context) (string, error) {
			time.Sleep(time.Duration(ms) * time.Millisecond) // finish out of order
			return fmt.Sprint(ms), nil
		})
	}
	res, err := g.Wait()
	fmt.Println(res, err) // in submission order
	// Output: [3 1 2] <nil>
}

// With WithAllErrors every task runs, and each slot holds what its task
// returned even when another task failed.
func ExampleNewResultGroup() {
	p := crew.New(4)
	defer p.Stop()

	g := crew.NewResultGroup[int](context.Background(), p, crew.WithAllErrors())
	for _, s := range []string{"1", "two", "3"} {
		g.Go(func(ctx context.Context) (int, error) {
			return strconv.Atoi(s)
		})
	}
	nums, err := g.Wait()
	fmt.Println(nums)
	fmt.Println(err)
	// Output:
	// [1 0 3]
	// strconv.Atoi: parsing "two": invalid syntax
}

// Submit runs a function that returns a value; its Future waits for both
// the value and the error.
func ExampleSubmit() {
	p := crew.New(2)
	defer p.Stop()

	f := crew.Submit(p, func(ctx context.Context) (int, error) {
		return 6 * 7, nil
	})
	// ... do something else meanwhile ...
	v, err := f.Wait()
	fmt.Println(v, err)
	// Output: 42 <nil>
}

func ExampleFuture_Done() {
	p := crew.New(2)
	defer p.Stop()

	f := crew.Submit(p, func(ctx context.Context) (string, error) {
		return "", errors.New("no such user")
	})
	select {
	case <-f.Done():
		_, err := f.Wait() // returns at once
		fmt.Println(err)
	case <-time.After(time.Minute):
		fmt.Println("too slow")
	}
	// Output: no such user
}

// A Future cancelled before its function starts reports the zero value
// and context.Canceled.
func ExampleFuture_Cancel() {
	p := crew.New(1)
	defer p.Stop()
	p.Pause() // nothing starts: the Future waits in the queue

	f := crew.Submit(p, func(ctx context.Context) (int, error) {
		return 6 * 7, nil
	})
	fmt.Println(f.Cancel())
	v, err := f.Wait()
	fmt.Println(v, errors.Is(err, context.Canceled))
	p.Resume()
	// Output:
	// true
	// 0 true
}

func ExampleMap() {
	p := crew.New(4)
	defer p.Stop()

	words := []string{"go", "crew", "pool"}
	upper, err := crew.Map(context.Background(), p, words, func(ctx context.Context, w string) string {
		return strings.ToUpper(w)
	})
	fmt.Println(upper, err)
	// Output: [GO CREW POOL] <nil>
}

func ExampleMapErr() {
	p := crew.New(4)
	defer p.Stop()

	ids := []int{1, 2, 3}
	names, err := crew.MapErr(context.Background(), p, ids, func(ctx context.Context, id int) (string, error) {
		if id == 2 {
			return "", fmt.Errorf("user %d: not found", id)
		}
		return fmt.Sprint("user", id), nil
	}, crew.WithAllErrors())
	fmt.Printf("%q %v\n", names, err)
	// Output: ["user1" "" "user3"] user 2: not found
}

func ExampleForEach() {
	p := crew.New(4)
	defer p.Stop()

	var total atomic.Int64
	err := crew.ForEach(context.Background(), p, []int{1, 2, 3, 4}, func(ctx context.Context, n int) error {
		total.Add(int64(n))
		return nil
	}, crew.WithLimit(2))
	fmt.Println(total.Load(), err)
	// Output: 10 <nil>
}

func ExampleMapSeq() {
	p := crew.New(4)
	defer p.Stop()

	ages := map[string]int{"ann": 31, "bob": 42, "cid": 27}
	keys := slices.Sorted(maps.Keys(ages))
	lines, err := crew.MapSeq(context.Background(), p, slices.Values(keys), func(ctx context.Context, k string) string {
		return fmt.Sprintf("%s=%d", k, ages[k])
	})
	fmt.Println(lines, err)
	// Output: [ann=31 bob=42 cid=27] <nil>
}

func ExampleMapErrStream() {
	p := crew.New(4)
	defer p.Stop()

	// Lines are checked concurrently and reported in input order, as soon
	// as each and those before it are done; breaking stops the rest.
	// WithAllErrors gives every line its own outcome: without it, the
	// first error skips the lines not yet started, before it too.
	lines := slices.Values([]string{"a=1", "b=2", "oops", "c=3"})
	for kv, err := range crew.MapErrStream(context.Background(), p, lines, func(ctx context.Context, line string) ([]string, error) {
		kv := strings.SplitN(line, "=", 2)
		if len(kv) != 2 {
			return nil, fmt.Errorf("no '=' in %q", line)
		}
		return kv, nil
	}, crew.WithAllErrors()) {
		if err != nil {
			fmt.Println("error:", err)
			break
		}
		fmt.Println(kv[0], "is", kv[1])
	}
	// Output:
	// a is 1
	// b is 2
	// error: no '=' in "oops"
}

func ExampleForEachSeq() {
	p := crew.New(4)
	defer p.Stop()

	// An iterator of any length is processed in bounded memory: at most
	// the window (here the limit, 8) of values is pulled ahead.
	numbers := func(yield func(int) bool) {
		for i := 1; i <= 1000; i++ {
			if !yield(i) {
				return
			}
		}
	}
	var sum atomic.Int64
	err := crew.ForEachSeq(context.Background(), p, numbers, func(ctx context.Context, n int) error {
		sum.Add(int64(n))
		return nil
	}, crew.WithLimit(8))
	fmt.Println(sum.Load(), err)
	// Output: 500500 <nil>
}

func ExampleStream() {
	p := crew.New(4)
	defer p.Stop()

	s := crew.NewStream(context.Background(), p, crew.WithLimit(3))
	for _, ms := range []int{3, 1, 2, 0} {
		s.Go(func(ctx context.Context) func() {
			time.Sleep(time.Duration(ms) * time.Millisecond) // the work, out of order
			return func() {
				fmt.Println("done", ms) // in order, one at a time
			}
		})
	}
	fmt.Println(s.Wait())
	// Output:
	// done 3
	// done 1
	// done 2
	// done 0
	// <nil>
}

// Tasks report their own errors through their callbacks, which run one at a
// time in submission order and so may share state without a lock.
func ExampleNewStream() {
	p := crew.New(4)
	defer p.Stop()

	st := crew.NewStream(context.Background(), p, crew.WithLimit(2))
	total := 0 // only callbacks touch it
	for _, in := range []string{"10", "x", "32"} {
		err := st.Go(func(ctx context.Context) func() {
			n, err := strconv.Atoi(in) // the task runs concurrently with others
			// Its callback runs after those of the tasks submitted before it.
			return func() {
				if err != nil {
					fmt.Println("skipped:", err)
					return
				}
				total += n
				fmt.Println("running total:", total)
			}
		})
		if err != nil {
			fmt.Println(err)
			break
		}
	}
	if err := st.Wait(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// running total: 10
	// skipped: strconv.Atoi: parsing "x": invalid syntax
	// running total: 42
}

func ExampleWithRetry() {
	p := crew.New(4)
	defer p.Stop()

	// A flaky call is tried up to three times; between tries it waits
	// without holding a worker. A permanent error is not retried.
	var tries atomic.Int64
	g := crew.NewGroup(context.Background(), p, crew.WithRetry(crew.Retry{
		Attempts: 3,
		Delay:    time.Millisecond,
		MaxDelay: 10 * time.Millisecond,
	}))
	g.Go(func(ctx context.Context) error {
		if tries.Add(1) < 3 {
			return errors.New("connection reset")
		}
		return nil
	})
	fmt.Println(g.Wait(), tries.Load())

	g = crew.NewGroup(context.Background(), p, crew.WithRetry(crew.Retry{Attempts: 3}))
	g.Go(func(ctx context.Context) error { return crew.Permanent(errors.New("404 not found")) })
	fmt.Println(g.Wait())
	// Output:
	// <nil> 3
	// 404 not found
}

func ExampleRetry_Do() {
	r := crew.Retry{Attempts: 4, Delay: time.Millisecond}
	calls := 0
	err := r.Do(context.Background(), func(ctx context.Context) error {
		calls++
		if calls < 4 {
			return errors.New("busy")
		}
		return nil
	})
	fmt.Println(err, calls)
	// Output: <nil> 4
}

func ExampleGroup_Done() {
	p := crew.New(4)
	defer p.Stop()

	g := p.Group(context.Background())
	for i := range 3 {
		g.Go(func(ctx context.Context) error {
			if i == 2 {
				return errors.New("third failed")
			}
			return nil
		})
	}
	select {
	case <-g.Done():
		fmt.Println("finished:", g.Wait())
	case <-time.After(time.Minute):
		fmt.Println("still running")
	}
	// Output: finished: third failed
}
