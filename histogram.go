package crew

import (
	"context"
	"log/slog"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/clock"
)

// Histogram layout: log-linear, as in HdrHistogram. Durations below
// 2*histSub nanoseconds have a bucket each; above, every power of two is
// split into histSub buckets of equal width, so a bucket's width is at most
// 1/histSub of its lower bound. Reporting a bucket by its midpoint is then
// within 1/(2*histSub) = 3.125% of every value in it.
const (
	histSubBits = 4
	histSub     = 1 << histSubBits // buckets per power of two
	histLinear  = 2 * histSub      // values below are exact
	// histMaxBits bounds the range: durations of 2^histMaxBits ns (about
	// 4.9 hours) and more are counted in the last bucket.
	histMaxBits = 44
	histBuckets = (histMaxBits - histSubBits + 1) * histSub
	histMaxNs   = 1<<histMaxBits - 1

	// HistogramRelativeError bounds the error of Quantile and
	// CountAtOrBelow: a reported duration is within this fraction of the
	// true one (durations under 32ns are exact).
	HistogramRelativeError = 1.0 / (2 * histSub)
)

// histBucket returns the bucket of a duration of v >= 0 nanoseconds.
func histBucket(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	if v > histMaxNs {
		v = histMaxNs
	}
	shift := bits.Len64(v) - (histSubBits + 1)
	return shift*histSub + int(v>>shift)
}

// histLower returns the smallest value in bucket i and the bucket's width.
func histLower(i int) (lower, width uint64) {
	if i < histLinear {
		return uint64(i), 1
	}
	shift := i/histSub - 1
	return uint64(i%histSub+histSub) << shift, 1 << shift
}

// histValue is the value a bucket reports: its midpoint.
func histValue(i int) uint64 {
	lower, width := histLower(i)
	return lower + width/2
}

// histShard is one set of counters. A Histogram has several so that
// workers on different processors rarely write to the same cache line.
type histShard struct {
	counts [histBuckets]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
	max    atomic.Uint64 // nanoseconds
	_      [64]byte
}

type histShards struct {
	s    []histShard
	mask uint32
}

// A Histogram records durations and reports their quantiles. It is
// lock-free: [Histogram.Record] is two atomic adds on one of several shards
// of counters, picked at random so that concurrent recorders rarely share
// a cache line, plus a compare-and-swap when a new maximum is seen; it
// allocates nothing. The first Record allocates the counters, about 5 KiB
// per shard, with one shard per processor (at least 2, at most 8).
// Quantiles ([HistogramSnapshot.Quantile]) are within
// [HistogramRelativeError] (3.125%) of the true value from 0 to 2^44 ns
// (about 4.9 hours; beyond, observations still count, and the maximum is
// exact, but a quantile that falls there reads as about 4.9 hours).
//
// The zero value is an empty histogram ready to use. A Histogram must not
// be copied after first use. All methods are safe for concurrent use.
type Histogram struct {
	shards atomic.Pointer[histShards]
}

func (h *Histogram) load() *histShards {
	if s := h.shards.Load(); s != nil {
		return s
	}
	n := 2
	for n < runtime.GOMAXPROCS(0) && n < 8 {
		n <<= 1
	}
	s := &histShards{s: make([]histShard, n), mask: uint32(n - 1)}
	if h.shards.CompareAndSwap(nil, s) {
		return s
	}
	return h.shards.Load()
}

// Record adds one observation of d. Negative durations count as zero;
// durations beyond about 4.9 hours count in the last bucket (and in Max
// exactly). On a nil *Histogram, which has nowhere to count, Record panics
// with an error wrapping [ErrInvalid].
func (h *Histogram) Record(d time.Duration) {
	if h == nil {
		panic(invalidf("Histogram.Record(%v) on a nil *Histogram", d))
	}
	v := uint64(max(d, 0))
	ss := h.load()
	s := &ss.s[rand.Uint32()&ss.mask]
	s.counts[histBucket(v)].Add(1)
	s.sum.Add(v)
	for {
		m := s.max.Load()
		if v <= m || s.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Snapshot returns the histogram's counts at this moment. It takes no lock
// that Record waits for and allocates one 5 KiB array; it reads every
// bucket of every shard. Observations recorded while it runs may or may
// not be in it; Count always agrees with the buckets Quantile reads. A nil
// *Histogram's snapshot is empty.
func (h *Histogram) Snapshot() HistogramSnapshot {
	if h == nil {
		return HistogramSnapshot{}
	}
	ss := h.shards.Load()
	if ss == nil {
		return HistogramSnapshot{}
	}
	counts := new([histBuckets]uint64)
	var s HistogramSnapshot
	var sum uint64
	for i := range ss.s {
		sh := &ss.s[i]
		for b := range counts {
			if c := sh.counts[b].Load(); c != 0 {
				counts[b] += c
				s.Count += c
			}
		}
		sum += sh.sum.Load()
		s.Max = max(s.Max, time.Duration(sh.max.Load()))
	}
	s.Sum = time.Duration(sum)
	s.counts = counts
	return s
}

// HistogramSnapshot is the state of a [Histogram] at one moment, made by
// [Histogram.Snapshot]. The zero value is an empty snapshot.
type HistogramSnapshot struct {
	Count uint64        // observations
	Sum   time.Duration // their total (it wraps after 584 years)
	Max   time.Duration // the largest, exactly

	counts *[histBuckets]uint64
}

// Quantile returns the q-quantile of the observations (0 <= q <= 1) by the
// nearest-rank method: the smallest recorded duration such that at least a
// fraction q of the observations are at most it. The result is within
// [HistogramRelativeError] (3.125%) of that duration; Quantile(1) is Max
// exactly. It returns 0 for an empty snapshot and clamps q into [0, 1].
// It costs a scan of about 700 counters.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || s.counts == nil {
		return 0
	}
	if q >= 1 || math.IsNaN(q) {
		return s.Max
	}
	// The product rounds up past an integer for some q (0.07×100 is
	// 7.000000000000001, which made the rank 8): ceil a hair below it.
	// (A negative float converts to garbage, hence max.)
	x := max(q, 0) * float64(s.Count)
	rank := max(uint64(math.Ceil(x-x*0x1p-50)), 1)
	var seen uint64
	for i, c := range s.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(histValue(i)), s.Max)
		}
	}
	return s.Max
}

