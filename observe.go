package crew

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/engine"
)

// This file holds a pool's observability: hooks, latency histograms,
// logging, profile labels and trace regions. Everything is chosen when the
// pool is made, so that a pool that asks for none of it runs the plain
// code: its submissions test one flag (poolCore.slow, which also stands for
// WithNonBlocking) and its workers call tasks directly.
//
// Per-task times need the moment a task was submitted, which the queue's
// element carries when tasks are timed: a Pool queues, instead of the task
// itself, a closure that carries the task and that moment; a function
// pool's elements have a field for it. The per-worker work (profile
// labels, worker hooks) happens once per worker, as it starts.

// WithName names the pool. The name labels its workers in CPU and
// goroutine profiles (the pprof label [ProfileLabel]), names the
// [runtime/trace] region each task runs in while an execution trace is
// being recorded, and labels its log records and exported metrics. The
// pool's context (see [Pool.Context]) carries the label too: a task that
// calls [pprof.Do] should derive its context from that one, as pprof.Do
// restores the labels of the context it is given. Each worker sets the
// labels once, when it starts; the trace region costs one check per task
// while no trace is recorded. An empty name is the same as none.
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithHooks sets functions that the pool calls on task and worker events;
// see [Hooks]. A later WithHooks replaces an earlier one. With TaskStart,
// TaskFinish or Panic set, each task costs three clock reads and, on a
// Pool, one small allocation that carries its submission time; the other
// hooks cost nothing per task that runs.
func WithHooks(h Hooks) Option {
	return func(c *config) { c.hooks = h }
}

// WithLatency makes the pool record, for every task, how long it waited in
// the queue and how long it ran, in two histograms that [Pool.Latency]
// reports with their quantiles (within [HistogramRelativeError]). It costs
// what a task hook costs (see [WithHooks]) plus two [Histogram] records per
// task.
func WithLatency() Option {
	return func(c *config) { c.latency = true }
}

// WithLogger makes the pool log through l, a [log/slog] logger: every
// panic that reaches the panic handler (at level Error, with its stack; it
// replaces the default handler's [log.Print] and comes before a handler
// set [WithPanicHandler]), each task refused because the queue was full or
// the pool stopped (at level Debug), and a summary when [Pool.Stop] or
// [Pool.Shutdown] finishes (at level Info, or Warn when Shutdown dropped
// tasks). The pool logs nothing by default. l must not be nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger, c.loggerSet = l, true }
}

// observer is the state of a pool built WithHooks, WithLatency or
// WithLogger.
type observer struct {
	name  string
	hooks Hooks
	lat   *Latency     // nil without WithLatency
	log   *slog.Logger // nil without WithLogger
	timed bool         // the elements carry their submission time
	done  atomic.Bool  // the stop summary has been logged

	// The pool's, for the tasks the observer runs.
	crash     bool
	panicked  *atomic.Uint64
	recovered func(*PanicError) // a panic no Task receives
	stats     func() Stats
}

// A stamp returns the element to queue in el's place when a pool times its
// tasks, carrying the submission time; t is el's Submit task, or nil. The
// element then observes itself as it runs (a Pool's) or the pool's runner
// does (a function pool's).
type stamp[E any] func(o *observer, el E, t *Task) E

// ProfileLabel is the pprof label that carries a named pool's name on its
// workers' goroutines, in CPU and goroutine profiles (see [WithName]).
const ProfileLabel = "crew.pool"

// observe applies the observability options in cfg to c and to ec, the
// engine's configuration, whose Run or NewRunner it may wrap.
func (c *poolCore[E]) observe(cfg *config, ec *engine.Config[E], st stamp[E]) {
	c.name = cfg.name
	h := &cfg.hooks
	timed := h.timed() || cfg.latency
	var o *observer
	if timed || cfg.logger != nil || h.Drop != nil {
		o = &observer{name: cfg.name, hooks: *h, timed: timed, crash: c.crash,
			panicked: &c.panicked, recovered: c.recovered, stats: c.stats}
		if cfg.latency {
			o.lat = new(Latency)
		}
		if cfg.logger != nil {
			o.log = cfg.logger
			if cfg.name != "" {
				o.log = o.log.With(slog.String("pool", cfg.name))
			}
			if handler := c.onPanic; cfg.handlerSet {
				c.onPanic = func(pe *PanicError) {
					o.logPanic(pe)
					handler(pe)
				}
			} else {
				c.onPanic = o.logPanic
			}
		}
		if drop := h.Drop; drop != nil {
			name := cfg.name
			ec.Drop = func(E) { drop(TaskEvent{Pool: name, Err: ErrDropped}) }
		}
		if timed {
			c.stamp = func(el E, t *Task) E { return st(o, el, t) }
		}
		c.obs = o
	}
	if cfg.name == "" && h.WorkerStart == nil && h.WorkerRetire == nil {
		return
	}
	w := &workerObs[E]{pool: cfg.name, onStart: h.WorkerStart, onRetire: h.WorkerRetire, newRunner: ec.NewRunner}
	if w.newRunner == nil {
		run := ec.Run
		w.newRunner = func() (func(E), func()) { return run, nil }
	}
	if cfg.name != "" {
		labels := pprof.Labels(ProfileLabel, cfg.name)
		w.labels = pprof.WithLabels(context.Background(), labels)
		// The pool's context carries the label too, so that a task that
		// calls pprof.Do with the context it received gets the label back
		// when pprof.Do returns.
		c.ctx = pprof.WithLabels(c.ctx, labels)
	}
	ec.NewRunner = w.start
}

