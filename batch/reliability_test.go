package batch

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// ledger counts, per item, how often it was accepted, flushed and handed
// to the error handler, for tests whose handler adds items back.
type ledger struct {
	mu                        sync.Mutex
	accepted, flushed, handed map[int]int
}

func newLedger() *ledger {
	return &ledger{accepted: map[int]int{}, flushed: map[int]int{}, handed: map[int]int{}}
}

func (l *ledger) count(m map[int]int, items ...int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range items {
		m[it]++
	}
}

// check fails t unless each item was flushed or handed over exactly as
// many times as it was accepted.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int]bool{}
	for _, m := range []map[int]int{l.accepted, l.flushed, l.handed} {
		for it := range m {
			seen[it] = true
		}
	}
	for it := range seen {
		if a, f, h := l.accepted[it], l.flushed[it], l.handed[it]; f+h != a {
			t.Errorf("item %d: accepted %d times, flushed %d, handed over %d", it, a, f, h)
		}
	}
}

// A handler that adds back with TryAdd the items DropOldest drops is never
// called from inside itself: at the bound, each re-add would drop the next
// oldest item and call the handler again, on the same stack, without end.
// While a dropped item is on its way to the handler no other is dropped,
// so the re-add is refused; every item accepted is flushed or handed over
// once.
func TestDropOldestHandlerThatReAddsDoesNotRecurse(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	l := newLedger()
	gate := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(gate) })
	defer letGo()
	started := make(chan struct{}, 100)
	flush := func(_ context.Context, items []int) error {
		started <- struct{}{}
		<-gate
		l.count(l.flushed, items...)
		return nil
	}
	var depth, deepest atomic.Int32
	var b *Batcher[int]
	h := func(_ context.Context, items []int, err error) {
		d := depth.Add(1)
		defer depth.Add(-1)
		if d > deepest.Load() {
			deepest.Store(d)
		}
		l.count(l.handed, items...)
		if d > 1 {
			return // called from inside itself: stop before the stack overflows
		}
		for _, it := range items {
			if b.TryAdd(it) {
				l.count(l.accepted, it)
			}
		}
	}
	b = New(flush, WithMaxItems(5), WithMaxWait(time.Hour), WithMaxPending(20, DropOldest), WithErrorHandler(h))
	for i := range 40 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatalf("Add(%d) = %v", i, err)
		}
		l.count(l.accepted, i)
		if i == 4 {
			receive(t, started) // [0 .. 4] is being flushed, and stays so
		}
	}
	if d := deepest.Load(); d != 1 {
		t.Errorf("the error handler was called from inside itself, %d calls deep", d)
	}
	if s := b.Stats(); s.Dropped != 20 || s.Pending != 20 {
		t.Errorf("stats %+v; want 20 dropped, 20 pending", s)
	}
	letGo()
	closeWithin(t, b, "after the drops")
	l.check(t)
}

// An item dropped by a TryAdd in the error handler, called for a batch
// whose flush failed, goes to the handler once that call has returned,
// not from inside it.
func TestDropByTheErrorHandlerIsHandedOverAfterIt(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	l := newLedger()
	gate := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(gate) })
	defer letGo()
	started := make(chan struct{}, 100)
	var failed atomic.Bool
	flush := func(_ context.Context, items []int) error {
		if !failed.Swap(true) { // the first batch, [0 1], fails
			started <- struct{}{}
			<-gate
			return errBoom
		}
		l.count(l.flushed, items...)
		return nil
	}
	var depth, deepest atomic.Int32
	var mu sync.Mutex
	var errs []error
	calls := make(chan struct{}, 100)
	var b *Batcher[int]
	h := func(_ context.Context, items []int, err error) {
		d := depth.Add(1)
		defer depth.Add(-1)
		if d > deepest.Load() {
			deepest.Store(d)
		}
		l.count(l.handed, items...)
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		defer func() { calls <- struct{}{} }()
		if d > 1 {
			return
		}
		for _, it := range items {
			if b.TryAdd(it) {
				l.count(l.accepted, it)
			}
		}
	}
	b = New(flush, WithMaxItems(2), WithMaxWait(time.Hour), WithMaxPending(4, DropOldest), WithErrorHandler(h))
	for i := range 4 { // [0 1] is being flushed, [2 3] waits
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
		l.count(l.accepted, i)
		if i == 1 {
			receive(t, started)
		}
	}
	letGo() // [0 1] fails; the handler's TryAdd(0) drops 2
	receive(t, calls)
	receive(t, calls) // before Close, which would make TryAdd refuse
	var err error
	call(t, "Close", func() { err = b.Close(ctx) })
	if err != nil && !errors.Is(err, errBoom) { // [0 1] may fail during the call
		t.Errorf("Close = %v", err)
	}
	if d := deepest.Load(); d != 1 {
		t.Errorf("the error handler was called from inside itself, %d calls deep", d)
	}
	mu.Lock()
	if len(errs) != 2 || !errors.Is(errs[0], errBoom) || !errors.Is(errs[1], ErrDropped) {
		t.Errorf("handler errors %v; want the flush error, then ErrDropped", errs)
	}
	mu.Unlock()
	l.check(t)
}

