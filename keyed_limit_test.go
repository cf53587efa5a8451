package crew_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// keyCheck watches the tasks of one key: how many run at once (at most
// limit), and that task seq starts only once every task of the key before
// it, but at most limit-1 of them, has finished. That is what starting in
// submission order, at most limit at once, allows; with limit 1 it is
// running one at a time in order.
type keyCheck struct {
	limit              int64
	running, peak      atomic.Int64
	finished           atomic.Int64
	early, overLimit   atomic.Int64
	firstEarly, ranSeq atomic.Int64
}

// task returns task number seq of the key.
func (c *keyCheck) task(seq int64) func() {
	return func() {
		if r := c.running.Add(1); r > c.limit {
			c.overLimit.Add(1)
		} else {
			raisePeak(&c.peak, r)
		}
		if f := c.finished.Load(); f < seq-c.limit+1 {
			if c.early.Add(1) == 1 {
				c.firstEarly.Store(seq)
			}
		}
		if seq%3 == 0 {
			runtime.Gosched() // let another task of the key try to overtake
		}
		c.ranSeq.Add(1)
		c.running.Add(-1)
		c.finished.Add(1)
	}
}

// check fails t if the key broke its limit or its order, or did not run
// want tasks.
func (c *keyCheck) check(t *testing.T, name string, want int64) {
	t.Helper()
	if c.overLimit.Load() != 0 || c.early.Load() != 0 || c.ranSeq.Load() != want {
		t.Fatalf("key %s (limit %d): %d starts above the limit, %d too early (first: task %d), %d of %d ran",
			name, c.limit, c.overLimit.Load(), c.early.Load(), c.firstEarly.Load(), c.ranSeq.Load(), want)
	}
}

// keyChecks returns the checks of keys keys of limit limit.
func keyChecks(keys, limit int) []keyCheck {
	checks := make([]keyCheck, keys)
	for i := range checks {
		checks[i].limit = int64(limit)
	}
	return checks
}

// produce runs producers goroutines, producer g the only one of keys g,
// g+producers, ...: each queues perKey checked tasks on each of its keys
// in turn, and calls also(g, i), if not nil, after round i. It returns
// once they are done.
func produce(t *testing.T, k *crew.Keyed[int], checks []keyCheck, producers, perKey int, also func(g, i int)) {
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for i := range perKey {
				for key := g; key < len(checks); key += producers {
					if err := k.Go(key, checks[key].task(int64(i))); err != nil {
						t.Error(err)
					}
				}
				if also != nil {
					also(g, i)
				}
			}
		})
	}
	wg.Wait()
}

// Many producers, each the only one of its keys: under every limit, a key
// never runs more tasks at once than its limit, its tasks start in
// submission order, and every task runs once.
func TestKeyedLimitBoundAndOrderUnderConcurrency(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			p := crew.New(8)
			defer p.Stop()
			k := crew.NewKeyed[int](p, crew.WithKeyLimit(limit))
			perKey := scaled(300, 4)
			checks := keyChecks(16, limit)
			produce(t, k, checks, 8, perKey, nil)
			within(t, schedDeadline, "Keyed.Wait", k.Wait)
			peak := int64(0)
			for key := range checks {
				checks[key].check(t, fmt.Sprint(key), int64(perKey))
				peak = max(peak, checks[key].peak.Load())
			}
			if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 || s.Waiting != 0 {
				t.Fatalf("Stats after Wait = %+v, want no key and nothing unfinished", s)
			}
			t.Logf("at most %d tasks of a key ran at once", peak)
		})
	}
}

// With WithKeyLimit(3), exactly three tasks of a key run at once, the
// first three; each one that finishes lets the next in order start; other
// keys run beside them. The bubble's Wait returns only once every
// goroutine is durably blocked, so a task that could start has started.
func TestKeyedLimitStartsUpToNInOrder(t *testing.T) {
	leak.Check(t)
	keyedInBubble(t, 8, 3, func(t *testing.T, p *crew.Pool, k *crew.Keyed[string]) {
		started := make(chan int, 8)
		release := make([]chan struct{}, 6)
		for i := range release {
			release[i] = make(chan struct{})
			if err := k.Go("a", func() { started <- i; <-release[i] }); err != nil {
				t.Fatal(err)
			}
		}
		k.Go("b", func() { started <- 100 })
		synctest.Wait()
		if got := sorted(ready(started)); !slices.Equal(got, []int{0, 1, 2, 100}) {
			t.Fatalf("started %v, want tasks 0, 1 and 2 of key a and key b's", got)
		}
		if s := k.Stats(); s.Waiting != 3 || s.Unfinished != 6 {
			t.Fatalf("Stats %+v, want 3 waiting and 6 unfinished", s)
		}
		close(release[1])
		synctest.Wait()
		if got := ready(started); !slices.Equal(got, []int{3}) {
			t.Fatalf("after task 1 finished, started %v, want [3]", got)
		}
		close(release[0])
		close(release[2])
		synctest.Wait()
		if got := sorted(ready(started)); !slices.Equal(got, []int{4, 5}) {
			t.Fatalf("after tasks 0 and 2 finished, started %v, want [4 5]", got)
		}
		for _, i := range []int{3, 4, 5} {
			close(release[i])
		}
		k.Wait()
		if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 {
			t.Fatalf("Stats after Wait = %+v", s)
		}
	})
}

