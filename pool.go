package crew

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
)

// A Pool runs tasks on a bounded set of reusable worker goroutines.
//
// Workers start lazily, up to the limit given to New, and retire after an
// idle timeout. Tasks wait in a queue, unbounded unless WithQueueSize says
// otherwise, and start in about the order they were submitted. All methods are
// safe for concurrent use. A Pool must be created with New; the methods of a
// zero Pool return an error wrapping ErrInvalid.
type Pool struct {
	e           *engine.Engine[job]
	ctx         context.Context
	cancel      context.CancelFunc
	nonBlocking bool
	onPanic     func(*PanicError)
	failed      atomic.Uint64
}

// job is what the queue holds: a fire-and-forget function, or a Task.
// At 16 bytes it is the whole per-task memory cost of a queued Go task.
type job struct {
	fn   func()
	task *Task
}

// New returns a pool that runs at most maxWorkers tasks at a time.
//
// New panics if maxWorkers is less than 1 or an option is invalid (the panic
// value is an error wrapping ErrInvalid). Like make with a negative size,
// these are mistakes in the program rather than conditions to handle at run
// time, and a pool that failed to build has no sensible zero value to return.
func New(maxWorkers int, opts ...Option) *Pool {
	if maxWorkers < 1 {
		panic(fmt.Errorf("%w: crew.New(%d): worker limit must be at least 1", ErrInvalid, maxWorkers))
	}
	c := defaultConfig()
	for _, o := range opts {
		o(&c)
	}
	if c.minWorkers > maxWorkers {
		panic(fmt.Errorf("%w: WithMinWorkers(%d) exceeds the worker limit %d", ErrInvalid, c.minWorkers, maxWorkers))
	}
	if c.nonBlocking && c.queueSize < 0 {
		panic(fmt.Errorf("%w: WithNonBlocking needs WithQueueSize: an unbounded queue is never full", ErrInvalid))
	}
	p := &Pool{nonBlocking: c.nonBlocking, onPanic: c.onPanic}
	p.ctx, p.cancel = context.WithCancel(c.ctx)
	cfg := engine.Config[job]{
		MaxWorkers:  maxWorkers,
		MinWorkers:  c.minWorkers,
		QueueSize:   c.queueSize,
		IdleTimeout: c.idleTimeout,
		Run:         p.run,
		OnGoexit:    p.goexited,
		Drop:        dropped,
	}
	if !c.crash {
		cfg.OnPanic = p.panicked
	}
	p.e = engine.New(cfg)
	return p
}

// Go submits task to run on a worker and returns without waiting for it.
// It allocates nothing (about 30 ns on two cores).
//
// If the pool's queue is bounded and full, Go waits for room, or returns
// ErrQueueFull WithNonBlocking. It returns ErrStopped once Stop or Shutdown
// has begun, and ErrNilTask for a nil task. A panic in task goes to the
// pool's panic handler (see WithPanicHandler).
func (p *Pool) Go(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	return p.push(job{fn: task})
}

// TrySubmit submits task if the pool can queue it without waiting, and
// reports whether it did. It returns false when a bounded queue is full,
// after Stop or Shutdown has begun, and for a nil task.
func (p *Pool) TrySubmit(task func()) bool {
	return task != nil && p.e != nil && p.e.TryPush(job{fn: task}) == nil
}

