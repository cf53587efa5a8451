package batch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// waitFor is how long a test waits for something that should happen soon.
const waitFor = 5 * time.Second

// recorder is a flush function that records a copy of every batch and
// can hold flushes back.
type recorder[T any] struct {
	batches chan []T      // every batch flushed, in order
	started chan struct{} // receives once per flush call, before gate
	gate    chan struct{} // when not nil, flushes wait until it is closed

	mu  sync.Mutex
	all []T
}

func newRecorder[T any]() *recorder[T] {
	return &recorder[T]{batches: make(chan []T, 1024), started: make(chan struct{}, 1024)}
}

// hold makes flushes wait until the returned function is called.
func (r *recorder[T]) hold() (release func()) {
	r.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(r.gate) })
}

func (r *recorder[T]) flush(ctx context.Context, items []T) error {
	r.started <- struct{}{}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := slices.Clone(items)
	r.mu.Lock()
	r.all = append(r.all, c...)
	r.mu.Unlock()
	r.batches <- c
	return nil
}

// next returns the next batch flushed, failing t if none comes in time.
func (r *recorder[T]) next(t *testing.T) []T {
	t.Helper()
	select {
	case b := <-r.batches:
		return b
	case <-time.After(waitFor):
		t.Fatal("no batch flushed in time")
		return nil
	}
}

// none fails t if a batch was flushed and not taken by next.
func (r *recorder[T]) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-r.batches:
		t.Fatalf("unexpected batch %v", b)
	default:
	}
}

// waitStarted waits for a flush call to begin.
func (r *recorder[T]) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-r.started:
	case <-time.After(waitFor):
		t.Fatal("no flush started in time")
	}
}

// handed is one call of an error handler.
type handed[T any] struct {
	items []T
	err   error
}

// handler returns an error handler sending copies of its calls on the
// returned channel.
func handler[T any]() (func(context.Context, []T, error), chan handed[T]) {
	ch := make(chan handed[T], 1024)
	return func(_ context.Context, items []T, err error) {
		ch <- handed[T]{slices.Clone(items), err}
	}, ch
}

// receive returns the next value from ch, failing t if none comes in time.
func receive[V any](t *testing.T, ch <-chan V) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatal("nothing received in time")
		var zero V
		return zero
	}
}

// seq returns the ints from lo to hi-1.
func seq(lo, hi int) []int {
	s := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// closeWithin closes b and fails t if Close returns an error, or has not
// returned within waitFor: then with b's counts of flushers, and Close
// gives up so that the test can end.
func closeWithin[T any](t *testing.T, b *Batcher[T], what string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("%s: Close = %v", what, err)
		}
	case <-time.After(waitFor):
		b.mu.Lock()
		flushing, queued := b.flushing, b.queued
		b.mu.Unlock()
		cancel()
		<-closed
		t.Fatalf("%s: Close hung with %d flushers, %d queued", what, flushing, queued)
	}
}
