package crew

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/engine"
)

// This file holds the pool's observability: hooks, latency histograms,
// logging, profile labels and trace regions. Everything is chosen in New,
// so that a pool that asks for none of it runs the plain code: the Go path
// of such a pool tests one flag (p.slow, which also stands for
// WithNonBlocking) besides the pool's own check, and its workers call tasks
// directly.
//
// Per-task times need the moment a task was submitted. An observed pool
// queues, instead of the task itself, a closure that carries the task and
// that moment (one 48-byte allocation), so the queue still holds plain
// funcs and every other part of the package (groups, Shutdown's
// accounting) is unchanged. Recycling these closures' state through a
// sync.Pool measured slower: the producer takes from the pool on one
// processor and the worker gives back on another, and the pool's shared
// words bounce between their caches.

// observer is the state of a pool built WithHooks, WithLatency or
// WithLogger.
type observer struct {
	p     *Pool
	name  string
	hooks Hooks
	lat   *Latency     // nil without WithLatency
	log   *slog.Logger // nil without WithLogger
	timed bool         // wrap tasks: lat or a task hook is set
	done  atomic.Bool  // the stop summary has been logged
}

// pushMode tells observer.push which Pool method it serves.
type pushMode uint8

const (
	pushGo  pushMode = iota // Go and Submit: wait for room unless nonBlocking
	pushTry                 // TrySubmit: never wait
	pushCtx                 // SubmitCtx: wait until ctx ends
)

// setupObservability applies the observability options to p and cfg; New
// calls it after building the plain configuration.
func (p *Pool) setupObservability(c *config, cfg *engine.Config[func()]) {
	p.name = c.name
	if c.name != "" || c.hooks.WorkerStart != nil || c.hooks.WorkerRetire != nil {
		w := &workerObs{pool: c.name, start: c.hooks.WorkerStart, retire: c.hooks.WorkerRetire, run: run}
		if c.name != "" {
			labels := pprof.Labels(ProfileLabel, c.name)
			w.labels = pprof.WithLabels(context.Background(), labels)
			// The pool's context carries the label too, so that a task
			// that calls pprof.Do with the context it received (or
			// Context's) gets the label back when pprof.Do returns.
			p.ctx = pprof.WithLabels(p.ctx, labels)
			w.run = w.runTraced
		}
		cfg.NewRunner = w.newRunner
	}
	if !c.hooks.timed() && !c.latency && c.logger == nil && c.hooks.Drop == nil {
		return
	}
	o := &observer{p: p, name: c.name, hooks: c.hooks, timed: c.hooks.timed() || c.latency}
	if c.latency {
		o.lat = new(Latency)
	}
	if c.logger != nil {
		o.log = c.logger
		if c.name != "" {
			o.log = o.log.With(slog.String("pool", c.name))
		}
		if handler := p.onPanic; c.handlerSet {
			p.onPanic = func(pe *PanicError) {
				o.logPanic(pe)
				handler(pe)
			}
		} else {
			p.onPanic = o.logPanic
		}
	}
	if drop := c.hooks.Drop; drop != nil {
		name := c.name
		cfg.Drop = func(func()) { drop(TaskEvent{Pool: name, Err: ErrDropped}) }
	}
	p.obs = o
}

// ProfileLabel is the pprof label that carries a named pool's name on its
// workers' goroutines, in CPU and goroutine profiles (see WithName).
const ProfileLabel = "crew.pool"

// Name returns the name given WithName, or "".
func (p *Pool) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Latency returns the queue-wait and run-time histograms of a pool built
// WithLatency, and false for any other pool. Each call takes a fresh
// snapshot (two Histogram.Snapshot calls, a few microseconds).
func (p *Pool) Latency() (LatencySnapshot, bool) {
	if p == nil || p.obs == nil || p.obs.lat == nil {
		return LatencySnapshot{}, false
	}
	return p.obs.lat.Snapshot(), true
}

// push queues fn (a Submit task's run method when t is not nil) as mode
// says, wrapped with its submission time when tasks are timed, and
// reports refusals.
func (o *observer) push(ctx context.Context, fn func(), t *Task, mode pushMode) error {
	p := o.p
	f := fn
	if o.timed {
		enq := monotime()
		f = func() { o.run(fn, t, enq) }
	}
	var err error
	switch mode {
	case pushTry:
		err = p.e.TryPush(f)
	case pushCtx:
		err = p.e.Push(ctx, f)
	default:
		err = p.pushPlain(f)
	}
	if errors.Is(err, ErrQueueFull) || err == ErrStopped {
		o.refused(err)
	}
	return err
}

// refused reports a task refused on submission.
func (o *observer) refused(err error) {
	if o.hooks.Drop != nil {
		o.hooks.Drop(TaskEvent{Pool: o.name, Err: err})
	}
	if o.log != nil {
		o.log.LogAttrs(context.Background(), slog.LevelDebug, "crew: task refused", slog.Any("err", err))
	}
}

