package batch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Outcomes of the sweep's calls that return no error.
var (
	errRefused  = errors.New("TryAdd refused the item")
	errAccepted = errors.New("TryAdd accepted the item")
	errNoPanic  = errors.New("New did not panic")
)

// badItem is the item of every bad call: it must never be flushed nor
// handed to the error handler.
const badItem = -7

// sweep is the Batcher of one case of TestBadInput, with a flush function
// and an error handler that record what they get.
type sweep struct {
	b        *Batcher[int]
	fail     atomic.Bool   // flushes fail while set
	gate     chan struct{} // when not nil, flushes wait until it is closed
	started  chan struct{} // receives once per flush call
	progress chan struct{} // receives once per flush or handler call

	mu              sync.Mutex
	flushed, handed []int
	errs            []error // of the handler calls
}

func (s *sweep) open(opts ...Option) *Batcher[int] {
	s.started, s.progress = make(chan struct{}, 1024), make(chan struct{}, 1024)
	flush := func(ctx context.Context, items []int) error {
		s.started <- struct{}{}
		if s.gate != nil {
			select {
			case <-s.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if s.fail.Load() {
			return errBoom
		}
		s.mu.Lock()
		s.flushed = append(s.flushed, items...)
		s.mu.Unlock()
		s.progress <- struct{}{}
		return nil
	}
	h := func(_ context.Context, items []int, err error) {
		s.mu.Lock()
		s.handed = append(s.handed, items...)
		s.errs = append(s.errs, err)
		s.mu.Unlock()
		s.progress <- struct{}{}
	}
	s.b = New(flush, append([]Option{WithErrorHandler(h), WithMaxWait(time.Hour)}, opts...)...)
	return s.b
}

// hold makes the flushes wait until release is called.
func (s *sweep) hold() (release func()) {
	s.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(s.gate) })
}

// waitStarted waits for a flush call to begin.
func (s *sweep) waitStarted() error {
	select {
	case <-s.started:
		return nil
	case <-time.After(waitFor):
		return errors.New("no flush started in time")
	}
}

// busy opens a Batcher with opts whose first flush, of one item, has
// begun and waits until release is called.
func (s *sweep) busy(opts ...Option) (b *Batcher[int], release func(), err error) {
	b = s.open(opts...)
	release = s.hold()
	if err = b.Add(context.Background(), 1); err == nil {
		err = s.waitStarted()
	}
	return b, release, err
}

// settle closes the Batcher, if the case made one, and checks that every
// item it accepted was flushed or handed over exactly once, and the bad
// item never.
func (s *sweep) settle(t *testing.T) {
	t.Helper()
	if s.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := s.b.Close(ctx); err != nil && err != ErrClosed && !errors.Is(err, errBoom) {
		t.Errorf("Close at the end = %v", err)
	}
	added := s.b.Stats().Added
	deadline := time.After(waitFor) // after a Close that gave up, the last may come late
	for {
		s.mu.Lock()
		done := uint64(len(s.flushed) + len(s.handed))
		s.mu.Unlock()
		if done >= added {
			break
		}
		select {
		case <-s.progress:
		case <-deadline:
			t.Errorf("%d items accepted, %d flushed or handed over", added, done)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := append(slices.Clone(s.flushed), s.handed...)
	slices.Sort(all)
	if uint64(len(all)) != added || slices.Contains(all, badItem) || len(slices.Compact(all)) != len(all) {
		t.Errorf("%d items accepted; flushed %v, handed over %v", added, s.flushed, s.handed)
	}
}

// newPanic returns the error New panicked with, errNoPanic if it did not.
func newPanic(build func() *Batcher[int]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if err, _ = v.(error); err == nil {
				err = fmt.Errorf("New panicked with %v, not an error", v)
			}
		}
	}()
	b := build()
	b.Close(context.Background())
	return errNoPanic
}

func tryAdd(b *Batcher[int], item int) error {
	if b.TryAdd(item) {
		return errAccepted
	}
	return errRefused
}

// addAll adds items and flushes them, returning the first error.
func addAll(b *Batcher[int], items ...int) error {
	ctx := context.Background()
	for _, it := range items {
		if err := b.Add(ctx, it); err != nil {
			return fmt.Errorf("Add(%d) = %w", it, err)
		}
	}
	return b.Flush(ctx)
}

func flushNop(context.Context, []int) error { return nil }

