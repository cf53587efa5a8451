package crew

import (
	"context"
	"runtime/debug"
	"sync"
)

// A Stream runs tasks concurrently on a pool and their callbacks one at a
// time, in submission order: the shape of sourcegraph/conc's stream, for
// work whose results must be consumed in order (written to a file, sent on
// a connection) while being computed in parallel.
//
// A task returns its callback (nil for none). The callback of the i-th task
// runs after the callbacks of the tasks before it have returned, never at
// the same time as another callback of the stream, so callbacks may touch
// shared state without a lock. A callback runs on the goroutine that
// completes the task at the head of the line (a worker, or a Go or Wait
// that ran the task itself, see [Group.Wait]), which then also runs the
// callbacks of the tasks after it that are already done: there is no extra
// goroutine and no channel per task, and a task costs no allocation beyond
// its closure and its callback's.
//
// Backpressure: at most window tasks are between [Stream.Go] and the end
// of their callback. Go blocks while the window is full (running queued
// tasks of the stream meanwhile in a slot of the pool's, as Group.Wait
// does), so a fast producer cannot run ahead of a slow head of line or
// slow callbacks. The window is the [WithLimit] limit if given (which also
// bounds the tasks running at once), else the pool's worker limit when the
// stream is made.
//
// Failures: a panic in a task or a callback is recovered as a
// [*PanicError], cancels the stream (unless [WithAllErrors]) and comes back
// from [Stream.Wait] (or is re-panicked there [WithRepanic]; one that Wait
// does not report goes to the pool's panic handler, see Group.Wait).
// Callbacks run up to the first task that produced none, because it
// panicked or was skipped after the stream was cancelled, or up to a
// callback that panicked; no later callback runs, even WithAllErrors, so
// consumers never see a gap in the order. Tasks report their own errors
// through their callbacks.
//
// A Stream must be made with [NewStream] and is safe for concurrent use;
// like a Group's, a zero or nil Stream's methods return an error.
// Neither a task nor a callback may call Go on its own stream: a task holds
// its place in the window until its callback has returned, so with the
// window full such a Go would wait for itself.
type Stream struct {
	c      core[func(context.Context) func()]
	window int

	mu       sync.Mutex // after c.mu when both are held
	slots    []streamSlot
	head     int // sequence number of the next callback
	inflight int // tasks accepted (or being accepted) whose callback is not consumed
	calling  bool
	broken   bool // a task produced no callback, or a callback failed
	waiters  int
	space    chan struct{}
}

type streamSlot struct {
	cb    func()
	state uint8
}

const (
	slotReady = 1 + iota // the task returned cb
	slotGap              // the task panicked or was skipped
)

// NewStream returns a stream of tasks that run on p with a context derived
// from ctx, as [NewGroup]'s is. It panics with an error wrapping
// [ErrInvalid] if ctx is nil or an option is nil or invalid, and for
// [WithRetry]: a Stream's tasks return no error to call them again on
// (a [MapErrStream]'s do).
func NewStream(ctx context.Context, p *Pool, opts ...GroupOption) *Stream {
	s := new(Stream)
	s.c.exec = s.exec
	s.c.grow = s.grow
	s.c.hooks = &coreHooks{lost: s.skipped, stranded: s.wakeProducer, noRetry: true}
	s.c.mustInit(ctx, p, opts, nil)
	s.window = s.c.cfg.limit
	if s.window == 0 {
		s.window = p.maxWorkers()
	}
	s.space = make(chan struct{}, 1)
	return s
}

// Go submits task, waiting while the stream's window is full. It returns
// [ErrNilTask] for a nil task, [ErrGroupDone] after [Stream.Wait] has
// returned, [ErrStopped] once the pool has begun to stop, and the cause of
// the stream's context once it is cancelled (the task would not run): in
// all these cases task never runs. As [Group.Go] does, it records a nil
// task and a stopped pool as the stream's error: without [WithAllErrors]
// that cancels the stream, and later calls of Go return that error.
func (s *Stream) Go(task func(ctx context.Context) func()) error {
	return s.goAs(nil, task, pushGo)
}