// run runs a timed task fn, submitted at enq (monotime), with its hooks;
// t is the Submit task whose run method fn is, whose error fn leaves in
// t.err, or nil. A Submit task that Shutdown dropped as the worker took
// it is a drop, not a run: it reaches the Drop hook, and no other.
func (o *observer) run(fn func(), t *Task, enq int64) {
	if t != nil && !t.start() {
		o.p.droppedLate()
		return
	}
	start := monotime()
	wait := time.Duration(start - enq)
	if o.lat != nil {
		o.lat.Wait.Record(wait)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// A panic in a Go task (a Submit task recovers its own) or in
		// TaskStart, or runtime.Goexit. The pool recovers the panic here
		// rather than in the worker loop, so that it is timed and reported
		// with the task.
		var v any
		if !o.p.crash {
			v = recover()
		}
		runTime := time.Duration(monotime() - start)
		var err error
		// Deferred, as the panic handler may call runtime.Goexit (bug 51).
		defer func() { o.finished(wait, runTime, err) }()
		switch {
		case v != nil:
			o.p.panicked.Add(1)
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			err = pe
			if t != nil {
				// TaskStart panicked: t.run never began. Complete t
				// before the Panic hook runs, which may panic too.
				t.abort(pe)
			}
			if t == nil {
				// Deferred, so that a Panic hook that panics (which Hooks
				// forbids) does not swallow the task's panic; wrapped, so
				// that a recover in the handler cannot stop that panic.
				defer func() { o.p.onPanic(pe) }()
			}
			o.panicked(pe, wait, runTime)
		case t != nil:
			if !t.finished.Load() {
				t.abort(ErrGoexit) // TaskStart called runtime.Goexit: t.run never began (bug 50)
			}
			<-t.done
			err = t.err // ErrGoexit, set by Task.run or abort
		default:
			err = ErrGoexit // or a panic about to crash the program
		}
	}()
	if o.hooks.TaskStart != nil {
		o.hooks.TaskStart(TaskEvent{Pool: o.name, Wait: wait})
	}
	fn()
	returned = true
	runTime := time.Duration(monotime() - start)
	var err error
	if t != nil {
		err = t.err
		if t.panicked { // not a *PanicError that the task returned
			o.panicked(err.(*PanicError), wait, runTime)
		}
	}
	o.finished(wait, runTime, err)
}

func (o *observer) panicked(pe *PanicError, wait, run time.Duration) {
	if o.hooks.Panic != nil {
		o.hooks.Panic(TaskEvent{Pool: o.name, Wait: wait, Run: run, Err: pe})
	}
}

func (o *observer) finished(wait, run time.Duration, err error) {
	if o.lat != nil {
		o.lat.Run.Record(run)
	}
	if o.hooks.TaskFinish != nil {
		o.hooks.TaskFinish(TaskEvent{Pool: o.name, Wait: wait, Run: run, Err: err})
	}
}

// logPanic is the panic handler of a pool built WithLogger.
func (o *observer) logPanic(pe *PanicError) {
	o.log.LogAttrs(context.Background(), slog.LevelError, "crew: task panicked",
		slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
}

// stopped logs the summary of a Stop or Shutdown that began at began
// (monotime) and dropped dropped tasks, once per pool.
func (o *observer) stopped(began int64, dropped int) {
	if o.log == nil || !o.done.CompareAndSwap(false, true) {
		return
	}
	s := o.p.Stats()
	level, msg := slog.LevelInfo, "crew: pool stopped"
	if dropped > 0 {
		level, msg = slog.LevelWarn, "crew: pool shut down before its queue drained"
	}
	attrs := []slog.Attr{
		slog.Duration("took", time.Duration(monotime()-began)),
		slog.Uint64("submitted", s.Submitted),
		slog.Uint64("completed", s.Completed),
		slog.Uint64("failed", s.Failed),
		slog.Uint64("panicked", s.Panicked),
		slog.Uint64("dropped", s.Dropped),
	}
	if o.lat != nil {
		attrs = append(attrs, slog.Any("latency", o.lat.Snapshot()))
	}
	o.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// workerObs starts and retires the workers of a named pool or one with
// worker hooks (engine.Config.NewRunner): the per-worker work happens once
// per worker, not once per task.
type workerObs struct {
	pool   string
	labels context.Context // pprof labels for the worker goroutine; nil: none
	start  func(WorkerEvent)
	retire func(WorkerEvent)
	run    func(func())
}

func (w *workerObs) newRunner() (func(func()), func()) {
	if w.labels != nil {
		// A worker is started by whichever goroutine pushed when no worker
		// was looking, and would inherit that goroutine's labels.
		pprof.SetGoroutineLabels(w.labels)
	}
	if w.start != nil {
		w.start(WorkerEvent{Pool: w.pool})
	}
	if w.retire == nil {
		return w.run, nil
	}
	born := monotime()
	return w.run, func() {
		w.retire(WorkerEvent{Pool: w.pool, Lifetime: time.Duration(monotime() - born)})
	}
}

// runTraced runs a named pool's task inside a runtime/trace region named
// after the pool while an execution trace is being recorded.
func (w *workerObs) runTraced(task func()) {
	if trace.IsEnabled() {
		trace.WithRegion(context.Background(), w.pool, task)
		return
	}
	task()
}