// SubmitCtx submits task, waiting while a bounded queue is full. It gives up
// with ctx's error when ctx ends first, or is already done; it waits even on
// a pool built WithNonBlocking. It returns ErrStopped once Stop or Shutdown
// has begun and ErrNilTask for a nil task.
func (p *Pool) SubmitCtx(ctx context.Context, task func()) error {
	switch {
	case task == nil:
		return ErrNilTask
	case p.e == nil:
		return errZeroPool
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.e.Push(ctx, job{fn: task})
}

// Submit submits task and returns a Task to wait for its result. task
// receives the pool's context (see Context), which Shutdown cancels when its
// deadline passes.
//
// Submitting never fails silently: when the task cannot be queued (ErrStopped,
// ErrQueueFull WithNonBlocking, ErrNilTask) the returned Task is already done
// with that error. A panic in task completes the Task with a *PanicError. It
// costs three small allocations: the Task, its channel and the error.
func (p *Pool) Submit(task func(ctx context.Context) error) *Task {
	t := &Task{fn: task, done: make(chan struct{})}
	var err error
	if task == nil {
		err = ErrNilTask
	} else {
		err = p.push(job{task: t})
	}
	if err != nil {
		t.finish(err)
	}
	return t
}

func (p *Pool) push(j job) error {
	switch {
	case p.e == nil:
		return errZeroPool
	case p.nonBlocking:
		return p.e.TryPush(j)
	}
	return p.e.Push(nil, j)
}

// Context returns the context that Submit tasks receive. It is cancelled
// when Shutdown's deadline passes, when Stop or Shutdown returns, and when
// the parent given WithContext is cancelled.
func (p *Pool) Context() context.Context {
	if p.e == nil {
		return context.Background()
	}
	return p.ctx
}

// Wait blocks until no task is queued or running, without stopping the pool.
// It returns at once when the pool is idle. Tasks submitted while Wait waits
// also count, so under a steady stream of submissions it returns only at a
// moment when the pool is idle. A task must not call Wait on its own pool:
// it would wait for itself.
func (p *Pool) Wait() {
	if p.e != nil {
		p.e.Wait(nil)
	}
}

// Stop stops the pool: it refuses new work (ErrStopped), runs every task
// already queued, and returns when they have finished and every worker
// goroutine has exited. Stop is idempotent and safe to call from several
// goroutines; each call returns once the pool has stopped. A task must not
// call Stop on its own pool: it would wait for itself.
func (p *Pool) Stop() {
	if p.e == nil {
		return
	}
	p.e.Close()
	p.e.Wait(nil)
	p.e.Exit()
	p.cancel()
}

// Shutdown stops the pool like Stop, but gives up waiting for queued tasks
// when ctx ends. Then it cancels the pool's context (see Context), removes
// every task that has not started, waits for the running ones to return, and
// reports a *ShutdownError with the exact number of tasks it dropped. Dropped
// Submit tasks complete with ErrDropped. Shutdown returns nil when every
// queued task ran. No worker goroutine outlives it, so a running task that
// ignores its context delays it.
func (p *Pool) Shutdown(ctx context.Context) error {
	if p.e == nil {
		return errZeroPool
	}
	p.e.Close()
	err := p.e.Wait(ctx)
	if err != nil {
		p.cancel()
		p.e.Drain()
		p.e.Wait(nil)
	}
	p.e.Exit()
	p.cancel()
	if err != nil {
		return &ShutdownError{Dropped: int(p.e.Stats().Dropped), Err: err}
	}
	return nil
}

// Resize changes the worker limit to n. When n grows, workers start at once
// for queued tasks; when it shrinks, workers beyond n retire as they finish
// their current task. No task is lost or run twice. A bounded queue keeps
// its size. Resize returns an error wrapping ErrInvalid if n < 1.
func (p *Pool) Resize(n int) error {
	switch {
	case p.e == nil:
		return errZeroPool
	case n < 1:
		return fmt.Errorf("%w: Resize(%d): worker limit must be at least 1", ErrInvalid, n)
	}
	p.e.Resize(n)
	return nil
}

func (p *Pool) run(j job) {
	if j.task == nil {
		j.fn()
		return
	}
	err := j.task.fn(p.ctx)
	if err != nil {
		p.failed.Add(1)
	}
	j.task.finish(err)
}

func (p *Pool) panicked(j job, v any, stack []byte) {
	err := &PanicError{Value: v, Stack: stack}
	if j.task == nil {
		p.onPanic(err)
		return
	}
	p.failed.Add(1)
	j.task.finish(err)
}

func (p *Pool) goexited(j job) {
	if j.task != nil {
		p.failed.Add(1)
		j.task.finish(ErrGoexit)
	}
}

func dropped(j job) {
	if j.task != nil {
		j.task.finish(ErrDropped)
	}
}