// TryGo submits task like [Stream.Go] if the window has room for it, and
// reports whether it did; it never waits.
func (s *Stream) TryGo(task func(ctx context.Context) func()) bool {
	return s.goAs(nil, task, pushTry) == nil
}

// GoContext submits task like [Stream.Go], waiting while the window is
// full until ctx ends; it then returns ctx's error and task never runs.
// Unlike Go, it does not run queued tasks of the stream while it waits, so
// that it returns when ctx ends; called from a task of the pool, it lends
// that task's slot to the pool while it waits, as Go does when it cannot
// help. It returns an error wrapping [ErrInvalid] for a nil ctx.
func (s *Stream) GoContext(ctx context.Context, task func(ctx context.Context) func()) error {
	if ctx == nil {
		return invalidf("Stream.GoContext: nil context")
	}
	return s.goAs(ctx, task, pushCtx)
}

// goAs is the Go forms: it waits for room in the window as mode says (ctx
// for pushCtx), running queued tasks of the stream meanwhile where Go may
// (see core.mayHelp).
func (s *Stream) goAs(ctx context.Context, task func(context.Context) func(), mode pushMode) error {
	if s == nil || s.space == nil {
		return errZeroGroup
	}
	if task == nil {
		s.c.fail(ErrNilTask)
		return ErrNilTask
	}
	var ctxDone <-chan struct{}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		ctxDone = ctx.Done()
	}
	s.mu.Lock()
	help := 0 // whether Go may run tasks (see core.mayHelp): 1 yes, -1 no, 0 not asked yet
	for s.inflight >= s.window {
		if mode == pushTry {
			s.mu.Unlock()
			return errNoRoom
		}
		s.waiters++
		s.mu.Unlock()
		// Go runs queued tasks of the stream while it waits, in a slot of
		// the pool's; GoContext does not, so that it returns when ctx ends.
		helped := false
		if mode == pushGo {
			helped = s.c.helpOne(false)
			if !helped && help == 0 {
				help = -1
				if s.c.mayHelp() {
					help = 1
				}
			}
			if !helped && help > 0 {
				helped = s.c.helpOne(true)
			}
		}
		if !helped {
			// Called from inside a task of a saturated pool, lend its slot
			// meanwhile: the task that opens the window (a queued one, or
			// one pushed after helpOne looked) may need a worker.
			s.c.p.lendIfInside(func() {
				select {
				case <-s.space:
				case <-s.c.ctx.Done():
				case <-ctxDone:
				}
			})
		}
		s.mu.Lock()
		s.waiters--
		if s.c.ctx.Err() != nil {
			break
		}
		if ctx != nil && ctx.Err() != nil {
			s.signal() // pass a wake-up this call may have taken
			s.mu.Unlock()
			return ctx.Err()
		}
	}
	if s.c.ctx.Err() != nil {
		s.mu.Unlock()
		if s.c.finished() {
			return ErrGroupDone
		}
		return context.Cause(s.c.ctx)
	}
	s.inflight++
	if s.inflight < s.window {
		s.signal() // room for another waiting producer
	}
	s.mu.Unlock()
	if err := s.c.push(task, false); err != nil {
		s.mu.Lock()
		s.leaveWindow()
		s.mu.Unlock()
		return err
	}
	return nil
}

// Wait blocks until every task has finished and every callback that is to
// run has returned, and returns the stream's error as [Group.Wait] does.
// While it waits it runs queued tasks itself, as Group.Wait does. Later Go
// calls return [ErrGroupDone].
func (s *Stream) Wait() error {
	if s == nil {
		return errZeroGroup
	}
	return s.c.wait()
}

// Context returns the stream's context, the one its tasks receive.
func (s *Stream) Context() context.Context {
	if s == nil {
		return nil
	}
	return s.c.context()
}

func (s *Stream) exec(ctx context.Context, seq int, task func(context.Context) func()) error {
	delivered := false
	defer func() {
		if !delivered { // task panicked or called runtime.Goexit
			s.deliver(seq, nil, slotGap)
		}
	}()
	cb := task(ctx)
	delivered = true
	s.deliver(seq, cb, slotReady)
	return nil
}

