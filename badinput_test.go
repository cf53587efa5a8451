package crew_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Bad input: each mistake gets a clear error (or, in New, a panic with an
// error wrapping ErrInvalid). TestBadInput, TestNewPanicsOnInvalidConfiguration
// and TestZeroPoolReportsAnError in pool_test.go cover nil tasks, sizes below
// 1, negative sizes, WithNonBlocking without a queue size, WithMinWorkers
// above the limit and the zero Pool; these fill the gaps.

// newPanic calls f and returns the error it panicked with (nil if it did
// not panic, or panicked with something else than an error).
func newPanic(f func()) (err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			err, _ = v.(error)
		}
	}()
	f()
	return nil, false
}

func TestBadInputNegativeIdleTimeout(t *testing.T) {
	err, _ := newPanic(func() { crew.New(2, crew.WithIdleTimeout(-time.Second)) })
	if !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("WithIdleTimeout(-1s): panic %v, want an error wrapping ErrInvalid", err)
	}
}

// The largest sizes are valid and must work, not overflow: if the worker
// limit plus the queue size overflowed, every TryGo would fail and Go would
// wait forever.
func TestBadInputHugeWorkerLimitWithBoundedQueue(t *testing.T) {
	leak.Check(t)
	p := crew.New(math.MaxInt, crew.WithQueueSize(1))
	defer p.Stop()
	if !p.TryGo(func() {}) {
		t.Fatal("TryGo refused a task on an empty pool with a huge limit")
	}
	mustReturn(t, trapDeadline, "Go on an empty pool with a huge limit", func() {
		if err := p.Go(func() {}); err != nil {
			t.Error(err)
		}
	})
}

func TestBadInputResizeToHugeLimitWithBoundedQueue(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithQueueSize(4))
	defer p.Stop()
	if err := p.Resize(math.MaxInt); err != nil {
		t.Fatal(err)
	}
	if !p.TryGo(func() {}) {
		t.Fatal("TryGo refused a task after Resize(math.MaxInt)")
	}
}

// Without a bounded queue the largest limit works too: a task runs, Resize
// to it succeeds and Stop returns.
func TestBadInputHugeWorkerLimitUnbounded(t *testing.T) {
	leak.Check(t)
	p := crew.New(math.MaxInt)
	done := make(chan struct{})
	if err := p.Go(func() { close(done) }); err != nil {
		t.Fatal(err)
	}
	mustReturn(t, trapDeadline, "a task on a pool with limit MaxInt", func() { <-done })
	if err := p.Resize(math.MaxInt); err != nil {
		t.Fatal(err)
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
}

func TestBadInputNilOption(t *testing.T) {
	err, panicked := newPanic(func() { crew.New(2, nil) })
	if !panicked || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("New(2, nil): panic %v, want an error wrapping ErrInvalid", err)
	}
}

// WithCrashOnPanic and WithPanicHandler ask for opposite things, so New
// and NewFunc reject the pair in either order with ErrInvalid, rather than
// letting whichever comes last (or crashing) win without a word.
func TestBadInputCrashOnPanicWithPanicHandler(t *testing.T) {
	leak.Check(t)
	handler := crew.WithPanicHandler(func(*crew.PanicError) {})
	for name, opts := range map[string][]crew.Option{
		"crash then handler": {crew.WithCrashOnPanic(), handler},
		"handler then crash": {handler, crew.WithCrashOnPanic()},
	} {
		for ctor, build := range map[string]func(){
			"New":     func() { crew.New(2, opts...).Stop() },
			"NewFunc": func() { crew.NewFunc(2, func(context.Context, int) error { return nil }, opts[0], opts[1]).Stop() },
		} {
			if err, _ := newPanic(build); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("%s, %s: panic %v, want an error wrapping ErrInvalid", ctor, name, err)
			}
		}
	}
}

func TestBadInputGoContextNilContext(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	var err error
	_, panicked := newPanic(func() {
		err = p.GoContext(nil, func() {}) //nolint:staticcheck // testing the check
	})
	if panicked || !errors.Is(err, crew.ErrInvalid) {
		t.Fatalf("GoContext(nil): err %v, panicked %v; want an error wrapping ErrInvalid", err, panicked)
	}
}