// keyedInBubble runs f in a synctest bubble, with a Keyed of key limit
// limit on a pool of workers workers that keeps them while f runs and is
// stopped after it.
func keyedInBubble(t *testing.T, workers, limit int, f func(t *testing.T, p *crew.Pool, k *crew.Keyed[string])) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(workers, crew.WithIdleTimeout(time.Minute))
		defer p.Stop()
		f(t, p, crew.NewKeyed[string](p, crew.WithKeyLimit(limit)))
	})
}

// ready returns what ch holds now, without waiting.
func ready[T any](ch chan T) []T {
	var got []T
	for {
		select {
		case v := <-ch:
			got = append(got, v)
		default:
			return got
		}
	}
}

func sorted(s []int) []int {
	slices.Sort(s)
	return s
}

// Shutdown's deadline, while a key runs as many tasks as its limit allows,
// drops exactly the tasks of the key that have not started; the running
// ones finish, and no key is left.
func TestKeyedLimitShutdownDropsWhatHasNotStarted(t *testing.T) {
	leak.Check(t)
	p := crew.New(3)
	k := crew.NewKeyed[int](p, crew.WithKeyLimit(2))
	started := make(chan struct{}, 2)
	var finished atomic.Int64
	for range 2 {
		k.Go(0, func() { started <- struct{}{}; <-p.Context().Done(); finished.Add(1) })
	}
	recvWithin(t, started, "key 0's first task")
	recvWithin(t, started, "key 0's second task")
	var ran atomic.Int64
	for range 8 {
		k.Go(0, func() { ran.Add(1) })
	}
	task := k.Submit(0, func(context.Context) error { ran.Add(1); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	var err error
	within(t, schedDeadline, "Pool.Shutdown", func() { err = p.Shutdown(ctx) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want the context's error", err)
	}
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if err := task.Wait(); err != crew.ErrDropped {
		t.Fatalf("the dropped Task reports %v", err)
	}
	if s := k.Stats(); ran.Load() != 0 || finished.Load() != 2 || s.Dropped != 9 || s.Keys != 0 || s.Unfinished != 0 {
		t.Fatalf("%d ran, %d of the running finished; Stats %+v; want none ran, 2 finished, 9 dropped, no key left",
			ran.Load(), finished.Load(), s)
	}
}

// A paused key starts none of its queued tasks, while other keys run; Go
// and Submit for it still queue; Resume runs them in order and deletes
// the key once it is idle.
func TestKeyedPauseHoldsOnlyThatKey(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			keyedInBubble(t, 4, limit, func(t *testing.T, p *crew.Pool, k *crew.Keyed[string]) {
				k.Pause("a") // a key never seen: its tasks queue from the first
				if !k.Paused("a") || k.Paused("b") {
					t.Fatalf("Paused(a) = %v, Paused(b) = %v; want true, false", k.Paused("a"), k.Paused("b"))
				}
				var mu sync.Mutex
				var order []int
				var b atomic.Int64
				for i := range 5 {
					if err := k.Go("a", func() { mu.Lock(); order = append(order, i); mu.Unlock() }); err != nil {
						t.Fatal(err)
					}
					k.Go("b", func() { b.Add(1) })
				}
				task := k.Submit("a", func(context.Context) error { return nil })
				synctest.Wait()
				if len(order) != 0 || b.Load() != 5 {
					t.Fatalf("paused key a ran %v; key b ran %d of 5", order, b.Load())
				}
				if s := k.Stats(); s.Keys != 1 || s.Waiting != 6 || s.Unfinished != 6 {
					t.Fatalf("Stats while a is paused = %+v, want 1 key, 6 waiting", s)
				}
				k.Resume("a")
				if k.Paused("a") {
					t.Fatal("Paused(a) after Resume")
				}
				k.Wait()
				if err := task.Wait(); err != nil {
					t.Fatal(err)
				}
				if limit == 1 && !slices.Equal(order, []int{0, 1, 2, 3, 4}) || len(order) != 5 {
					t.Fatalf("after Resume key a ran %v", order)
				}
				if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 {
					t.Fatalf("Stats after Wait = %+v, want no key", s)
				}
			})
		})
	}
}

