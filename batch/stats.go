package batch

import (
	"math"
	"math/bits"
	"time"
)

// Stats is a snapshot of a [Batcher]'s counters, taken by [Batcher.Stats].
// Counters only grow; Pending and InFlight are current values.
type Stats struct {
	// Added counts the items accepted by Add and TryAdd.
	Added uint64
	// Rejected counts the items refused because the pending bound was
	// reached: Add returning ErrFull, or TryAdd returning false.
	Rejected uint64
	// Dropped counts the items discarded by DropOldest, from when they are
	// dropped, before the error handler gets them.
	Dropped uint64
	// Batches counts the batches flushed successfully, and Flushed the
	// items in them.
	Batches, Flushed uint64
	// FailedBatches counts the batches handed to the error handler after
	// their last attempt failed (or because Close gave up), and Failed the
	// items in them, each once the handler has returned for it.
	FailedBatches, Failed uint64
	// Retries counts the flush calls made again after a failure, for the
	// batches finished.
	Retries uint64
	// Pending is the number of items accepted and not yet finished: not
	// yet flushed, dropped, or handed to the error handler (until the
	// handler returns for them). In every snapshot, Added = Flushed +
	// Failed + Dropped + Pending.
	Pending int
	// InFlight is the number of batches taken for flushing and not yet
	// finished: being flushed, waiting for a retry, or being handed to the
	// error handler after their last attempt failed (or because Close gave
	// up), until the handler returns for them.
	InFlight int
	// Latency describes the duration of every flush call, retries included.
	Latency Latency
}

// The latency histogram is log-linear: durations are counted in whole
// microseconds, below 4 µs one bucket per microsecond, above it four
// buckets per power of two, so a bucket's upper bound is at most 25% above
// the durations it holds. The last bucket holds everything from 2^40 µs
// (about 12 days) up.
const (
	subBuckets     = 4 // per power of two; a power of two itself
	subBits        = 2 // log2(subBuckets)
	latencyBuckets = subBuckets + subBuckets*(40-subBits) + 1
)

// bucketOf returns the histogram bucket of a duration of us microseconds.
func bucketOf(us uint64) int {
	if us < subBuckets {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us is in [2^e, 2^(e+1))
	sub := int(us>>(e-subBits)) - subBuckets
	return min(subBuckets+(e-subBits)*subBuckets+sub, latencyBuckets-1)
}

// bucketBound returns the upper bound, exclusive, of bucket i in
// microseconds; meaningless for the last bucket.
func bucketBound(i int) uint64 {
	if i < subBuckets {
		return uint64(i) + 1
	}
	j := i - subBuckets
	return uint64(subBuckets+j%subBuckets+1) << (j / subBuckets)
}

// Latency summarizes a set of durations: their count, sum, maximum and a
// histogram for quantile estimates ([Latency.Quantile]).
type Latency struct {
	Count uint64
	Total time.Duration
	Max   time.Duration
	hist  [latencyBuckets]uint64
}

// Mean returns the average duration, or 0 if there is none.
func (l Latency) Mean() time.Duration {
	if l.Count == 0 {
		return 0
	}
	return l.Total / time.Duration(l.Count)
}

// Quantile returns an upper estimate of the q-quantile (0 <= q <= 1) of
// the durations: the upper bound of the histogram bucket holding it, at
// most 25% (or 1 µs) above the true value, and never above Max. It returns
// 0 if there is no duration. Like [crew.HistogramSnapshot.Quantile], it
// clamps q into [0, 1]: a q below 0 reads as 0, one above 1 (or NaN) as 1.
func (l Latency) Quantile(q float64) time.Duration {
	if l.Count == 0 {
		return 0
	}
	if q >= 1 || math.IsNaN(q) {
		return l.Max
	}
	// A negative float converts to garbage, hence max.
	rank := uint64(max(q, 0)*float64(l.Count) + 0.5)
	rank = min(max(rank, 1), l.Count)
	var seen uint64
	for i, n := range l.hist {
		seen += n
		if seen >= rank && i < latencyBuckets-1 {
			return min(time.Duration(bucketBound(i))*time.Microsecond, l.Max)
		}
	}
	return l.Max
}

// observe adds one duration.
func (l *Latency) observe(d time.Duration) {
	l.Count++
	l.Total += d
	l.Max = max(l.Max, d)
	l.hist[bucketOf(uint64(max(d, 0)/time.Microsecond))]++
}
