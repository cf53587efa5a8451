package crew

import (
	"context"
	"fmt"
	"log"
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
}

// DefaultIdleTimeout is how long an idle worker waits for a task before it
// retires, unless WithIdleTimeout says otherwise.
const DefaultIdleTimeout = time.Second

func defaultConfig() config {
	return config{queueSize: -1, idleTimeout: DefaultIdleTimeout, onPanic: logPanic, ctx: context.Background()}
}

func logPanic(p *PanicError) { log.Print(p.Error()) }

// WithQueueSize bounds the number of tasks waiting for a worker to n. With
// n == 0 a task is accepted only when a worker can take it: a direct
// hand-off. Submissions that find the queue full wait for room (Go, Submit,
// SubmitCtx) or fail with ErrQueueFull (TrySubmit, and all of them
// WithNonBlocking). By default the queue is unbounded.
func WithQueueSize(n int) Option {
	return func(c *config) {
		if n < 0 {
			panic(fmt.Errorf("%w: WithQueueSize(%d): size must be at least 0", ErrInvalid, n))
		}
		c.queueSize = n
	}
}

// WithNonBlocking makes Go and Submit return ErrQueueFull instead of waiting
// when a bounded queue is full. It needs WithQueueSize.
func WithNonBlocking() Option {
	return func(c *config) { c.nonBlocking = true }
}

// WithIdleTimeout sets how long an idle worker waits for a task before it
// retires (DefaultIdleTimeout if not set). d must be positive.
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
// worker limit.
func WithMinWorkers(n int) Option {
	return func(c *config) {
		if n < 0 {
			panic(fmt.Errorf("%w: WithMinWorkers(%d): count must be at least 0", ErrInvalid, n))
		}
		c.minWorkers = n
	}
}

// WithPanicHandler sets the function that receives panics recovered from
// tasks started with Go, TrySubmit and SubmitCtx. (A panic in a Submit task
// completes its Task instead.) The handler runs on the worker that recovered
// the panic, before that worker takes another task. The default handler logs
// the panic and its stack with package log.
func WithPanicHandler(h func(*PanicError)) Option {
	return func(c *config) {
		if h == nil {
			panic(fmt.Errorf("%w: WithPanicHandler(nil)", ErrInvalid))
		}
		c.onPanic = h
		c.crash = false
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
// stop the pool.
func WithContext(parent context.Context) Option {
	return func(c *config) {
		if parent == nil {
			panic(fmt.Errorf("%w: WithContext(nil)", ErrInvalid))
		}
		c.ctx = parent
	}
}