// Pausing a busy key lets its running tasks finish and starts no more;
// its steps already in the pool's queue start nothing. Keyed.Wait waits
// for the paused key's tasks until Resume.
func TestKeyedPauseLetsRunningTasksFinish(t *testing.T) {
	leak.Check(t)
	keyedInBubble(t, 4, 2, func(t *testing.T, p *crew.Pool, k *crew.Keyed[string]) {
		release := make(chan struct{})
		var running, ran atomic.Int64
		for range 2 {
			k.Go("a", func() { running.Add(1); <-release })
		}
		synctest.Wait()
		if running.Load() != 2 {
			t.Fatalf("%d of key a's tasks run, want 2", running.Load())
		}
		k.Pause("a")
		for range 3 {
			k.Go("a", func() { ran.Add(1) })
		}
		waited := make(chan struct{})
		go func() { k.Wait(); close(waited) }()
		close(release)
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Keyed.Wait returned while a paused key had tasks queued")
		default:
		}
		if s := k.Stats(); ran.Load() != 0 || s.Waiting != 3 || s.Unfinished != 3 {
			t.Fatalf("%d tasks of the paused key ran; Stats %+v; want none, 3 waiting", ran.Load(), s)
		}
		k.Resume("a")
		<-waited
		if ran.Load() != 3 || k.Stats().Keys != 0 {
			t.Fatalf("after Resume %d of 3 ran; Stats %+v", ran.Load(), k.Stats())
		}
	})
}

// A key paused while its step waits in the pool's queue starts nothing
// when a worker takes the step; Resume submits it again.
func TestKeyedPauseHoldsAStepAlreadyQueued(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			keyedInBubble(t, 1, limit, func(t *testing.T, p *crew.Pool, k *crew.Keyed[string]) {
				release := make(chan struct{})
				p.Go(func() { <-release }) // holds the only worker
				synctest.Wait()
				var ran atomic.Int64
				for range 2 {
					k.Go("a", func() { ran.Add(1) }) // the steps queue in the pool
				}
				k.Pause("a")
				close(release)
				synctest.Wait()
				if s := k.Stats(); ran.Load() != 0 || s.Waiting != 2 || p.Stats().Queued != 0 {
					t.Fatalf("%d tasks of the paused key ran; Stats %+v, pool %+v", ran.Load(), s, p.Stats())
				}
				k.Resume("a")
				k.Wait()
				if ran.Load() != 2 || k.Stats().Keys != 0 {
					t.Fatalf("after Resume %d of 2 ran; Stats %+v", ran.Load(), k.Stats())
				}
			})
		})
	}
}

// Stop and Shutdown do not resume a paused key: once the pool has run
// its queue, the paused key's tasks are dropped, counted, and its Tasks
// complete with ErrDropped; neither hangs, nor does Keyed.Wait. The other
// keys' tasks run (Stop) and a paused key's running task finishes.
func TestKeyedStopAndShutdownDropAPausedKeysTasks(t *testing.T) {
	leak.Check(t)
	for _, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprint("shutdown=", shutdown), func(t *testing.T) {
			p := crew.New(2)
			k := crew.NewKeyed[string](p, crew.WithKeyLimit(2))
			started, release := make(chan struct{}), make(chan struct{})
			var runningDone atomic.Bool
			k.Go("a", func() { close(started); <-release; runningDone.Store(true) })
			<-started
			k.Pause("a")
			var ranA, ranB atomic.Int64
			for range 5 {
				k.Go("a", func() { ranA.Add(1) })
				k.Go("b", func() { ranB.Add(1) })
			}
			task := k.Submit("a", func(context.Context) error { ranA.Add(1); return nil })
			go func() {
				eventually(t, "the pool to close", func() bool { return p.Go(func() {}) == crew.ErrStopped })
				close(release)
			}()
			if shutdown {
				var err error
				within(t, schedDeadline, "Pool.Shutdown", func() { err = p.Shutdown(context.Background()) })
				if err != nil { // the pool's own queue ran: a layer's drops are its own
					t.Fatalf("Shutdown = %v, want nil", err)
				}
			} else {
				within(t, schedDeadline, "Pool.Stop", p.Stop)
			}
			within(t, schedDeadline, "Keyed.Wait", k.Wait)
			if err := task.Wait(); err != crew.ErrDropped {
				t.Fatalf("the paused key's Task = %v, want ErrDropped", err)
			}
			if s := k.Stats(); ranA.Load() != 0 || ranB.Load() != 5 || !runningDone.Load() || s.Dropped != 6 || s.Keys != 0 || s.Unfinished != 0 {
				t.Fatalf("paused key ran %d, other key %d of 5, running task finished %v; Stats %+v; want 0, 5, true, 6 dropped",
					ranA.Load(), ranB.Load(), runningDone.Load(), s)
			}
			if k.Paused("a") {
				t.Error("Paused(a) after the pool stopped")
			}
			k.Pause("c") // does nothing once the pool has stopped
			if k.Paused("c") || k.Stats().Keys != 0 {
				t.Errorf("Pause after Stop: Paused %v, Stats %+v", k.Paused("c"), k.Stats())
			}
			k.Resume("c")
		})
	}
}