// call runs f, failing t if it panics or has not returned within waitFor.
func call(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				done <- recover()
			}
		}()
		f()
		returned = true
		done <- nil
	}()
	select {
	case v := <-done:
		if v != nil {
			t.Errorf("%s panicked: %v", what, v)
		}
	case <-time.After(waitFor):
		t.Errorf("%s has not returned within %v", what, waitFor)
	}
}

// The methods of a zero Batcher, and of a nil *Batcher, report an error
// wrapping crew.ErrInvalid, accept nothing and wait for nothing.
func TestZeroBatcherReportsAnError(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	for name, b := range map[string]*Batcher[int]{"zero": new(Batcher[int]), "nil": nil} {
		t.Run(name, func(t *testing.T) {
			var err error
			call(t, "Add", func() { err = b.Add(ctx, 1) })
			if !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("Add = %v, want an error wrapping crew.ErrInvalid", err)
			}
			call(t, "TryAdd", func() {
				if b.TryAdd(1) {
					t.Error("TryAdd accepted an item")
				}
			})
			err = nil
			call(t, "Flush", func() { err = b.Flush(ctx) })
			if !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("Flush = %v, want an error wrapping crew.ErrInvalid", err)
			}
			err = nil
			call(t, "Close", func() { err = b.Close(ctx) })
			if !errors.Is(err, crew.ErrInvalid) {
				t.Errorf("Close = %v, want an error wrapping crew.ErrInvalid", err)
			}
			call(t, "Stats", func() {
				if s := b.Stats(); s != (Stats{}) {
					t.Errorf("Stats = %+v, want zeros", s)
				}
			})
		})
	}
}

// A nil context gets an error wrapping crew.ErrInvalid before anything
// happens, also when the call would wait: Close(nil) leaves the Batcher
// open, Add(nil, x) accepts nothing.
func TestNilContextIsAnError(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	defer release()
	b := New(rec.flush, WithMaxItems(1), WithMaxPending(1, Block))
	if err := b.Add(ctx, 1); err != nil { // flushed at once, and held: at the bound
		t.Fatal(err)
	}
	rec.waitStarted(t)
	var nilCtx context.Context
	for _, c := range []struct {
		what string
		f    func() error
	}{
		{"Add(nil, 2)", func() error { return b.Add(nilCtx, 2) }},
		{"Flush(nil)", func() error { return b.Flush(nilCtx) }},
		{"Close(nil)", func() error { return b.Close(nilCtx) }},
	} {
		var err error
		call(t, c.what, func() { err = c.f() })
		if !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s = %v, want an error wrapping crew.ErrInvalid", c.what, err)
		}
	}
	release()
	if err := b.Add(ctx, 3); err != nil {
		t.Fatalf("Add after Close(nil) = %v: the Batcher must still be open", err)
	}
	closeWithin(t, b, "after the nil contexts")
	if rec.all[0] != 1 || rec.all[1] != 3 || len(rec.all) != 2 {
		t.Fatalf("flushed %v, want [1 3]", rec.all)
	}
	if err := b.Add(nilCtx, 4); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Add(nil, 4) after Close = %v, want an error wrapping crew.ErrInvalid", err)
	}
}

// Quantile clamps q into [0, 1] as crew.HistogramSnapshot.Quantile does:
// a q below 0 reads as 0, not as 1.
func TestLatencyQuantileOutOfRange(t *testing.T) {
	leak.Check(t)
	var l Latency
	for _, q := range []float64{-1, 2, math.NaN(), math.Inf(-1), math.Inf(1)} {
		if got := l.Quantile(q); got != 0 {
			t.Errorf("empty: Quantile(%v) = %v, want 0", q, got)
		}
	}
	for i := 1; i <= 100; i++ {
		l.observe(time.Duration(i) * time.Millisecond)
	}
	low, high := l.Quantile(0), l.Quantile(1)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{-1, low}, {-0.5, low}, {math.Inf(-1), low}, {-math.MaxFloat64, low}, {1.5, high}, {math.Inf(1), high}, {math.NaN(), high}} {
		if got := l.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}
