package crew_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// exactQuantile is the nearest-rank q-quantile of sorted values.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

// checkQuantiles records values into a Histogram and checks every reported
// quantile against the exact one, within HistogramRelativeError.
func checkQuantiles(t *testing.T, name string, values []time.Duration) {
	t.Helper()
	var h crew.Histogram
	var sum time.Duration
	for _, v := range values {
		h.Record(v)
		sum += max(v, 0)
	}
	s := h.Snapshot()
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	if s.Count != uint64(len(values)) || s.Sum != sum || s.Max != max(sorted[len(sorted)-1], 0) {
		t.Fatalf("%s: count %d sum %v max %v; want %d %v %v", name, s.Count, s.Sum, s.Max, len(values), sum, sorted[len(sorted)-1])
	}
	for _, q := range []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1} {
		want := max(exactQuantile(sorted, q), 0)
		got := s.Quantile(q)
		if err := math.Abs(float64(got-want)) / float64(max(want, 1)); err > crew.HistogramRelativeError {
			t.Errorf("%s: Quantile(%v) = %v, exact %v: error %.2f%% > %.3f%%", name, q, got, want, 100*err, 100*crew.HistogramRelativeError)
		}
		// CountAtOrBelow agrees with Quantile: at least a fraction q of the
		// observations read at or below the reported quantile.
		if n := s.CountAtOrBelow(got); float64(n) < q*float64(s.Count) {
			t.Errorf("%s: CountAtOrBelow(Quantile(%v) = %v) = %d, want at least %v", name, q, got, n, q*float64(s.Count))
		}
	}
}

