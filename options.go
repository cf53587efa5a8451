package crew

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"
)

// An Option configures a Pool in New.
type Option func(*config)

type config struct {
	queueSize   int // < 0: unbounded
	nonBlocking bool
	idleTimeout time.Duration
	minWorkers  int
	onPanic     func(*PanicError)
	crash       bool
	ctx         context.Context

	// Observability (see observe.go); all off by default.
	name       string
	hooks      Hooks
	latency    bool
	logger     *slog.Logger
	handlerSet bool // WithPanicHandler was given
}

// DefaultIdleTimeout is how long an idle worker waits for a task before it
// retires, unless WithIdleTimeout says otherwise.
const DefaultIdleTimeout = time.Second

func defaultConfig() config {
	return config{queueSize: -1, idleTimeout: DefaultIdleTimeout, onPanic: logPanic, ctx: context.Background()}
}

// check panics with an error wrapping ErrInvalid if the options contradict
// each other or the worker limit.
func (c *config) check(maxWorkers int) {
	if c.crash && c.handlerSet {
		panic(fmt.Errorf("%w: WithCrashOnPanic and WithPanicHandler contradict each other", ErrInvalid))
	}
	if c.minWorkers > maxWorkers {
		panic(fmt.Errorf("%w: WithMinWorkers(%d) exceeds the worker limit %d", ErrInvalid, c.minWorkers, maxWorkers))
	}
	if c.nonBlocking && c.queueSize < 0 {
		panic(fmt.Errorf("%w: WithNonBlocking needs WithQueueSize: an unbounded queue is never full", ErrInvalid))
	}
}

func logPanic(p *PanicError) { log.Print(p.Error()) }

// WithQueueSize bounds the number of tasks waiting for a worker to n. With
// n == 0 a task is accepted only when a worker can take it: a direct
// hand-off. Submissions that find the queue full wait for room (Go, Submit,
// SubmitCtx), fail with ErrQueueFull (Go and Submit WithNonBlocking), or
// report false (TrySubmit). By default the queue is unbounded. New panics
// with an error wrapping ErrInvalid if n < 0.
func WithQueueSize(n int) Option {
	return func(c *config) {
		if n < 0 {
			panic(fmt.Errorf("%w: WithQueueSize(%d): size must be at least 0", ErrInvalid, n))
		}
		c.queueSize = n
	}
}

// WithNonBlocking makes Go and Submit return ErrQueueFull instead of waiting
// when a bounded queue is full. It needs WithQueueSize: without it New
// panics with an error wrapping ErrInvalid.
func WithNonBlocking() Option {
	return func(c *config) { c.nonBlocking = true }
}

// WithIdleTimeout sets how long an idle worker waits for a task before it
// retires (DefaultIdleTimeout if not set). New panics with an error wrapping
// ErrInvalid if d is not positive.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			panic(fmt.Errorf("%w: WithIdleTimeout(%v): timeout must be positive", ErrInvalid, d))
		}
		c.idleTimeout = d
	}
}

// WithMinWorkers starts n workers in New and keeps them when idle, so that a
// burst after a quiet spell finds warm workers. n must be at most the
// worker limit. While Resize holds the limit below n, the limit is the
// minimum; once it grows again, workers start up to n and idle ones
// retire down to it. New panics with an error wrapping ErrInvalid if n < 0
// or n is above the limit.
func WithMinWorkers(n int) Option {
	return func(c *config) {
		if n < 0 {
			panic(fmt.Errorf("%w: WithMinWorkers(%d): count must be at least 0", ErrInvalid, n))
		}
		c.minWorkers = n
	}
}

// WithPanicHandler sets the function that receives panics recovered from
// tasks started with Go, TrySubmit and SubmitCtx, and those of group tasks
// that their group's Wait does not report (see Group.Wait). (A panic in a
// Submit task completes its Task instead.) The handler runs on the worker
// that recovered the panic, before that worker takes another task; a
// group's, on the goroutine of the Wait that ends the group (or of a
// ForEachSeq or MapErrSeq whose iterator panics). It must return normally:
// a panic or runtime.Goexit in it may take the place of the panic being
// reported. The default handler logs the panic and its stack with package
// log. New panics with an error wrapping ErrInvalid if h is nil.
func WithPanicHandler(h func(*PanicError)) Option {
	return func(c *config) {
		if h == nil {
			panic(fmt.Errorf("%w: WithPanicHandler(nil)", ErrInvalid))
		}
		c.onPanic = h
		c.handlerSet = true
	}
}

// WithCrashOnPanic lets panics in tasks crash the program, as they would in
// a plain goroutine, instead of recovering them. Use it when a panic means
// the process state can no longer be trusted.
func WithCrashOnPanic() Option {
	return func(c *config) { c.crash = true }
}

// WithContext sets the parent of the pool's context, which tasks submitted
// with Submit receive. Cancelling parent cancels that context; it does not
// stop the pool. New panics with an error wrapping ErrInvalid if parent is
// nil.
func WithContext(parent context.Context) Option {
	return func(c *config) {
		if parent == nil {
			panic(fmt.Errorf("%w: WithContext(nil)", ErrInvalid))
		}
		c.ctx = parent
	}
}

// WithName names the pool. The name labels its workers in CPU and
// goroutine profiles (the pprof label "crew.pool"), names the runtime/trace
// region each task runs in while an execution trace is being recorded, and
// labels its log records and exported metrics. The pool's context (see
// Pool.Context) carries the label too: a task that calls pprof.Do should
// derive its context from that one, as pprof.Do restores the labels of the
// context it is given. The labels cost nothing per task (each worker sets
// them once, when it starts); the trace region costs one check per task
// while no trace is recorded (under a nanosecond). An empty name is the
// same as none.
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithHooks sets functions that the pool calls on task and worker events;
// see Hooks. A later WithHooks replaces an earlier one. A pool without
// hooks, WithLatency and WithLogger pays nothing for them on its Go path.
// With TaskStart, TaskFinish or Panic set, each task costs three clock
// reads and one 48-byte allocation that carries its submission time, plus
// the hooks themselves: about 100-150 ns more per task than a plain pool
// on two cores (BENCHMARKS.md). Drop, WorkerStart and WorkerRetire cost
// nothing per task that runs.
func WithHooks(h Hooks) Option {
	return func(c *config) { c.hooks = h }
}

// WithLatency makes the pool record, for every task, how long it waited in
// the queue and how long it ran, in two histograms that Pool.Latency
// reports with their quantiles (within HistogramRelativeError, 3.125%).
// Each task costs three clock reads, two Histogram records and one 48-byte
// allocation: about 100-150 ns more than on a plain pool on two cores
// (BENCHMARKS.md), 10% of a 1 µs task and 1% of a 10 µs one. The
// histograms take about 11 KiB per processor (2 to 8 processors counted).
// A pool without WithLatency pays nothing.
func WithLatency() Option {
	return func(c *config) { c.latency = true }
}

// WithLogger makes the pool log through l: every panic that reaches the
// panic handler (at level Error, with its stack; it replaces the default
// handler's log.Print and comes before a handler set WithPanicHandler),
// each task refused because the queue was full or the pool stopped (at
// level Debug), and a summary when Stop or Shutdown finishes (at level
// Info, or Warn when Shutdown dropped tasks). The pool logs nothing by
// default. WithLogger panics with an error wrapping ErrInvalid if l is nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			panic(fmt.Errorf("%w: WithLogger(nil)", ErrInvalid))
		}
		c.logger = l
	}
}