// Mean returns the average observation, or 0 for an empty snapshot.
func (s HistogramSnapshot) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// CountAtOrBelow returns how many observations were at most d, reading
// each observation as the value Quantile reports for it (within
// [HistogramRelativeError] of the true one): its bucket's value, or Max if
// that is less, so that every observation counts for a d at or above Max.
// A longer observation raises Max, so the count for a d just below it
// can go down from one snapshot to the next. For the cumulative count of
// a Prometheus or OpenTelemetry bucket with upper bound d, which must
// never go down, read it from a copy of the snapshot whose Max is
// math.MaxInt64: each observation then counts by its bucket's value alone.
func (s HistogramSnapshot) CountAtOrBelow(d time.Duration) uint64 {
	switch {
	case s.counts == nil || d < 0:
		return 0
	case d >= s.Max:
		return s.Count
	}
	var n uint64
	for i, c := range s.counts {
		if c == 0 {
			continue
		}
		if time.Duration(histValue(i)) > d {
			break
		}
		n += c
	}
	return n
}

// LogValue reports the snapshot to [log/slog] as a group of count, p50,
// p90, p99 and max.
func (s HistogramSnapshot) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Uint64("count", s.Count),
		slog.Duration("p50", s.Quantile(0.5)),
		slog.Duration("p90", s.Quantile(0.9)),
		slog.Duration("p99", s.Quantile(0.99)),
		slog.Duration("max", s.Max),
	)
}

// Latency records how long tasks wait in a queue and how long they run,
// as two histograms ([Histogram]). A pool built [WithLatency] keeps one
// (see [Pool.Latency]); make your own to time a subset of tasks, such as
// one [Group]'s or one key's, with [Latency.Track] and [Latency.TrackFunc].
// The zero value is ready to use and must not be copied after first use.
type Latency struct {
	Wait Histogram // from submission to start
	Run  Histogram // from start to return (or panic)
}

// LatencySnapshot is the state of a [Latency] at one moment.
type LatencySnapshot struct {
	Wait HistogramSnapshot // time from submission to start
	Run  HistogramSnapshot // time from start to return (or panic)
}

// Snapshot returns both histograms' counts at this moment; a nil
// *Latency's are empty.
func (l *Latency) Snapshot() LatencySnapshot {
	if l == nil {
		return LatencySnapshot{}
	}
	return LatencySnapshot{Wait: l.Wait.Snapshot(), Run: l.Run.Snapshot()}
}

// LogValue reports the snapshot to [log/slog] as the groups wait and run.
func (s LatencySnapshot) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("wait", s.Wait), slog.Any("run", s.Run))
}

// Track returns a task that runs task and records in l how long it waited
// (from the call to Track to its start) and how long it ran. Wrap a task
// as it is submitted, for example g.Go(lat.Track(f)), to time the tasks of
// one [Group] or one key. It costs a closure and three clock reads. A panic
// in task is timed and passed on. Track(nil) returns nil, which a Go or
// Submit reports as [ErrNilTask]. On a nil *Latency, Track panics with an
// error wrapping [ErrInvalid], rather than return a task that would fail
// on its worker before it ran.
func (l *Latency) Track(task func(context.Context) error) func(context.Context) error {
	if l == nil {
		panic(invalidf("Latency.Track on a nil *Latency"))
	}
	if task == nil {
		return nil
	}
	enq := clock.Now()
	return func(ctx context.Context) error {
		defer l.ran(l.started(enq))
		return task(ctx)
	}
}

// TrackFunc is [Latency.Track] for a func(), as [Pool.Go] takes;
// TrackFunc(nil) returns nil, and TrackFunc on a nil *Latency panics as
// Track does.
func (l *Latency) TrackFunc(task func()) func() {
	if l == nil {
		panic(invalidf("Latency.TrackFunc on a nil *Latency"))
	}
	if task == nil {
		return nil
	}
	enq := clock.Now()
	return func() {
		defer l.ran(l.started(enq))
		task()
	}
}

// started records the wait of a task submitted at enq that starts now, and
// returns now.
func (l *Latency) started(enq int64) int64 {
	start := clock.Now()
	l.Wait.Record(time.Duration(start - enq))
	return start
}

// ran records the run of a task that started at start and ends now.
func (l *Latency) ran(start int64) { l.Run.Record(time.Duration(clock.Now() - start)) }