func TestHistogramQuantilesWithinStatedError(t *testing.T) {
	leak.Check(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100_000
	dists := map[string]func() time.Duration{
		// From a nanosecond to 100 seconds, equally spread in log scale:
		// every bucket size is exercised.
		"log-uniform": func() time.Duration { return time.Duration(math.Exp(rng.Float64() * math.Log(1e11))) },
		"uniform-µs":  func() time.Duration { return time.Duration(rng.IntN(1000_000)) },
		"exponential": func() time.Duration { return time.Duration(rng.ExpFloat64() * 50e3) },
		// A latency-like mix: a fast mode and a slow tail.
		"bimodal": func() time.Duration {
			if rng.IntN(100) == 0 {
				return 5*time.Millisecond + time.Duration(rng.IntN(int(time.Millisecond)))
			}
			return 20*time.Microsecond + time.Duration(rng.IntN(5000))
		},
		"tiny":      func() time.Duration { return time.Duration(rng.IntN(40)) }, // exact below 32ns
		"huge":      func() time.Duration { return time.Duration(rng.Int64N(int64(4 * time.Hour))) },
		"constant":  func() time.Duration { return 1234567 },
		"negatives": func() time.Duration { return time.Duration(rng.IntN(2000) - 1000) },
	}
	for name, gen := range dists {
		values := make([]time.Duration, n)
		for i := range values {
			values[i] = gen()
		}
		checkQuantiles(t, name, values)
	}
}

func TestHistogramExactBelow32ns(t *testing.T) {
	leak.Check(t)
	var h crew.Histogram
	for v := range 32 {
		h.Record(time.Duration(v))
	}
	s := h.Snapshot()
	for v := range 32 {
		if got := s.Quantile(float64(v+1) / 32); got != time.Duration(v) {
			t.Errorf("Quantile(%d/32) = %v, want %v", v+1, got, time.Duration(v))
		}
		if got := s.CountAtOrBelow(time.Duration(v)); got != uint64(v+1) {
			t.Errorf("CountAtOrBelow(%d) = %d, want %d", v, got, v+1)
		}
	}
}

func TestHistogramBeyondRange(t *testing.T) {
	leak.Check(t)
	var h crew.Histogram
	h.Record(10 * time.Hour) // beyond the bucketed range: counted, Max exact
	h.Record(time.Second)
	s := h.Snapshot()
	if s.Count != 2 || s.Max != 10*time.Hour || s.Quantile(1) != 10*time.Hour {
		t.Fatalf("snapshot %+v, Quantile(1) %v", s, s.Quantile(1))
	}
	if got := s.Quantile(0.5); math.Abs(float64(got-time.Second))/float64(time.Second) > crew.HistogramRelativeError {
		t.Errorf("Quantile(0.5) = %v, want about 1s", got)
	}
}

// oneToHundredMs returns a snapshot of the observations 1, 2, ... 100 ms.
func oneToHundredMs() crew.HistogramSnapshot {
	var h crew.Histogram
	for ms := 1; ms <= 100; ms++ {
		h.Record(time.Duration(ms) * time.Millisecond)
	}
	return h.Snapshot()
}

// Quantile clamps q into [0, 1]: below 0 it is the smallest observation,
// above 1 the largest.
func TestHistogramQuantileClampsQ(t *testing.T) {
	leak.Check(t)
	s := oneToHundredMs()
	if lo, neg := s.Quantile(0), s.Quantile(-1); lo != neg || lo > 2*time.Millisecond {
		t.Errorf("Quantile(0) = %v, Quantile(-1) = %v; want both about 1ms", lo, neg)
	}
	if hi := s.Quantile(2); hi != s.Max {
		t.Errorf("Quantile(2) = %v, want Max %v", hi, s.Max)
	}
}

// The nearest rank of q among n observations is ceil(q×n) in exact
// arithmetic; in floating point q×n can land just above an integer
// (0.07×100 = 7.000000000000001). Every percentile of 1..100 ms is its own
// value, within the stated error: a rank taken as ceil(7.000000000000001)
// would make Quantile(0.07) 8 ms, 14% off.
func TestHistogramQuantileRankIsExactForWholeProducts(t *testing.T) {
	leak.Check(t)
	s := oneToHundredMs()
	for k := 1; k <= 100; k++ {
		q := float64(k) / 100
		want := time.Duration(k) * time.Millisecond
		if got := s.Quantile(q); math.Abs(float64(got-want)) > crew.HistogramRelativeError*float64(want) {
			t.Errorf("Quantile(%v) of 1..100 ms = %v, want %v within %.3f%%", q, got, want, 100*crew.HistogramRelativeError)
		}
	}
}

func TestHistogramEmpty(t *testing.T) {
	leak.Check(t)
	var h crew.Histogram
	s := h.Snapshot()
	if s.Count != 0 || s.Quantile(0.5) != 0 || s.Mean() != 0 || s.CountAtOrBelow(time.Hour) != 0 || s.Max != 0 {
		t.Fatalf("empty snapshot: %+v", s)
	}
	var zero crew.HistogramSnapshot
	if zero.Quantile(0.99) != 0 {
		t.Fatal("zero snapshot has a quantile")
	}
}

// Concurrent recorders lose nothing (and the race detector sees no race).
func TestHistogramConcurrentRecord(t *testing.T) {
	leak.Check(t)
	var h crew.Histogram
	const goroutines, each = 8, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				h.Record(time.Duration(g*each + i))
				if i%1000 == 0 {
					h.Snapshot() // snapshots during recording are fine
				}
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	const total = goroutines * each
	if s.Count != total || s.Max != total-1 || s.Sum != total*(total-1)/2 {
		t.Fatalf("count %d max %v sum %v; want %d %v %v", s.Count, s.Max, s.Sum, total, time.Duration(total-1), time.Duration(total*(total-1)/2))
	}
	if s.Mean() != s.Sum/total {
		t.Fatalf("mean %v", s.Mean())
	}
}

// Tracking a nil task gives a nil task, which the pool reports as
// ErrNilTask, not a task that panics when it runs.
func TestLatencyTrackNil(t *testing.T) {
	leak.Check(t)
	var l crew.Latency
	if l.Track(nil) != nil || l.TrackFunc(nil) != nil {
		t.Fatal("Track(nil) returned a task")
	}
	p := crew.New(1)
	defer p.Stop()
	if err := p.Go(l.TrackFunc(nil)); err != crew.ErrNilTask {
		t.Fatalf("Go(TrackFunc(nil)) = %v, want ErrNilTask", err)
	}
	if err := p.Group(context.Background()).Go(l.Track(nil)); err != crew.ErrNilTask {
		t.Fatalf("Group.Go(Track(nil)) = %v, want ErrNilTask", err)
	}
}
