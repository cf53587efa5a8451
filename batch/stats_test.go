package batch

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

func TestBuckets(t *testing.T) {
	leak.Check(t)
	last := -1
	for _, us := range []uint64{0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 15, 16, 17, 100, 1000, 1023, 1024, 1025, 123456789, 1<<40 - 1} {
		i := bucketOf(us)
		if i < last {
			t.Fatalf("bucketOf(%d) = %d, below the bucket of a smaller duration", us, i)
		}
		last = i
		bound := bucketBound(i)
		if us >= bound || float64(bound) > math.Max(1.25*float64(us), float64(us+1)) {
			t.Errorf("%d µs in bucket %d with bound %d", us, i, bound)
		}
		if i > 0 && bucketBound(i-1) > us {
			t.Errorf("%d µs in bucket %d, but bucket %d reaches %d", us, i, i-1, bucketBound(i-1))
		}
	}
	if i := bucketOf(1<<40 - 1); i == latencyBuckets-1 {
		t.Fatal("2^40-1 µs in the last bucket")
	}
	if i := bucketOf(1 << 40); i != latencyBuckets-1 {
		t.Fatalf("2^40 µs in bucket %d, not the last", i)
	}
	if i := bucketOf(math.MaxUint64); i != latencyBuckets-1 {
		t.Fatalf("the longest duration in bucket %d, not the last", i)
	}
}

func TestLatency(t *testing.T) {
	leak.Check(t)
	var l Latency
	if l.Mean() != 0 || l.Quantile(0.5) != 0 {
		t.Fatal("empty latency not zero")
	}
	for i := 1; i <= 100; i++ {
		l.observe(time.Duration(i) * time.Millisecond)
	}
	if l.Count != 100 || l.Max != 100*time.Millisecond || l.Mean() != 50500*time.Microsecond {
		t.Fatalf("count %d max %v mean %v", l.Count, l.Max, l.Mean())
	}
	for _, c := range []struct {
		q    float64
		true time.Duration
	}{{0, time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		got := l.Quantile(c.q)
		if got < c.true || got > c.true*5/4 || got > l.Max {
			t.Errorf("Quantile(%v) = %v, true value %v", c.q, got, c.true)
		}
	}
	l.observe(-time.Second) // a clock step must not break the histogram
	l.observe(1000 * time.Hour)
	if got := l.Quantile(1); got != 1000*time.Hour {
		t.Fatalf("Quantile(1) = %v", got)
	}
}

// A failed batch counts in Stats.InFlight, and its items in Pending, until
// the error handler has returned for it; then in FailedBatches and Failed.
// Every snapshot adds up: Added = Flushed + Failed + Dropped + Pending.
func TestStatsCountAFailedBatchInFlightUntilTheHandlerReturns(t *testing.T) {
	leak.Check(t)
	inHandler, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	h := func(context.Context, []int, error) {
		if calls.Add(1) == 1 { // hold the first batch's hand-over
			close(inHandler)
			<-release
		}
	}
	b := New(func(context.Context, []int) error { return errBoom },
		WithMaxItems(2), WithMaxWait(time.Hour), WithErrorHandler(h))
	ctx := context.Background()
	for i := range 3 { // the third stays in the open batch
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, inHandler)
	adds := func(s Stats) bool { return s.Added == s.Flushed+s.Failed+s.Dropped+uint64(s.Pending) }
	if s := b.Stats(); s.InFlight != 1 || s.Pending != 3 || s.FailedBatches != 0 || s.Failed != 0 || !adds(s) {
		t.Errorf("while the handler has the batch: stats %+v, want InFlight 1, Pending 3, nothing Failed", s)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(ctx) }()
	close(release)
	if err := receive(t, flushed); !errors.Is(err, errBoom) {
		t.Fatalf("Flush = %v, want an error wrapping errBoom", err)
	}
	if s := b.Stats(); s.InFlight != 0 || s.Pending != 0 || s.FailedBatches != 2 || s.Failed != 3 || !adds(s) {
		t.Errorf("after Flush: stats %+v, want InFlight 0, Pending 0, 2 batches of 3 items Failed", s)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