// Shutdown(nil) has no deadline: it behaves as Stop. It must neither panic
// nor hang.
func TestBadInputShutdownNilContext(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	ran := 0
	done := make(chan struct{})
	p.Go(func() { <-done; ran++ })
	close(done)
	var err error
	mustReturn(t, trapDeadline, "Shutdown(nil)", func() {
		err = p.Shutdown(nil) //nolint:staticcheck // testing the check
	})
	if err != nil || ran != 1 {
		t.Fatalf("Shutdown(nil) = %v, %d tasks ran; want nil and 1", err, ran)
	}
}

// A nil *Pool (a struct field never set) reports ErrInvalid like the zero
// Pool does, rather than panicking with a nil dereference. (A nil Option
// and GoContext with a nil context are checked above.)
func TestBadInputNilPool(t *testing.T) {
	var p *crew.Pool
	if err, panicked := newPanic(func() {
		if err := p.Go(func() {}); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("nil Pool: Go = %v", err)
		}
		if p.TryGo(func() {}) {
			t.Error("nil Pool: TryGo = true")
		}
		p.Wait()
		if _, ok := p.Latency(); ok || p.Name() != "" {
			t.Errorf("nil Pool: Latency ok = %v, Name = %q", ok, p.Name())
		}
	}); panicked {
		t.Fatalf("nil Pool: a method panicked: %v", err)
	}
}

// The methods of a nil Keyed, Priority or RateLimited, and of a layer
// built on a nil RateLimited, report ErrInvalid as a zero one does, never
// a nil dereference.
func TestBadInputNilLayers(t *testing.T) {
	leak.Check(t)
	var k *crew.Keyed[int]
	var q *crew.Priority
	var r *crew.RateLimited
	var sub *crew.Subpool
	var rt *crew.Retrying
	nop := func(context.Context) error { return nil }
	calls := map[string]func() error{
		"Keyed.Go":              func() error { return k.Go(1, func() {}) },
		"Keyed.Submit":          func() error { return k.Submit(1, nop).Wait() },
		"Priority.Go":           func() error { return q.Go(1, func() {}) },
		"Priority.Submit":       func() error { return q.Submit(1, nop).Wait() },
		"RateLimited.Go":        func() error { return r.Go(func() {}) },
		"RateLimited.Submit":    func() error { return r.Submit(nop).Wait() },
		"Keyed on it.Go":        func() error { return crew.NewKeyed[int](r).Go(1, func() {}) },
		"Priority on it.Go":     func() error { return crew.NewPriority(r).Go(1, func() {}) },
		"Subpool.Go":            func() error { return sub.Go(func() {}) },
		"Subpool.Submit":        func() error { return sub.Submit(nop).Wait() },
		"Subpool on it.Go":      func() error { return crew.NewSubpool(r, 2).Weighted(2).Go(func() {}) },
		"Retrying.Go":           func() error { return rt.Go(func() {}) },
		"Retrying.Submit":       func() error { return rt.Submit(nop).Wait() },
		"Retrying on it":        func() error { return crew.NewRetrying(r, crew.Retry{Attempts: 2}).Submit(nop).Wait() },
		"Keyed on nil Retrying": func() error { return crew.NewKeyed[int](rt).Go(1, func() {}) },
	}
	for name, call := range calls {
		if err, panicked := newPanic(func() {
			if err := call(); !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("nil %s = %v, want ErrInvalid", name, err)
			}
		}); panicked {
			t.Errorf("nil %s panicked: %v", name, err)
		}
	}
	if err, panicked := newPanic(func() {
		k.Wait()
		q.Wait()
		r.Wait()
		rt.Wait()
		if k.Stats() != (crew.LayerStats{}) || q.Stats() != (crew.LayerStats{}) || r.Stats() != (crew.LayerStats{}) || rt.Stats() != (crew.LayerStats{}) {
			t.Error("nil layers: Stats are not zero")
		}
	}); panicked {
		t.Errorf("nil layers: Wait or Stats panicked: %v", err)
	}
}

// Wait on the zero Task (not made by Submit) returns at once rather than
// blocking forever on a nil channel.
func TestBadInputZeroTask(t *testing.T) {
	var task crew.Task
	if !returnsWithin(time.Second, func() { task.Wait() }) {
		t.Fatal("Wait on a zero Task blocked (the goroutine is stuck for good)")
	}
}