// droppedLate counts a Submit task that a worker found dropped as it began
// it, and reports it to the Drop hook as the drain reports the others. The
// engine counts it among the completed; Stats moves it to Dropped.
func (c *poolCore[E]) droppedLate() {
	c.lateDrops.Add(1)
	c.lateUnreported.Add(1)
	if c.obs != nil && c.obs.hooks.Drop != nil {
		c.obs.hooks.Drop(TaskEvent{Pool: c.name, Err: ErrDropped})
	}
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

// runObserved runs call(v), submitted at enq (clock.Now), with the
// observer's hooks and histograms; call returns the task's error (a
// function pool's), or t is the Submit task whose run method call(v) is,
// whose error it leaves in t.err. A Submit task that Shutdown dropped as
// the worker took it is a drop, not a run: it reaches the Drop hook, and
// no other; one cancelled before it started reaches none.
func runObserved[V any](o *observer, call func(V) error, v V, t *Task, enq int64) {
	if t != nil && !t.start() {
		t.passedOver()
		return
	}
	start := clock.Now()
	wait := time.Duration(start - enq)
	if o.lat != nil {
		o.lat.Wait.Record(wait)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// A panic in a task that no Task receives, or in TaskStart, or
		// runtime.Goexit. The panic is recovered here rather than in the
		// worker loop, so that it is timed and reported with the task.
		var r any
		if !o.crash {
			r = recover()
		}
		runTime := time.Duration(clock.Now() - start)
		var err error
		// Deferred, as the panic handler may call runtime.Goexit.
		defer func() { o.finished(wait, runTime, err) }()
		switch {
		case r != nil:
			o.panicked.Add(1)
			pe := &PanicError{Value: r, Stack: debug.Stack()}
			err = pe
			if t != nil {
				// TaskStart panicked: t.run never began. Complete t
				// before the Panic hook runs, which may panic too.
				t.abort(pe)
			} else {
				// Deferred, so that a Panic hook that panics (which Hooks
				// forbids) does not swallow the task's panic; wrapped, so
				// that a recover in the handler cannot stop that panic.
				defer func() { o.recovered(pe) }()
			}
			o.panicHook(pe, wait, runTime)
		case t != nil:
			if !t.finished.Load() {
				t.abort(ErrGoexit) // TaskStart called runtime.Goexit: t.run never began
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
	err := call(v)
	returned = true
	runTime := time.Duration(clock.Now() - start)
	if t != nil {
		err = t.err
		if t.panicked { // not a *PanicError that the task returned
			o.panicHook(err.(*PanicError), wait, runTime)
		}
	}
	o.finished(wait, runTime, err)
}

func (o *observer) panicHook(pe *PanicError, wait, run time.Duration) {
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
// (clock.Now) and dropped dropped tasks, once per pool.
func (o *observer) stopped(began int64, dropped int) {
	if o.log == nil || !o.done.CompareAndSwap(false, true) {
		return
	}
	s := o.stats()
	level, msg := slog.LevelInfo, "crew: pool stopped"
	if dropped > 0 {
		level, msg = slog.LevelWarn, "crew: pool shut down before its queue drained"
	}
	attrs := []slog.Attr{
		slog.Duration("took", time.Duration(clock.Now()-began)),
		slog.Uint64("submitted", s.Submitted),
		slog.Uint64("completed", s.Completed),
		slog.Uint64("failed", s.Failed),
		slog.Uint64("panicked", s.Panicked),
		slog.Uint64("dropped", s.Dropped),
		slog.Uint64("cancelled", s.Cancelled),
	}
	if o.lat != nil {
		attrs = append(attrs, slog.Any("latency", o.lat.Snapshot()))
	}
	o.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// workerObs starts the workers of a pool that is named, has worker hooks
// or observes its elements as they run (engine.Config.NewRunner): the
// per-worker work happens once per worker, not once per task.
type workerObs[E any] struct {
	pool      string
	labels    context.Context // pprof labels for the worker goroutine; nil: none
	onStart   func(WorkerEvent)
	onRetire  func(WorkerEvent)
	newRunner func() (func(E), func()) // the runner being wrapped
}

func (w *workerObs[E]) start() (func(E), func()) {
	if w.labels != nil {
		// A worker is started by whichever goroutine pushed when no worker
		// was looking, and would inherit that goroutine's labels.
		pprof.SetGoroutineLabels(w.labels)
	}
	if w.onStart != nil {
		w.onStart(WorkerEvent{Pool: w.pool})
	}
	run, done := w.newRunner()
	if w.labels != nil {
		inner := run
		run = func(el E) {
			if trace.IsEnabled() {
				// Inside a runtime/trace region named after the pool while
				// an execution trace is being recorded.
				trace.WithRegion(context.Background(), w.pool, func() { inner(el) })
				return
			}
			inner(el)
		}
	}
	if w.onRetire == nil {
		return run, done
	}
	born := clock.Now()
	return run, func() {
		if done != nil {
			done()
		}
		w.onRetire(WorkerEvent{Pool: w.pool, Lifetime: time.Duration(clock.Now() - born)})
	}
}