// Pause and Resume of idle keys: a paused key holds memory only while
// paused; Pause is idempotent; Resume of a key that is not paused does
// nothing.
func TestKeyedPauseIdleKeys(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	k := crew.NewKeyed[int](p)
	k.Resume(1) // never seen
	for range 2 {
		k.Pause(1)
	}
	k.Pause(2)
	if s := k.Stats(); s.Keys != 2 || !k.Paused(1) || !k.Paused(2) {
		t.Fatalf("two paused keys: Stats %+v, Paused %v %v", s, k.Paused(1), k.Paused(2))
	}
	k.Resume(1)
	k.Resume(1)
	if s := k.Stats(); s.Keys != 1 || k.Paused(1) || !k.Paused(2) {
		t.Fatalf("one key resumed: Stats %+v, Paused %v %v", s, k.Paused(1), k.Paused(2))
	}
	k.Resume(2)
	ran := make(chan struct{})
	k.Go(2, func() { close(ran) }) // a resumed key runs as any other
	recvWithin(t, ran, "the resumed key's task")
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	if s := k.Stats(); s.Keys != 0 {
		t.Fatalf("Stats after every key resumed = %+v, want no key", s)
	}
}

// A paused key's Go never waits for room: it only queues. The Context
// forms still report a context that has ended, and queue nothing. With a
// limit above 1, an idle key's GoContext waits for room in a full queue
// until its context ends, as with limit 1.
func TestKeyedPausedKeyAndTheContextForms(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithQueueSize(0))
	release := gate(t, p) // a busy worker and no room in the queue
	k := crew.NewKeyed[string](p, crew.WithKeyLimit(2))
	k.Pause("a")
	var ran atomic.Int64
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := k.GoContext(ended, "a", func() { ran.Add(1) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("GoContext with an ended context = %v", err)
	}
	if err := k.SubmitContext(ended, "a", func(context.Context) error { ran.Add(1); return nil }).Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("SubmitContext with an ended context = %v", err)
	}
	short, stop := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer stop()
	if err := k.GoContext(short, "a", func() { ran.Add(1) }); err != nil {
		t.Fatalf("GoContext for a paused key on a full pool = %v, want nil: it only queues", err)
	}
	if err := k.GoContext(short, "b", func() { ran.Add(1) }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GoContext for an idle key on a full pool = %v, want the context's error", err)
	}
	if !k.TryGo("a", func() { ran.Add(1) }) {
		t.Fatal("TryGo for a paused key on a full pool refused")
	}
	if s := k.Stats(); s.Unfinished != 2 || s.Keys != 1 || ran.Load() != 0 {
		t.Fatalf("Stats %+v, %d ran; want the paused key's 2 tasks queued", s, ran.Load())
	}
	k.Resume("a") // its steps go into the full queue past its bound
	release()
	within(t, schedDeadline, "Keyed.Wait", k.Wait)
	p.Stop()
	if ran.Load() != 2 {
		t.Errorf("%d of the paused key's 2 tasks ran", ran.Load())
	}
}

