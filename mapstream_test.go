package crew_test

import (
	"context"
	"errors"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// pulledUpTo yields 0, 1, ... n-1 (for ever if n < 0), counting what it pulled.
func pulledUpTo(n int, pulled *atomic.Int64) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := 0; n < 0 || i < n; i++ {
			pulled.Add(1)
			if !yield(i) {
				return
			}
		}
	}
}

// Results come in the order of the input although calls finish in any
// order, the calls run concurrently, and no more than the window of values
// is ever pulled and not yet yielded.
func TestMapErrStreamOrderAndWindow(t *testing.T) {
	leak.Check(t)
	const n, window = 400, 6
	p := crew.New(8)
	defer p.Stop()
	var pulled, running, most atomic.Int64
	var yielded int64
	var worst int64
	got := make([]int, 0, n)
	within(t, groupDeadline, "ranging over MapErrStream", func() {
		for r, err := range crew.MapErrStream(context.Background(), p, pulledUpTo(n, &pulled), func(ctx context.Context, v int) (int, error) {
			now := running.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			for range rand.IntN(200) {
				_ = rand.Int() // finish in a shuffled order
			}
			if v%7 == 0 {
				time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond) // the work itself, not a wait for a condition
			}
			running.Add(-1)
			return v * 2, nil
		}, crew.WithLimit(window)) {
			if err != nil {
				t.Fatalf("element %d: %v", len(got), err)
			}
			worst = max(worst, pulled.Load()-yielded)
			yielded++
			got = append(got, r)
		}
	})
	if len(got) != n {
		t.Fatalf("%d results, want %d", len(got), n)
	}
	for i, r := range got {
		if r != 2*i {
			t.Fatalf("result %d = %d, want %d", i, r, 2*i)
		}
	}
	if worst > window {
		t.Errorf("%d values pulled and not yielded, window %d", worst, window)
	}
	if most.Load() > window {
		t.Errorf("%d calls at once, limit %d", most.Load(), window)
	}
}

