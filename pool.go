package crew

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/notify"
)

// A Pool runs tasks on a bounded set of reusable worker goroutines.
//
// Workers start lazily, up to the limit given to New, and retire after an
// idle timeout. Tasks wait in a queue, unbounded unless WithQueueSize says
// otherwise, and start in about the order they were submitted. All methods are
// safe for concurrent use. A Pool must be created with New. The methods of
// a zero Pool report an error wrapping ErrInvalid where they return one
// (Submit through its Task), and otherwise do nothing: TrySubmit reports
// false, Stats zeros and Context context.Background.
type Pool struct {
	// The queue holds plain funcs: 8 bytes per queued Go task. A Submit
	// task is queued as its run method and also listed in queued, so that
	// Shutdown can complete the ones it drops.
	e           *engine.Engine[func()]
	ctx         context.Context
	cancel      context.CancelFunc
	nonBlocking bool
	crash       bool
	onPanic     func(*PanicError)
	failed      atomic.Uint64
	panicked    atomic.Uint64 // Submit tasks that panicked; the engine counts the rest
	// Submit tasks that a worker found dropped as it began them (see
	// dropListed): in all for Stats, and not yet in a ShutdownError.
	lateDrops, lateUnreported atomic.Uint64
	completedHigh             atomic.Uint64 // the highest Completed Stats has reported

	mu     sync.Mutex
	queued taskList // Submit tasks accepted and not started

	name string    // WithName
	obs  *observer // nil unless WithHooks, WithLatency or WithLogger (observe.go)
	slow bool      // nonBlocking || obs != nil: push goes through pushSlow

	// gaveUp is set once the pool will run nothing more: Shutdown's
	// deadline has passed, or Stop or Shutdown is returning. The layers
	// (layer.go) then drop what they hold. The pool's context cannot tell
	// them, as WithContext's parent may cancel it while the pool runs on;
	// ended (made by the first layer, guarded by mu) is cancelled with it.
	// (Kept after the fields Go reads.)
	gaveUp    atomic.Bool
	ended     context.Context
	endedStop context.CancelFunc
	// holds counts what giveUp waits for, so that the layers have dropped
	// what they hold when Stop returns: their calls registered on ended
	// that have neither run to the end nor been undone, and their drops
	// under way (see layer.holdDrop).
	holds    atomic.Int64
	released notify.Cond
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
	for i, o := range opts {
		if o == nil {
			panic(fmt.Errorf("%w: crew.New: option %d is nil", ErrInvalid, i))
		}
		o(&c)
	}
	c.check(maxWorkers)
	p := &Pool{nonBlocking: c.nonBlocking, crash: c.crash, onPanic: c.onPanic}
	p.ctx, p.cancel = context.WithCancel(c.ctx)
	cfg := engine.Config[func()]{
		MaxWorkers:  maxWorkers,
		MinWorkers:  c.minWorkers,
		QueueSize:   c.queueSize,
		IdleTimeout: c.idleTimeout,
		Run:         run,
	}
	if !c.crash {
		cfg.OnPanic = p.recovered
	}
	p.setupObservability(&c, &cfg)
	p.slow = p.nonBlocking || p.obs != nil
	p.e = engine.New(cfg)
	return p
}

// Go submits task to run on a worker and returns without waiting for it.
// It makes no allocation per task; a backlog that outgrows the queue's
// rings goes into chunks, which double in size and are reused, so a
// backlog of n tasks costs about log2(n) allocations in each part of the
// queue it fills. BENCHMARKS.md has its cost per task (tens of
// nanoseconds on two cores). When tasks pile up (the part of the queue it
// picks holds 64) while tasks are short (the last one timed took under
// 2 µs), on at most two processors (GOMAXPROCS when the pool was made),
// and either every worker the limit allows is live or the program has few
// goroutines, Go yields its processor once (runtime.Gosched) before
// queueing, so that a producer outpacing the pool lets the workers catch
// up. Go queues at once when tasks are longer, since the yield would wait
// for them, and on more than two processors, where the workers are more
// often running already and the yield costs more than it saves.
//
// If the pool's queue is bounded and full, Go waits for room, or returns
// ErrQueueFull WithNonBlocking. Called from inside one of the pool's own
// tasks it waits too, since another worker may free room, unless every
// worker is a task waiting like it: then no room can ever come, and Go
// returns an error wrapping ErrQueueFull. It returns ErrStopped once Stop or Shutdown
// has begun, and ErrNilTask for a nil task. A panic in task goes to the
// pool's panic handler (see WithPanicHandler).
func (p *Pool) Go(task func()) error {
	if task == nil {
		return ErrNilTask
	}
	return p.push(task)
}

