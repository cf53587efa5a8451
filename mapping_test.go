package crew_test

import (
	"context"
	"errors"
	"iter"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

func TestMapOrdered(t *testing.T) {
	leak.Check(t)
	const n = 48
	p := crew.New(n)
	defer p.Stop()
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	order := rand.Perm(n)
	fo := finishInOrder(order)
	var out []string
	var err error
	within(t, groupDeadline, "Map", func() {
		out, err = crew.Map(context.Background(), p, items, func(ctx context.Context, v int) string {
			fo.turn(v)
			return strconv.Itoa(v)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	fo.check(t, order)
	for i, s := range out {
		if s != strconv.Itoa(i) {
			t.Fatalf("out[%d] = %q", i, s)
		}
	}
}

func TestMapErrFirstErrorSkipsTheRest(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	boom := errors.New("boom")
	var ran atomic.Int64
	items := make([]int, 1000)
	items[0] = 1
	out, err := crew.MapErr(context.Background(), p, items, func(ctx context.Context, v int) (int, error) {
		ran.Add(1)
		if v == 1 {
			return -1, boom
		}
		return 2, nil
	}, crew.WithLimit(1))
	if err != boom || len(out) != 1000 || out[0] != -1 {
		t.Fatalf("MapErr = %v..., %v", out[:2], err)
	}
	if ran.Load() != 1 {
		t.Fatalf("%d calls ran; with limit 1 the first error should skip the rest", ran.Load())
	}
}

func TestForEachAllErrors(t *testing.T) {
	leak.Check(t)
	p := crew.New(3)
	defer p.Stop()
	items := []string{"a", "b", "c", "d"}
	var ran atomic.Int64
	err := crew.ForEach(context.Background(), p, items, func(ctx context.Context, s string) error {
		ran.Add(1)
		if s == "b" || s == "d" {
			return errors.New(s)
		}
		return nil
	}, crew.WithAllErrors())
	if ran.Load() != 4 || err == nil || err.Error() != "b\nd" {
		t.Fatalf("ran %d, ForEach = %q, want \"b\\nd\"", ran.Load(), err)
	}
	if err := crew.ForEach(context.Background(), p, items, nil); err != crew.ErrNilTask {
		t.Fatalf("ForEach(nil fn) = %v", err)
	}
	if _, err := crew.Map[int, int](context.Background(), p, nil, nil); err != crew.ErrNilTask {
		t.Fatalf("Map(nil fn) = %v", err)
	}
}

func TestMapCancelledContext(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Int64
	_, err := crew.Map(ctx, p, make([]int, 100), func(ctx context.Context, v int) int { ran.Add(1); return v })
	if !errors.Is(err, context.Canceled) || ran.Load() != 0 {
		t.Fatalf("ran %d, Map = %v; want none run and context.Canceled", ran.Load(), err)
	}
}

func TestMapSeqOrdered(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	var out []int
	var err error
	within(t, groupDeadline, "MapSeq", func() {
		out, err = crew.MapSeq(context.Background(), p, countTo(5000), func(ctx context.Context, v int) int { return v * 2 })
	})
	if err != nil || len(out) != 5000 {
		t.Fatalf("MapSeq: %d results, %v", len(out), err)
	}
	for i, v := range out {
		if v != 2*i {
			t.Fatalf("out[%d] = %d", i, v)
		}
	}
}

// countTo yields 0..n-1.
func countTo(n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := range n {
			if !yield(i) {
				return
			}
		}
	}
}

// ForEachSeq pulls values only as fast as they are processed: never more
// than the window ahead of the finished ones.
func TestForEachSeqBoundedWindow(t *testing.T) {
	leak.Check(t)
	p := crew.New(8)
	defer p.Stop()
	const window = 4
	var pulled, finished, worst atomic.Int64
	seq := func(yield func(int) bool) {
		for i := range 2000 {
			if ahead := pulled.Add(1) - finished.Load(); ahead > worst.Load() {
				worst.Store(ahead)
			}
			if !yield(i) {
				return
			}
		}
	}
	var sum atomic.Int64
	var err error
	within(t, groupDeadline, "ForEachSeq", func() {
		err = crew.ForEachSeq(context.Background(), p, seq, func(ctx context.Context, v int) error {
			sum.Add(int64(v))
			finished.Add(1)
			return nil
		}, crew.WithLimit(window))
	})
	if err != nil || sum.Load() != 1999*2000/2 {
		t.Fatalf("ForEachSeq = %v, sum %d", err, sum.Load())
	}
	// The value being yielded counts too.
	if worst.Load() > window {
		t.Fatalf("pulled %d values ahead of the finished ones, window %d", worst.Load(), window)
	}
}

// An error stops the pulling.
func TestMapErrSeqStopsPulling(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	boom := errors.New("boom")
	var pulled atomic.Int64
	seq := func(yield func(int) bool) {
		for i := 0; ; i++ {
			pulled.Add(1)
			if !yield(i) {
				return
			}
		}
	}
	var out []int
	var err error
	within(t, groupDeadline, "MapErrSeq over an endless iterator", func() {
		out, err = crew.MapErrSeq(context.Background(), p, seq, func(ctx context.Context, v int) (int, error) {
			if v == 100 {
				return 0, boom
			}
			return v, nil
		}, crew.WithLimit(2))
	})
	if err != boom {
		t.Fatalf("MapErrSeq = %v, want %v", err, boom)
	}
	// The iterator is endless: that MapErrSeq returned shows it stopped
	// pulling. (How many values it pulled after the error depends on how
	// long the failing call took while the other slot kept going.)
	if len(out) < 101 || out[99] != 99 || int64(len(out)) != pulled.Load()-1 && int64(len(out)) != pulled.Load() {
		t.Fatalf("%d results, pulled %d", len(out), pulled.Load())
	}
	if err := crew.ForEachSeq(context.Background(), p, nil, func(context.Context, int) error { return nil }); err != crew.ErrNilTask {
		t.Fatalf("ForEachSeq(nil seq) = %v", err)
	}
}

// An iterator that panics or calls runtime.Goexit ends MapErrSeq and
// ForEachSeq only after the calls already started have returned, with
// their context cancelled: none runs after the caller has moved on.
func TestSeqIteratorFailureWaitsForTheCalls(t *testing.T) {
	leak.Check(t)
	for _, goexit := range []bool{false, true} {
		p := crew.New(2)
		started, release := make(chan struct{}), make(chan struct{})
		var returned atomic.Bool
		seq := func(yield func(int) bool) {
			if !yield(0) {
				return
			}
			<-started
			if goexit {
				runtime.Goexit()
			}
			panic("iterator broke")
		}
		call := func(ctx context.Context, v int) (int, error) {
			close(started)
			select {
			case <-ctx.Done():
			case <-release: // the test failed: let Stop return
			}
			returned.Store(true)
			return v, nil
		}
		ended := make(chan any, 1)
		go func() {
			defer func() { ended <- recover() }()
			if goexit {
				crew.ForEachSeq(context.Background(), p, seq, func(ctx context.Context, v int) error {
					_, err := call(ctx, v)
					return err
				})
			} else {
				crew.MapErrSeq(context.Background(), p, seq, call)
			}
		}()
		v := recv(t, ended, "the iterator's failure to end the call")
		if !returned.Load() {
			t.Errorf("goexit %v: the call still ran when the iterator's failure ended the caller", goexit)
		}
		if !goexit && v != "iterator broke" {
			t.Errorf("MapErrSeq's panic = %v, want the iterator's", v)
		}
		close(release)
		p.Stop()
	}
}

// When the iterator panics, its panic goes on and the calls' outcome is
// dropped; a call's panic then goes to the pool's panic handler rather
// than nowhere, and only once, also when it came after another call's
// error: not twice, as an unreported panic and as the dropped outcome's.
func TestSeqIteratorPanicHandsEachPanicOnce(t *testing.T) {
	leak.Check(t)
	handler, handled := sentPanics(4)
	p := crew.New(4, handler)
	defer p.Stop()
	started := make(chan struct{})
	seq := func(yield func(int) bool) {
		if yield(0) && yield(1) {
			panic("iterator broke")
		}
	}
	var v any
	within(t, groupDeadline, "ForEachSeq", func() {
		defer func() { v = recover() }()
		crew.ForEachSeq(context.Background(), p, seq, func(ctx context.Context, i int) error {
			if i == 0 {
				<-started
				return errors.New("first error")
			}
			close(started)
			<-ctx.Done()
			panic("call broke")
		}, crew.WithLimit(2))
	})
	if v != "iterator broke" {
		t.Fatalf("ForEachSeq panicked with %v, want the iterator's panic", v)
	}
	if got := drained(handled); len(got) != 1 || got[0] != "call broke" {
		t.Fatalf("the panic handler got %v, want the call's panic once", got)
	}
}

// With WithCrashOnPanic, a call that ForEachSeq's caller runs itself (the
// caller is the pool's only worker) and that panics crashes the program:
// the cleanup for a failing iterator must not wait for it.
func TestForEachSeqCrashOnPanicInTheCaller(t *testing.T) {
	leak.Check(t)
	crashes(t, func() {
		p := crew.New(1, crew.WithCrashOnPanic())
		p.Go(func() {
			crew.ForEachSeq(context.Background(), p, slices.Values([]int{1}), func(context.Context, int) error {
				panic("crash me")
			})
		})
		select {} // the crash ends the program
	})
}

// A cancellation that stops MapErrSeq or ForEachSeq before the iterator's
// end is reported: a short result never comes with a nil error.
func TestSeqCancelledEarlyReportsWhy(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	values := slices.Values([]int{0, 1, 2, 3, 4})
	ctx, cancel := context.WithCancel(context.Background())
	out, err := crew.MapErrSeq(ctx, p, values, func(_ context.Context, v int) (int, error) {
		if v == 0 {
			cancel() // while the first value is processed
		}
		return v, nil
	}, crew.WithLimit(1))
	if !errors.Is(err, context.Canceled) || len(out) == 5 {
		t.Fatalf("MapErrSeq cancelled after its first value: %v, %v; want a short result and context.Canceled", out, err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	calls := 0
	err = crew.ForEachSeq(ctx, p, values, func(_ context.Context, v int) error {
		calls++
		if v == 0 {
			cancel()
		}
		return nil
	}, crew.WithLimit(1))
	if !errors.Is(err, context.Canceled) || calls == 5 {
		t.Fatalf("ForEachSeq cancelled after its first value: %d calls, %v; want fewer and context.Canceled", calls, err)
	}
	// Cancelled once every value has run: nothing was cut short.
	ctx, cancel = context.WithCancel(context.Background())
	out, err = crew.MapErrSeq(ctx, p, slices.Values([]int{7}), func(_ context.Context, v int) (int, error) {
		cancel()
		return v, nil
	})
	if err != nil || !slices.Equal(out, []int{7}) {
		t.Fatalf("MapErrSeq cancelled by its last call: %v, %v; want [7], nil", out, err)
	}
}