func (s *Stream) skipped(seq int) { s.deliver(seq, nil, slotGap) }

// grow makes room in the ring of slots for seq. Called under s.c.mu, with
// sequence numbers in order.
func (s *Stream) grow(seq int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq-s.head < len(s.slots) {
		return
	}
	n := max(16, 2*len(s.slots))
	for n <= seq-s.head {
		n *= 2
	}
	slots := make([]streamSlot, n)
	for i := s.head; i < seq; i++ {
		slots[i&(n-1)] = s.slots[i&(len(s.slots)-1)]
	}
	s.slots = slots
}

// deliver records the outcome of task seq and, if that task is at the head
// of the line and no callback is running, runs the callbacks that are due.
func (s *Stream) deliver(seq int, cb func(), state uint8) {
	s.mu.Lock()
	sl := &s.slots[seq&(len(s.slots)-1)]
	sl.cb, sl.state = cb, state
	if s.calling || seq != s.head {
		s.mu.Unlock()
		return
	}
	s.calling = true
	s.consume()
	s.mu.Unlock()
}

// consume takes the slots that are due, in order, and runs their
// callbacks, unlocking s.mu around each. Called under s.mu with calling set;
// it clears calling when no slot is due.
func (s *Stream) consume() {
	for {
		sl := &s.slots[s.head&(len(s.slots)-1)]
		if sl.state == 0 {
			break
		}
		cb, state, seq := sl.cb, sl.state, s.head
		*sl = streamSlot{}
		s.head++
		if state == slotGap {
			s.broken = true
		}
		if s.broken || cb == nil {
			s.leaveWindow()
			continue
		}
		s.mu.Unlock()
		pe, ended := s.call(cb)
		if ended {
			s.c.p.notePanic() // a Goexit would not have returned
		}
		if pe != nil {
			s.c.failAt(seq, pe) // the callback's task's place in Wait's error
		}
		s.mu.Lock()
		if ended {
			// panic(nil) under GODEBUG=panicnil=1: call took it for
			// runtime.Goexit, released the task and consumed what was
			// due, and calling is no longer ours.
			return
		}
		s.leaveWindow() // the task leaves the window when its callback returns
		if pe != nil {
			s.broken = true
		}
	}
	s.calling = false
}

// leaveWindow takes a task out of the window. Called under s.mu.
func (s *Stream) leaveWindow() {
	s.inflight--
	s.signal()
}

// call runs a callback, recovering a panic unless the pool crashes on
// panics. ended reports that it returns after the cleanup meant for a
// callback that ended its goroutine: a panic(nil) under
// GODEBUG=panicnil=1 recovers as nil, as runtime.Goexit does, but returns.
func (s *Stream) call(cb func()) (pe *PanicError, ended bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if !s.c.crash {
			if v := recover(); v != nil {
				s.c.p.notePanic()
				pe = &PanicError{Value: v, Stack: debug.Stack()}
				return
			}
		}
		// runtime.Goexit (or a panic about to crash the program): this
		// goroutine ends here. Consume what is due (no callback runs once
		// broken) so that no producer waits on slots nobody will take. The
		// task whose completion ran this callback records ErrGoexit, which
		// fails the stream.
		s.mu.Lock()
		s.leaveWindow()
		s.broken = true
		s.consume()
		s.mu.Unlock()
		if !s.c.crash { // else the panic goes on and crashes the program
			pe, ended = &PanicError{Stack: debug.Stack()}, true
		}
	}()
	cb()
	returned = true
	return nil, false
}

// wakeProducer wakes a producer waiting for room in the window, to run a
// task that the pool took no step for: the window stays full until some
// goroutine runs it, and the producers that wait may be all there is.
func (s *Stream) wakeProducer() {
	s.mu.Lock()
	s.signal()
	s.mu.Unlock()
}

// signal wakes a producer waiting for room in the window. Called under s.mu.
func (s *Stream) signal() {
	if s.waiters > 0 {
		select {
		case s.space <- struct{}{}:
		default:
		}
	}
}
