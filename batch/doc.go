// Package batch groups items produced by many goroutines into batches and
// hands each batch to a flush function, such as one HTTP request or one
// database insert for many events.
//
// A [Batcher] keeps one mutex-protected buffer. [Batcher.Add] appends to it
// under the lock and returns; it neither allocates per item (beyond growing
// the buffer) nor selects over channels. A batch is sealed when it reaches
// the maximum number of items ([WithMaxItems]) or bytes ([WithMaxBytes]),
// when the oldest item in it has waited long enough ([WithMaxWait]), or
// when [Batcher.Flush] or [Batcher.Close] asks. Sealed batches are flushed
// on a [crew.Pool] (the Batcher's own, or one given [WithPool]), at most
// [WithMaxConcurrentFlushes] at a time, while the buffer keeps filling.
// Flushed slices are recycled, so a steady stream of items does not
// allocate.
//
// Nothing accepted is lost silently. A flush that fails is retried as
// [WithRetry] says; when the attempts are used up the batch is handed,
// items and error, to the error handler ([WithErrorHandler]). Items dropped
// by the [DropOldest] policy go to the same handler with [ErrDropped].
// [Batcher.Close] stops intake, flushes what is left and waits for it.
//
// The number of items accepted but not yet finished is bounded, by default
// to four full batches per flush slot and for the open batch; at the bound
// Add blocks ([Block], the default), fails with [ErrFull] ([Fail]) or drops
// the oldest item not yet being flushed ([DropOldest]), as [WithMaxPending]
// says.
//
// [Batcher.Stats] reports counters ([Stats]) and the latency of flush
// calls.
package batch