// TestBadInput calls every exported function and method of the package
// with bad input: zero values, nil pointers, contexts and functions,
// negative and the largest sizes and durations, calls after Close. Each
// gets a clear error (one wrapping crew.ErrInvalid, or ErrClosed after
// Close; New panics with one wrapping crew.ErrInvalid), or works for the
// largest values: never a nil dereference or other runtime error, never a
// hang, and no item accepted that is not then flushed or handed over.
func TestBadInput(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	var nilCtx context.Context
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	size1 := func(int) int { return 1 }
	stopped := crew.New(1)
	stopped.Stop()
	cases := []struct {
		name string
		want error // nil: the call must succeed
		run  func(s *sweep) error
	}{
		// New and its options.
		{"New(nil flush)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New[int](nil) })
		}},
		{"New(nil option)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, nil) })
		}},
		{"WithMaxItems(0)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxItems(0)) })
		}},
		{"WithMaxItems(MinInt)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxItems(math.MinInt)) })
		}},
		{"WithMaxBytes(-1)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxBytes(-1, size1)) })
		}},
		{"WithMaxBytes(nil size)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxBytes[int](1, nil)) })
		}},
		{"WithMaxBytes(size of another type)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxBytes(1, func(string) int { return 1 })) })
		}},
		{"WithMaxWait(0)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxWait(0)) })
		}},
		{"WithMaxWait(MinInt64)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxWait(math.MinInt64)) })
		}},
		{"WithMaxConcurrentFlushes(-1)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxConcurrentFlushes(-1)) })
		}},
		{"WithPool(nil)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithPool(nil)) })
		}},
		{"WithPool(zero Pool)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithPool(new(crew.Pool))) })
		}},
		{"WithMaxPending(-1)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxPending(-1, Block)) })
		}},
		{"WithMaxPending(policy -1)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxPending(1, FullPolicy(-1))) })
		}},
		{"WithMaxPending(policy 3)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithMaxPending(1, DropOldest+1)) })
		}},
		{"WithRetry(-1 attempts)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithRetry(crew.Retry{Attempts: -1, Delay: 0, MaxDelay: 0})) })
		}},
		{"WithRetry(negative base)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] {
				return New(flushNop, WithRetry(crew.Retry{Attempts: 2, Delay: math.MinInt64, MaxDelay: 0}))
			})
		}},
		{"WithRetry(maxDelay below base)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] {
				return New(flushNop, WithRetry(crew.Retry{Attempts: 2, Delay: time.Second, MaxDelay: -1}))
			})
		}},
		{"WithErrorHandler(nil)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] { return New(flushNop, WithErrorHandler[int](nil)) })
		}},
		{"WithErrorHandler(handler of another type)", crew.ErrInvalid, func(*sweep) error {
			return newPanic(func() *Batcher[int] {
				return New(flushNop, WithErrorHandler(func(context.Context, []string, error) {}))
			})
		}},

		// The largest values work.
		{"WithMaxItems(MaxInt)", nil, func(s *sweep) error { return addAll(s.open(WithMaxItems(math.MaxInt)), 1, 2, 3) }},
		{"WithMaxBytes(MaxInt)", nil, func(s *sweep) error {
			return addAll(s.open(WithMaxBytes(math.MaxInt, func(int) int { return math.MaxInt })), 1, 2, 3)
		}},
		{"WithMaxBytes: an item of size MaxInt after a small one", nil, func(s *sweep) error {
			b := s.open(WithMaxBytes(10, func(v int) int {
				if v == 2 {
					return math.MaxInt
				}
				return v
			}))
			for _, it := range []int{1, 2} { // sizes 1 and MaxInt: the second seals the first and itself
				if err := b.Add(ctx, it); err != nil {
					return err
				}
			}
			for range 2 {
				select {
				case <-s.progress:
				case <-time.After(waitFor):
					return errors.New("the byte bound sealed no batch")
				}
			}
			return nil
		}},
		{"WithMaxWait(MaxInt64)", nil, func(s *sweep) error { return addAll(s.open(WithMaxWait(math.MaxInt64)), 1, 2) }},
		{"WithMaxConcurrentFlushes(MaxInt)", nil, func(s *sweep) error {
			return addAll(s.open(WithMaxConcurrentFlushes(math.MaxInt), WithMaxItems(1)), 1, 2, 3)
		}},
		{"WithMaxPending(MaxInt, Block)", nil, func(s *sweep) error { return addAll(s.open(WithMaxPending(math.MaxInt, Block)), 1) }},
		{"WithMaxPending(MaxInt, Fail)", nil, func(s *sweep) error { return addAll(s.open(WithMaxPending(math.MaxInt, Fail)), 1) }},
		{"WithMaxPending(MaxInt, DropOldest)", nil, func(s *sweep) error {
			return addAll(s.open(WithMaxPending(math.MaxInt, DropOldest)), 1)
		}},
		{"WithRetry(crew.Retry{Attempts: MaxInt, Delay: MaxInt64, MaxDelay: MaxInt64})", nil, func(s *sweep) error {
			return addAll(s.open(WithRetry(crew.Retry{Attempts: math.MaxInt, Delay: math.MaxInt64, MaxDelay: math.MaxInt64})), 1)
		}},
		{"WithRetry(crew.Retry{Attempts: MaxInt, Delay: MaxInt64, MaxDelay: MaxInt64}) failing, Close gives up", context.DeadlineExceeded, func(s *sweep) error {
			b := s.open(WithRetry(crew.Retry{Attempts: math.MaxInt, Delay: math.MaxInt64, MaxDelay: math.MaxInt64}), WithMaxItems(1))
			s.fail.Store(true)
			if err := b.Add(ctx, 1); err != nil {
				return err
			}
			if err := s.waitStarted(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			return b.Close(ctx) // the item goes to the handler
		}},
		{"WithRetry(crew.Retry{Attempts: 1, Delay: 0, MaxDelay: 0})", nil, func(s *sweep) error {
			return addAll(s.open(WithRetry(crew.Retry{Attempts: 1, Delay: 0, MaxDelay: 0})), 1)
		}},
		{"WithPool(stopped pool)", nil, func(s *sweep) error { return addAll(s.open(WithPool(stopped)), 1, 2) }},

		// A negative size.
		{"Add: size below 0", crew.ErrInvalid, func(s *sweep) error {
			return s.open(WithMaxBytes(10, func(int) int { return -1 })).Add(ctx, badItem)
		}},
		{"TryAdd: size below 0", errRefused, func(s *sweep) error {
			return tryAdd(s.open(WithMaxBytes(10, func(int) int { return -1 })), badItem)
		}},

		// Zero and nil Batchers.
		{"zero Batcher: Add", crew.ErrInvalid, func(*sweep) error { return new(Batcher[int]).Add(ctx, badItem) }},
		{"zero Batcher: Add(nil ctx)", crew.ErrInvalid, func(*sweep) error { return new(Batcher[int]).Add(nilCtx, badItem) }},
		{"zero Batcher: TryAdd", errRefused, func(*sweep) error { return tryAdd(new(Batcher[int]), badItem) }},
		{"zero Batcher: Flush", crew.ErrInvalid, func(*sweep) error { return new(Batcher[int]).Flush(ctx) }},
		{"zero Batcher: Close", crew.ErrInvalid, func(*sweep) error { return new(Batcher[int]).Close(ctx) }},
		{"zero Batcher: Stats", nil, func(*sweep) error {
			if s := new(Batcher[int]).Stats(); s != (Stats{}) {
				return fmt.Errorf("Stats = %+v", s)
			}
			return nil
		}},
		{"nil *Batcher: Add", crew.ErrInvalid, func(*sweep) error { return (*Batcher[int])(nil).Add(ctx, badItem) }},
		{"nil *Batcher: TryAdd", errRefused, func(*sweep) error { return tryAdd(nil, badItem) }},
		{"nil *Batcher: Flush", crew.ErrInvalid, func(*sweep) error { return (*Batcher[int])(nil).Flush(ctx) }},
		{"nil *Batcher: Close", crew.ErrInvalid, func(*sweep) error { return (*Batcher[int])(nil).Close(ctx) }},
		{"nil *Batcher: Stats", nil, func(*sweep) error {
			if s := (*Batcher[int])(nil).Stats(); s != (Stats{}) {
				return fmt.Errorf("Stats = %+v", s)
			}
			return nil
		}},

		// Nil contexts, with room and at the bound.
		{"Add(nil ctx)", crew.ErrInvalid, func(s *sweep) error { return s.open().Add(nilCtx, badItem) }},
		{"Add(nil ctx) at the bound", crew.ErrInvalid, func(s *sweep) error {
			b, release, err := s.busy(WithMaxItems(1), WithMaxPending(1, Block))
			defer release()
			if err != nil {
				return err
			}
			return b.Add(nilCtx, badItem)
		}},
		{"Flush(nil ctx)", crew.ErrInvalid, func(s *sweep) error { return s.open().Flush(nilCtx) }},
		{"Flush(nil ctx) with a flush under way", crew.ErrInvalid, func(s *sweep) error {
			b, release, err := s.busy(WithMaxItems(1))
			defer release()
			if err != nil {
				return err
			}
			return b.Flush(nilCtx)
		}},
		{"Close(nil ctx)", crew.ErrInvalid, func(s *sweep) error { return s.open().Close(nilCtx) }},
		{"Close(nil ctx) leaves the Batcher open", nil, func(s *sweep) error {
			b, release, err := s.busy(WithMaxItems(1))
			if err != nil {
				release()
				return err
			}
			err = b.Close(nilCtx)
			release()
			if !errors.Is(err, crew.ErrInvalid) {
				return fmt.Errorf("Close(nil) = %w", err)
			}
			return addAll(b, 2)
		}},

		// Ended contexts.
		{"Add(canceled ctx) at the bound", context.Canceled, func(s *sweep) error {
			b, release, err := s.busy(WithMaxItems(1), WithMaxPending(1, Block))
			defer release()
			if err != nil {
				return err
			}
			return b.Add(canceled, badItem)
		}},
		{"Flush(canceled ctx) with a flush under way", context.Canceled, func(s *sweep) error {
			b, release, err := s.busy(WithMaxItems(1))
			defer release()
			if err != nil {
				return err
			}
			return b.Flush(canceled)
		}},

		// Calls after Close.
		{"Add after Close", ErrClosed, func(s *sweep) error { return closed(s).Add(ctx, badItem) }},
		{"Add(nil ctx) after Close", crew.ErrInvalid, func(s *sweep) error { return closed(s).Add(nilCtx, badItem) }},
		{"TryAdd after Close", errRefused, func(s *sweep) error { return tryAdd(closed(s), badItem) }},
		{"Flush after Close", ErrClosed, func(s *sweep) error { return closed(s).Flush(ctx) }},
		{"Flush(nil ctx) after Close", crew.ErrInvalid, func(s *sweep) error { return closed(s).Flush(nilCtx) }},
		{"Close after Close", ErrClosed, func(s *sweep) error { return closed(s).Close(ctx) }},
		{"Close(nil ctx) after Close", crew.ErrInvalid, func(s *sweep) error { return closed(s).Close(nilCtx) }},
		{"Stats after Close", nil, func(s *sweep) error {
			if st := closed(s).Stats(); st.Added != 1 || st.Flushed != 1 || st.Pending != 0 {
				return fmt.Errorf("Stats = %+v", st)
			}
			return nil
		}},

		// Latency and FullPolicy.
		{"zero Latency", nil, func(*sweep) error {
			var l Latency
			for _, q := range []float64{-1, 0, 0.5, 1, 2, math.NaN(), math.Inf(-1), math.Inf(1)} {
				if got := l.Quantile(q); got != 0 {
					return fmt.Errorf("Quantile(%v) = %v", q, got)
				}
			}
			if l.Mean() != 0 {
				return fmt.Errorf("Mean = %v", l.Mean())
			}
			return nil
		}},
		{"Latency.Quantile out of [0, 1]", nil, func(*sweep) error {
			var l Latency
			for _, d := range []time.Duration{time.Millisecond, time.Second, time.Hour} {
				l.observe(d)
			}
			for _, c := range []struct {
				q    float64
				want float64 // as a quantile
			}{{-1, 0}, {math.Inf(-1), 0}, {-math.MaxFloat64, 0}, {2, 1}, {math.Inf(1), 1}, {math.NaN(), 1}} {
				if got, want := l.Quantile(c.q), l.Quantile(c.want); got != want {
					return fmt.Errorf("Quantile(%v) = %v, want %v", c.q, got, want)
				}
			}
			return nil
		}},
		{"FullPolicy(-1).String", nil, func(*sweep) error {
			if got := FullPolicy(-1).String(); got != "FullPolicy(-1)" {
				return fmt.Errorf("%q", got)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leak.Check(t)
			s := new(sweep)
			var err error
			call(t, c.name, func() { err = c.run(s) })
			switch {
			case c.want == nil && err != nil:
				t.Errorf("%v, want success", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("%v, want %v", err, c.want)
			}
			if errors.Is(err, crew.ErrInvalid) && testing.Verbose() {
				t.Log(err)
			}
			s.settle(t)
		})
	}
}

// closed returns a Batcher that flushed one item and was closed.
func closed(s *sweep) *Batcher[int] {
	b := s.open()
	if err := b.Add(context.Background(), 1); err != nil {
		panic(err)
	}
	if err := b.Close(context.Background()); err != nil {
		panic(err)
	}
	return b
}