// After Stop, Resize returns ErrStopped and must not start workers (they
// would leak); submissions are refused and Wait returns at once.
func TestBadInputUseAfterStop(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithMinWorkers(2), crew.WithQueueSize(2))
	p.Stop()
	if err := p.Resize(8); !errors.Is(err, crew.ErrStopped) {
		t.Fatalf("Resize after Stop = %v, want ErrStopped", err)
	}
	if s := p.Stats(); s.Workers != 0 || s.MaxWorkers != 2 {
		t.Fatalf("Resize after Stop: %d workers, limit %d; want none started and the limit unchanged", s.Workers, s.MaxWorkers)
	}
	if p.TryGo(func() {}) {
		t.Fatal("TryGo after Stop")
	}
	if err := p.Submit(func(context.Context) error { return nil }).Wait(); err != crew.ErrStopped {
		t.Fatalf("Submit after Stop = %v", err)
	}
	mustReturn(t, trapDeadline, "Wait after Stop", p.Wait)
	mustReturn(t, trapDeadline, "Stop again", p.Stop)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after Stop = %v", err)
	}
}

// A Task's Wait can be called any number of times, from any goroutine.
func TestBadInputTaskWaitTwice(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	boom := errors.New("boom")
	task := p.Submit(func(context.Context) error { return boom })
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- task.Wait() }()
	}
	for range 8 {
		if err := <-errs; err != boom {
			t.Fatalf("Wait = %v", err)
		}
	}
}