// Bad input: a limit below 1 is invalid; a zero or nil Keyed's Pause and
// Resume do nothing and Paused reports false; a nil task is refused
// whatever the limit.
func TestKeyedLimitAndPauseBadInput(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	for _, n := range []int{0, -1} {
		if err, ok := recoverErr(func() { crew.NewKeyed[int](p, crew.WithKeyLimit(n)) }); !ok || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("WithKeyLimit(%d): %v, want a panic wrapping ErrInvalid", n, err)
		}
	}
	var zero crew.Keyed[int]
	var nilKeyed *crew.Keyed[int]
	if err, panicked := recoverErr(func() {
		for _, k := range []*crew.Keyed[int]{&zero, nilKeyed} {
			k.Pause(1)
			k.Resume(1)
			if k.Paused(1) {
				t.Error("a zero or nil Keyed reports a key paused")
			}
			if err := k.Go(1, func() {}); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("zero or nil Keyed: Go = %v", err)
			}
		}
	}); panicked {
		t.Fatalf("zero or nil Keyed: %v", err)
	}
	k := crew.NewKeyed[int](p, crew.WithKeyLimit(4))
	k.Pause(1)
	if err := k.Go(1, nil); err != crew.ErrNilTask {
		t.Fatalf("Go(nil) for a paused key = %v", err)
	}
	if err := k.Submit(2, nil).Wait(); err != crew.ErrNilTask {
		t.Fatalf("Submit(nil) = %v", err)
	}
	if s := k.Stats(); s.Unfinished != 0 {
		t.Fatalf("Stats after nil tasks = %+v", s)
	}
	k.Resume(1)
}

// Producers flood keys of a Keyed while another goroutine pauses and
// resumes them at random, and tasks submit tasks of their own: the limit
// and the order hold throughout, and once every key is resumed every task
// runs once.
func TestKeyedPauseResumeUnderConcurrency(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			p := crew.New(4, crew.WithQueueSize(4))
			defer p.Stop()
			k := crew.NewKeyed[int](p, crew.WithKeyLimit(limit))
			keys, perKey, producers := 8, scaled(400, 4), 4
			checks := keyChecks(keys, limit)
			var inner atomic.Int64
			done := make(chan struct{})
			var toggler sync.WaitGroup
			toggler.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(limit), 1))
				for {
					select {
					case <-done:
						return
					default:
					}
					key := rng.IntN(keys + 2*producers)
					if rng.IntN(2) == 0 {
						k.Pause(key)
					} else {
						k.Resume(key)
					}
					runtime.Gosched()
				}
			})
			produce(t, k, checks, producers, perKey, func(g, i int) {
				if i%50 == 0 { // a task that queues a task of another key
					k.Go(keys+g, func() {
						// From inside a task, a full pool whose every worker
						// waits the same way refuses the task (ErrQueueFull).
						if err := k.Go(keys+producers+g, func() { inner.Add(1) }); err != nil {
							if !errors.Is(err, crew.ErrQueueFull) {
								t.Errorf("Go from inside a task: %v", err)
							}
							inner.Add(1)
						}
					})
				}
			})
			close(done)
			toggler.Wait()
			for key := range keys + 2*producers {
				k.Resume(key)
			}
			within(t, schedDeadline, "Keyed.Wait", k.Wait)
			for key := range checks {
				checks[key].check(t, fmt.Sprint(key), int64(perKey))
			}
			if want := int64(producers * ((perKey + 49) / 50)); inner.Load() != want {
				t.Fatalf("%d of %d tasks queued from inside tasks ran", inner.Load(), want)
			}
			if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 || s.Waiting != 0 {
				t.Fatalf("Stats after Wait = %+v", s)
			}
		})
	}
}

// A Keyed step whose worker is one too many after Resize lowered the
// pool's limit does not run the key's next task itself when the full
// queue refuses the next step: the step is owed (queued past the bound),
// and the task runs, in the key's order and not dropped, once a worker
// within the limit is free.
func TestKeyedStepOverLimitAfterResizeOwesItsSuccessor(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithQueueSize(0))
	defer p.Stop()
	release := gate(t, p)
	defer release()
	k := crew.NewKeyed[string](p)
	started, head := make(chan struct{}), make(chan struct{})
	if err := k.Go("a", func() { close(started); <-head }); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, "the key's first task")
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	var (
		ran   atomic.Int64
		mu    sync.Mutex
		order []int
	)
	for i := range 2 {
		if err := k.Go("a", func() {
			ran.Add(1)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	close(head)
	waitUntil(t, schedDeadline, "the key's next step to be queued, or its task to run", func() bool {
		return ran.Load() > 0 || p.Stats().Queued > 0
	})
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d tasks ran beside the gate, in a pool limited to one", n)
	}
	release()
	k.Wait()
	if !slices.Equal(order, []int{0, 1}) {
		t.Errorf("the key's tasks ran in the order %v, want [0 1]", order)
	}
	if s := k.Stats(); s.Dropped != 0 {
		t.Errorf("Stats().Dropped = %d, want 0", s.Dropped)
	}
}