// TrySubmit submits task if the pool can queue it without waiting, and
// reports whether it did. It returns false when a bounded queue is full,
// after Stop or Shutdown has begun, and for a nil task.
func (p *Pool) TrySubmit(task func()) bool {
	if task == nil || p.unusable() {
		return false
	}
	if p.obs != nil {
		return p.obs.push(nil, task, nil, pushTry) == nil
	}
	return p.e.TryPush(task) == nil
}

// SubmitCtx submits task, waiting while a bounded queue is full. It gives up
// with ctx's error when ctx ends first, or is already done; it waits even on
// a pool built WithNonBlocking. It returns ErrStopped once Stop or Shutdown
// has begun, ErrNilTask for a nil task, and an error wrapping ErrInvalid
// for a nil ctx.
func (p *Pool) SubmitCtx(ctx context.Context, task func()) error {
	switch {
	case task == nil:
		return ErrNilTask
	case p.unusable():
		return errZeroPool
	}
	if ctx == nil {
		return fmt.Errorf("%w: SubmitCtx with a nil context", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.obs != nil {
		return p.obs.push(ctx, task, nil, pushCtx)
	}
	return p.e.Push(ctx, task)
}

// Submit submits task and returns a Task to wait for its result. task
// receives the pool's context (see Context), which Shutdown cancels when its
// deadline passes.
//
// Submitting never fails silently: when the task cannot be queued (ErrStopped,
// ErrQueueFull WithNonBlocking, ErrNilTask, or an error wrapping ErrInvalid
// for a nil or zero Pool) the returned Task is already done with that error. A panic in task completes the Task with a *PanicError
// (unless the pool was built WithCrashOnPanic). It costs three small
// allocations (the Task, its channel and its run method) and a short
// critical section that lets Shutdown find it if it is dropped.
func (p *Pool) Submit(task func(ctx context.Context) error) *Task {
	t := &Task{p: p, fn: task, done: make(chan struct{})}
	switch {
	case task == nil:
		t.finish(ErrNilTask)
	case p.unusable():
		t.finish(errZeroPool)
	default:
		p.list(t)
		if err := p.pushTask(t); err != nil {
			p.unlist(t)
			t.finish(err)
		} else if !t.state.CompareAndSwap(pushing, accepted) && t.state.Load() == passed {
			// Shutdown's dropListed passed this task over while we were
			// pushing it: it was accepted, then dropped unstarted. (Or a
			// worker has begun it already: started.)
			t.finish(ErrDropped)
		}
	}
	return t
}

// pushTask queues a Submit task's run method.
func (p *Pool) pushTask(t *Task) error {
	if p.obs != nil {
		return p.obs.push(nil, t.run, t, pushGo)
	}
	return p.push(t.run)
}

// push queues task for Go (and Submit). A plain pool tests the same two
// fields as before observability existed: the engine, and slow, which
// folds WithNonBlocking and observability into one flag.
func (p *Pool) push(task func()) error {
	switch {
	case p.unusable():
		return errZeroPool
	case p.slow:
		return p.pushSlow(task)
	}
	return p.e.Push(nil, task)
}

// pushSlow is push for a pool built WithNonBlocking or observed.
func (p *Pool) pushSlow(task func()) error {
	if p.obs != nil {
		return p.obs.push(nil, task, nil, pushGo)
	}
	return p.pushPlain(task)
}

// pushPlain is push without observation.
func (p *Pool) pushPlain(task func()) error {
	if p.nonBlocking {
		return p.e.TryPush(task)
	}
	return p.e.Push(nil, task)
}

// Context returns the context that Submit tasks receive. It is cancelled
// when Shutdown's deadline passes, when Stop or Shutdown returns (a call
// from inside one of the pool's own tasks, which returns at once, leaves it
// to a later call from outside), and when the parent given WithContext is
// cancelled.
func (p *Pool) Context() context.Context {
	if p.unusable() {
		return context.Background()
	}
	return p.ctx
}

// Wait blocks until no task is queued or running, without stopping the pool.
// It returns at once when the pool is idle. Tasks submitted while Wait waits
// also count, so under a steady stream of submissions it returns only at a
// moment when the pool is idle. Wait panics with an error wrapping
// ErrInsideTask when called from inside one of the pool's own tasks: it
// would wait for itself forever.
func (p *Pool) Wait() {
	if !p.unusable() {
		waitEngine(p.e)
	}
}

// Stop stops the pool: it refuses new work (ErrStopped), runs every task
// already queued, and returns when they have finished and every worker
// goroutine has exited. Stop is idempotent and safe to call from several
// goroutines; each call returns once the pool has stopped.
//
// Called from inside one of the pool's own tasks, which could not finish
// while Stop waited, Stop closes the pool and returns at once; the queued
// tasks still run, the workers exit as they find the queue empty, and a
// Stop from outside the pool waits for them.
func (p *Pool) Stop() {
	if p.unusable() {
		return
	}
	var began int64
	if p.obs != nil {
		began = monotime()
	}
	if stopEngine(p.e, p.giveUp, nil) && p.obs != nil {
		// Once the pool has stopped, not from inside a task; a Shutdown
		// racing this Stop may have dropped tasks, and its summary would
		// come second.
		p.obs.stopped(began, int(p.Stats().Dropped))
	}
}

// Shutdown stops the pool like Stop, but gives up waiting for queued tasks
// when ctx ends. Then it cancels the pool's context (see Context), removes
// every task that has not started, waits for the running ones to return, and
// reports a *ShutdownError with the exact number of tasks it dropped. Dropped
// Submit tasks complete with ErrDropped. Shutdown returns nil when every
// task had returned before ctx ended; when ctx ends while tasks still run
// (and see their context cancelled), Dropped may be 0. No worker goroutine
// outlives it, so a running task that ignores its context delays it. A nil
// ctx never ends: Shutdown(nil) waits like Stop.
//
// Called from inside one of the pool's own tasks, Shutdown closes the pool
// and returns an error wrapping ErrInsideTask at once, as Stop does.
func (p *Pool) Shutdown(ctx context.Context) error {
	if p.unusable() {
		return errZeroPool
	}
	var began int64
	if p.obs != nil {
		began = monotime()
	}
	err := shutdownEngine(ctx, p.e, p.giveUp, p.givingUp, p.dropListed, nil)
	if p.obs != nil && !errors.Is(err, ErrInsideTask) {
		p.obs.stopped(began, int(p.Stats().Dropped)) // late drops included
	}
	return err
}

// Resize changes the worker limit to n. When n grows, workers start at once
// for queued tasks; when it shrinks, workers beyond n retire as they finish
// their current task, and idle ones (Stats.Idle) as they are woken. A worker
// that was looking for a task as Resize returned may still start one. No
// task is lost or run twice. A bounded queue keeps
// its size. Resize returns an error wrapping ErrInvalid if n < 1.
func (p *Pool) Resize(n int) error {
	switch {
	case p.unusable():
		return errZeroPool
	case n < 1:
		return fmt.Errorf("%w: Resize(%d): worker limit must be at least 1", ErrInvalid, n)
	}
	p.e.Resize(n)
	return nil
}

func run(task func()) { task() }

// unusable reports a nil Pool or one not made by New.
func (p *Pool) unusable() bool { return p == nil || p.e == nil }

// recovered receives panics from Go, TrySubmit and SubmitCtx tasks; Submit
// tasks recover their own.
func (p *Pool) recovered(_ func(), v any, stack []byte) {
	p.onPanic(&PanicError{Value: v, Stack: stack})
}