// The extreme valid configurations work: a queue of 0 with a single worker,
// a minimum equal to the limit, the shortest idle timeout.
func TestBadInputEdgeConfigurations(t *testing.T) {
	leak.Check(t)
	p := crew.New(3, crew.WithQueueSize(0), crew.WithMinWorkers(3), crew.WithIdleTimeout(time.Nanosecond))
	if s := p.Stats(); s.Workers != 3 {
		t.Fatalf("%d workers, want the minimum 3", s.Workers)
	}
	n := 0
	done := make(chan struct{})
	for range 100 {
		if err := p.Go(func() { n++; done <- struct{}{} }); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	mustReturn(t, trapDeadline, "Stop", p.Stop)
	if n != 100 {
		t.Fatalf("%d of 100 tasks ran", n)
	}
}

// keyedRefusesKey checks that every submission form of k refuses key, a
// key that a map cannot hold, with an error wrapping ErrInvalid that names
// the call, and that Pause, Resume and Paused of it do nothing: no panic,
// no task accepted, no key left holding memory.
func keyedRefusesKey[K comparable](t *testing.T, k *crew.Keyed[K], key K) {
	t.Helper()
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	forms := map[string]func() error{
		"Go":        func() error { return k.Go(key, func() {}) },
		"GoContext": func() error { return k.GoContext(ctx, key, func() {}) },
		"TryGo": func() error {
			if k.TryGo(key, func() {}) {
				return errors.New("accepted")
			}
			return nil
		},
		"Submit":        func() error { return k.Submit(key, nop).Wait() },
		"SubmitContext": func() error { return k.SubmitContext(ctx, key, nop).Wait() },
		"TrySubmit": func() error {
			task, ok := k.TrySubmit(key, nop)
			if ok {
				return errors.New("accepted")
			}
			return task.Wait()
		},
	}
	for form, call := range forms {
		var err error
		if v, panicked := newPanic(func() { err = call() }); panicked {
			t.Errorf("%s(%#v) panicked: %v", form, key, v)
			continue
		}
		if form == "TryGo" {
			if err != nil {
				t.Errorf("TryGo(%#v): %v", key, err)
			}
			continue
		}
		if !errors.Is(err, crew.ErrInvalid) || !strings.Contains(err.Error(), "Keyed."+form) {
			t.Errorf("%s(%#v) = %v, want an error wrapping ErrInvalid that names Keyed.%s", form, key, err, form)
		}
	}
	if v, panicked := newPanic(func() {
		k.Pause(key)
		if k.Paused(key) {
			t.Errorf("Paused(%#v) after Pause = true", key)
		}
		k.Resume(key)
	}); panicked {
		t.Errorf("Pause, Paused or Resume of %#v panicked: %v", key, v)
	}
	mustReturn(t, trapDeadline, "Keyed.Wait", k.Wait)
	if s := k.Stats(); s.Unfinished != 0 || s.Keys != 0 {
		t.Errorf("after key %#v: %+v, want no task and no key", key, s)
	}
}

// A key that a map cannot hold is refused: an interface key holding a
// value that cannot be hashed (a slice, map or func) rather than crashing
// the caller, and a NaN, which is not equal to itself, rather than giving
// each of its tasks a queue of its own, so that they run at once whatever
// WithKeyLimit says, and leaving the entry of each Pause of it in its map
// for good.
func TestBadInputKeyedUnusableKeys(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	type point struct {
		X, Y float64
		Tag  any
	}
	keyedRefusesKey(t, crew.NewKeyed[float64](p), math.NaN())
	keyedRefusesKey(t, crew.NewKeyed[complex128](p), complex(0, math.NaN()))
	keyedRefusesKey(t, crew.NewKeyed[point](p), point{X: math.NaN()})
	keyedRefusesKey(t, crew.NewKeyed[point](p), point{Tag: []int{1}})
	keyedRefusesKey(t, crew.NewKeyed[[2]any](p), [2]any{1, map[int]int{}})
	anyKeyed := crew.NewKeyed[any](p)
	for _, key := range []any{[]int{1}, map[string]int{}, func() {}, math.NaN(), point{Y: math.NaN()}} {
		keyedRefusesKey(t, anyKeyed, key)
	}
	// Keys that a map holds still work, an interface's nil and a pointer
	// included.
	ran := make(chan struct{}, 4)
	for _, key := range []any{nil, 1.5, &point{}, point{Tag: "x"}} {
		if err := anyKeyed.Go(key, func() { ran <- struct{}{} }); err != nil {
			t.Fatalf("Go(%#v): %v", key, err)
		}
	}
	for range 4 {
		<-ran
	}
}

// A nil *Latency or *Histogram (a field never set) is named, not
// dereferenced: Snapshot reads as empty, and Record, Track and TrackFunc
// panic at once with an error wrapping ErrInvalid that names the call.
// Track must not hand back a task that panics in the worker that runs it,
// before the task itself ever runs.
func TestBadInputNilLatency(t *testing.T) {
	leak.Check(t)
	var l *crew.Latency
	var h *crew.Histogram
	if v, panicked := newPanic(func() {
		if s := h.Snapshot(); s.Count != 0 || s.Quantile(0.5) != 0 {
			t.Errorf("nil Histogram: Snapshot = %+v", s)
		}
		if s := l.Snapshot(); s.Wait.Count != 0 || s.Run.Count != 0 {
			t.Errorf("nil Latency: Snapshot = %+v", s)
		}
	}); panicked {
		t.Errorf("Snapshot of a nil Latency or Histogram panicked: %v", v)
	}
	for call, f := range map[string]func(){
		"Histogram.Record":  func() { h.Record(time.Second) },
		"Latency.Track":     func() { l.Track(func(context.Context) error { return nil }) },
		"Latency.TrackFunc": func() { l.TrackFunc(func() {}) },
	} {
		err, _ := newPanic(f)
		if !errors.Is(err, crew.ErrInvalid) || !strings.Contains(err.Error(), call) {
			t.Errorf("%s on nil: panic %v, want an error wrapping ErrInvalid that names %s", call, err, call)
		}
	}
}

// WithAging(d) counts the priorities beyond ±math.MaxInt64/4/d as that
// bound, which is 0 past about 73 years: every priority would count as 0
// and tasks would run in submission order, whatever their priority. Such
// a d is refused with ErrInvalid; the longest one accepted still orders
// the priorities within its bound.
func TestBadInputPriorityAgingTooLong(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64/4 + 1} {
		err, _ := newPanic(func() { crew.NewPriority(p, crew.WithAging(d)) })
		if !errors.Is(err, crew.ErrInvalid) || !strings.Contains(err.Error(), "WithAging") {
			t.Errorf("NewPriority(WithAging(%v)): panic %v, want an error wrapping ErrInvalid that names WithAging", d, err)
		}
	}
	q := crew.NewPriority(p, crew.WithAging(math.MaxInt64/4))
	started, release := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started
	var order []int
	for _, prio := range []int{-1, 0, 1} {
		if err := q.Go(prio, func() { order = append(order, prio) }); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	q.Wait()
	if !slices.Equal(order, []int{1, 0, -1}) {
		t.Fatalf("WithAging(MaxInt64/4) ran priorities %v, want [1 0 -1]", order)
	}
}