// The calls run in parallel: the head of the line can wait for a later
// element, which could never finish if the calls ran one at a time.
func TestMapErrStreamRunsCallsConcurrently(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	third := make(chan struct{})
	var got []int
	within(t, groupDeadline, "a head waiting for a later element", func() {
		for r, err := range crew.MapErrStream(context.Background(), p, slices.Values([]int{0, 1, 2}), func(ctx context.Context, v int) (int, error) {
			switch v {
			case 0:
				<-third
			case 2:
				close(third)
			}
			return v, nil
		}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
	})
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
}

// Breaking out of the loop stops the pulling, cancels the calls still
// running and returns only once they have returned; a panic of a call
// whose result was never yielded goes to the pool's panic handler. (The
// ranging goroutine may run calls itself while it waits: a call that it
// runs must not wait for the loop to break, so those return at once.)
func TestMapErrStreamBreakCancelsAndWaits(t *testing.T) {
	leak.Check(t)
	handled := make(chan *crew.PanicError, 8)
	p := crew.New(4, crew.WithPanicHandler(func(pe *crew.PanicError) { handled <- pe }))
	defer p.Stop()
	var pulled, live, uncancelled atomic.Int64
	var consumer atomic.Int64
	oneRan := make(chan struct{})
	stream := crew.MapErrStream(context.Background(), p, pulledUpTo(-1, &pulled), func(ctx context.Context, v int) (int, error) {
		live.Add(1)
		defer live.Add(-1)
		switch {
		case v == 0:
			<-oneRan
		case v == 1:
			close(oneRan)
			panic("never yielded")
		case fuzzGoid() != consumer.Load():
			<-ctx.Done() // running when the loop breaks, or never started
			if ctx.Err() == nil {
				uncancelled.Add(1)
			}
		}
		return v, nil
	}, crew.WithLimit(3), crew.WithAllErrors())
	within(t, groupDeadline, "breaking out of an endless stream", func() {
		consumer.Store(fuzzGoid())
		for r, err := range stream {
			if r != 0 || err != nil {
				t.Fatalf("first element = %d, %v", r, err)
			}
			break
		}
	})
	if n := live.Load(); n != 0 {
		t.Errorf("%d calls still running after the loop ended", n)
	}
	if n := uncancelled.Load(); n != 0 {
		t.Errorf("%d calls returned with their context not cancelled", n)
	}
	if n := pulled.Load(); n > 3 {
		t.Errorf("pulled %d values, window 3", n)
	}
	if pe := recv(t, handled, "the unyielded panic at the handler"); pe.Value != "never yielded" {
		t.Errorf("handler got %v", pe.Value)
	}
}

// Without WithAllErrors the stream ends with the first element, in input
// order, whose error is not nil; with it every element comes with its own
// error, and WithCancelOnError still cancels the others.
func TestMapErrStreamErrors(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	boom := errors.New("boom")
	fn := func(ctx context.Context, v int) (int, error) {
		if v%5 == 3 {
			return v, boom
		}
		return v, nil
	}
	type pair struct {
		r   int
		err error
	}
	collect := func(opts ...crew.GroupOption) []pair {
		var out []pair
		within(t, groupDeadline, "MapErrStream", func() {
			for r, err := range crew.MapErrStream(context.Background(), p, slices.Values([]int{0, 1, 2, 3, 4, 5, 6, 7, 8}), fn, opts...) {
				out = append(out, pair{r, err})
			}
		})
		return out
	}
	// The stream ends with boom: at 3, or earlier at a value that was
	// skipped once 3 failed; every element before it is its own result.
	endsWithBoom := func(name string, got []pair) {
		t.Helper()
		if len(got) == 0 || len(got) > 4 || got[len(got)-1].err != boom {
			t.Errorf("%s: %v, want the stream to end with boom by element 3", name, got)
			return
		}
		for i, e := range got[:len(got)-1] {
			if e != (pair{i, nil}) {
				t.Errorf("%s: element %d = %v", name, i, e)
			}
		}
	}
	endsWithBoom("first error policy", collect())
	all := collect(crew.WithAllErrors())
	if len(all) != 9 {
		t.Fatalf("WithAllErrors: %d elements, want 9: %v", len(all), all)
	}
	for i, e := range all {
		if want := (pair{i, nil}); i%5 == 3 {
			want.err = boom
			if e != want {
				t.Errorf("WithAllErrors: element %d = %v, want %v", i, e, want)
			}
		} else if e != want {
			t.Errorf("WithAllErrors: element %d = %v, want %v", i, e, want)
		}
	}
	// Every error is yielded, but the first cancels: the elements after it
	// that were skipped end the stream with boom, their cause.
	cancelling := collect(crew.WithAllErrors(), crew.WithCancelOnError())
	first := slices.IndexFunc(cancelling, func(e pair) bool { return e.err != nil })
	if first < 0 || first > 3 || cancelling[first].err != boom || cancelling[len(cancelling)-1].err != boom {
		t.Errorf("WithCancelOnError: %v", cancelling)
	}
	endsWithBoom("WithCancelOnError, up to the first error", cancelling[:first+1])
}

// A cancelled ctx ends the stream with its cause at the first value that
// did not run; a stopped pool ends it with ErrStopped.
func TestMapErrStreamCancelledAndStopped(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	ctx, cancel := context.WithCancel(context.Background())
	var pulled atomic.Int64
	var n int
	var last error
	within(t, groupDeadline, "a stream whose context is cancelled", func() {
		for _, err := range crew.MapErrStream(ctx, p, pulledUpTo(-1, &pulled), func(ctx context.Context, v int) (int, error) {
			if v == 10 {
				cancel()
			}
			return v, nil
		}, crew.WithLimit(1)) {
			n++
			last = err
		}
	})
	if !errors.Is(last, context.Canceled) || n < 11 {
		t.Errorf("cancelled stream: %d elements, last error %v", n, last)
	}
	p.Stop()
	for _, err := range crew.MapErrStream(context.Background(), p, pulledUpTo(3, &pulled), func(ctx context.Context, v int) (int, error) { return v, nil }) {
		if err != crew.ErrStopped {
			t.Errorf("stopped pool: %v, want ErrStopped", err)
		}
	}
}

// A panicking call is yielded as a *PanicError (and ends the stream), or
// re-panicked on the ranging goroutine WithRepanic, after the other calls
// have returned.
func TestMapErrStreamPanics(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	fn := func(ctx context.Context, v int) (int, error) {
		if v == 2 {
			panic("two")
		}
		return v, nil
	}
	var last error
	n := 0
	for _, err := range crew.MapErrStream(context.Background(), p, slices.Values([]int{0, 1, 2, 3}), fn) {
		n++
		last = err
	}
	var pe *crew.PanicError // at 2, or at a value skipped once 2 panicked
	if n > 3 || !errors.As(last, &pe) || pe.Value != "two" {
		t.Errorf("%d elements, last %v", n, last)
	}
	var live, early atomic.Int64
	both := make(chan struct{}) // 0 and 1 have started: a call that has not is skipped
	before := 0
	wide := crew.New(4)
	defer wide.Stop()
	v := func() (v any) {
		defer func() { v = recover() }()
		for range crew.MapErrStream(context.Background(), wide, pulledUpTo(-1, new(atomic.Int64)), func(ctx context.Context, v int) (int, error) {
			live.Add(1)
			defer live.Add(-1)
			if v < 2 && early.Add(1) == 2 {
				close(both)
			}
			if v == 2 {
				<-both
				panic("two")
			}
			<-ctx.Done()
			return v, nil
		}, crew.WithRepanic(), crew.WithAllErrors(), crew.WithCancelOnError(), crew.WithLimit(3)) {
			before++ // 0 and 1, which return once the panic cancels them
		}
		return nil
	}()
	if pe, ok := v.(*crew.PanicError); !ok || pe.Value != "two" || before != 2 {
		t.Fatalf("WithRepanic: recovered %v after %d elements, want the panic after 2", v, before)
	}
	if live.Load() != 0 {
		t.Error("a call still ran when the re-panic reached the caller")
	}
}

// Bad input is the stream's only element; an empty input yields nothing.
func TestMapErrStreamBadInput(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	id := func(ctx context.Context, v int) (int, error) { return v, nil }
	vals := slices.Values([]int{1, 2})
	cases := []struct {
		name   string
		stream iter.Seq2[int, error]
		is     error
	}{
		{"nil fn", crew.MapErrStream[int, int](context.Background(), p, vals, nil), crew.ErrNilTask},
		{"nil Map fn", crew.MapStream[int, int](context.Background(), p, vals, nil), crew.ErrNilTask},
		{"nil seq", crew.MapErrStream(context.Background(), p, nil, id), crew.ErrNilTask},
		{"nil ctx", crew.MapErrStream(nil, p, vals, id), crew.ErrInvalid}, //nolint:staticcheck // the nil context is the bad input
		{"nil pool", crew.MapErrStream(context.Background(), nil, vals, id), crew.ErrInvalid},
		{"zero pool", crew.MapErrStream(context.Background(), new(crew.Pool), vals, id), crew.ErrInvalid},
		{"bad limit", crew.MapErrStream(context.Background(), p, vals, id, crew.WithLimit(-1)), crew.ErrInvalid},
		{"nil option", crew.MapErrStream(context.Background(), p, vals, id, nil), crew.ErrInvalid},
	}
	for _, c := range cases {
		n := 0
		within(t, groupDeadline, c.name, func() {
			for r, err := range c.stream {
				n++
				if r != 0 || !errors.Is(err, c.is) {
					t.Errorf("%s: yielded %d, %v; want an error wrapping %v", c.name, r, err, c.is)
				}
			}
		})
		if n != 1 {
			t.Errorf("%s: %d elements, want 1", c.name, n)
		}
	}
	for range crew.MapStream(context.Background(), p, slices.Values([]int(nil)), func(ctx context.Context, v int) int { return v }) {
		t.Error("an empty input yielded an element")
	}
}

// Ranged over from inside a task of a one-worker pool, the stream runs its
// calls in that task's slot rather than wait for a worker that never
// comes; and each range runs the calls anew.
func TestMapStreamInsideATaskAndTwice(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	var calls atomic.Int64
	stream := crew.MapStream(context.Background(), p, slices.Values([]int{1, 2, 3}), func(ctx context.Context, v int) int {
		calls.Add(1)
		return v * v
	})
	var sums [2]int
	within(t, groupDeadline, "a stream inside the only worker's task", func() {
		err := p.Submit(func(context.Context) error {
			for i := range sums {
				for r, err := range stream {
					if err != nil {
						return err
					}
					sums[i] += r
				}
			}
			return nil
		}).Wait()
		if err != nil {
			t.Fatal(err)
		}
	})
	if sums != [2]int{14, 14} || calls.Load() != 6 {
		t.Fatalf("sums %v, %d calls", sums, calls.Load())
	}
}

// A panic in the iterator goes on to the caller only once the calls it
// started have returned.
func TestMapErrStreamIteratorPanicWaitsForCalls(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	started := make(chan struct{})
	var returned atomic.Bool
	seq := func(yield func(int) bool) {
		if !yield(0) {
			return
		}
		<-started
		panic("iterator broke")
	}
	v := func() (v any) {
		defer func() { v = recover() }()
		for range crew.MapErrStream(context.Background(), p, seq, func(ctx context.Context, v int) (int, error) {
			close(started)
			<-ctx.Done()
			returned.Store(true)
			return v, nil
		}) {
			t.Error("yielded an element")
		}
		return nil
	}()
	if v != "iterator broke" || !returned.Load() {
		t.Fatalf("recovered %v, call returned %v", v, returned.Load())
	}
}

// Breaking out of the loop inside the only worker's task, with values
// queued and the next result ready, returns: the ranging goroutine skips
// the queued values itself, as no worker is free to.
func TestMapStreamBreakInsideTheOnlyWorker(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	done := make(chan []int)
	p.Go(func() {
		var got []int
		for r, err := range crew.MapStream(context.Background(), p, slices.Values([]int{0, 1, 2, 3, 4}),
			func(_ context.Context, v int) int { return v }, crew.WithLimit(3)) {
			if err != nil {
				break
			}
			if got = append(got, r); r == 1 {
				break
			}
		}
		done <- got
	})
	if got := recv(t, done, "the range to return after a break"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("got %v", got)
	}
}

// A limit too large for a window of its own is not one: the window has a
// bound.
func TestMapStreamHugeLimit(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	n := 0
	for r, err := range crew.MapStream(context.Background(), p, slices.Values([]int{1, 2, 3}),
		func(_ context.Context, v int) int { return v }, crew.WithLimit(math.MaxInt)) {
		if err != nil || r != n+1 {
			t.Fatalf("element %d: %d, %v", n, r, err)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d elements", n)
	}
}

// A pool that shuts down in the middle of a stream ends it: the values not
// started are skipped, the stream ends with an error, and the loop returns.
func TestMapErrStreamPoolShutdownInTheMiddle(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	var pulled atomic.Int64
	started := make(chan struct{})
	var once atomic.Bool
	var last error
	n := 0
	within(t, groupDeadline, "a stream whose pool shuts down", func() {
		go func() {
			<-started
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			p.Shutdown(ctx) // gives up at once: cancels the calls, drops the steps
		}()
		for _, err := range crew.MapErrStream(context.Background(), p, pulledUpTo(-1, &pulled), func(ctx context.Context, v int) (int, error) {
			if v == 5 && once.CompareAndSwap(false, true) {
				close(started)
				<-ctx.Done()
				return v, ctx.Err()
			}
			return v, nil
		}, crew.WithLimit(2)) {
			n++
			last = err
		}
	})
	if last == nil || n < 5 {
		t.Fatalf("%d elements, last error %v; want the stream to end with an error after the first five", n, last)
	}
}
