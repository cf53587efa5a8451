package crew

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/queue"
)

// A Rate is a token bucket: Limit tokens are added every Per, evenly spread
// (one every Per/Limit), and the bucket holds at most Burst of them. Each
// task start takes one token, so in any interval of length d at most
// Burst + Limit·d/Per tasks start. A zero Burst means 1: starts are then
// spaced at least Per/Limit apart and no interval of length Per sees more
// than Limit of them plus the one at its very edge.
//
// The spacing Per/Limit is rounded up to whole nanoseconds, so the rate
// actually enforced is never above the one asked for: at most one token a
// nanosecond, whatever Limit. A valid Rate has Limit and Per of at least 1
// and Burst of at least 0, and a full bucket that refills in at most
// math.MaxInt64/4 nanoseconds (Burst × Per/Limit, about 73 years); the
// constructors ([NewRateLimited], [WithKeyRate]) reject any other with an
// error wrapping [ErrInvalid].
type Rate struct {
	Limit int           // tokens per Per; at least 1
	Per   time.Duration // at least 1ns
	Burst int           // tokens the bucket holds; 0 means 1
}

// bucket returns an empty-history (full) token bucket for r, or an error
// wrapping ErrInvalid.
func (r Rate) bucket() (tokenBucket, error) {
	burst := r.Burst
	if burst == 0 {
		burst = 1
	}
	if r.Limit < 1 || r.Per < 1 || burst < 1 {
		return tokenBucket{}, fmt.Errorf("%w: %+v: Limit and Per must be positive, Burst at least 0", ErrInvalid, r)
	}
	// Per/Limit rounded up, never faster than asked; a division that
	// cannot overflow, whatever Limit.
	e := int64(r.Per) / int64(r.Limit)
	if int64(r.Per)%int64(r.Limit) != 0 {
		e++
	}
	if int64(burst) > math.MaxInt64/4/e {
		return tokenBucket{}, fmt.Errorf("%w: %+v: Burst×Per/Limit is too long", ErrInvalid, r)
	}
	return tokenBucket{e: e, cap: int64(burst)}, nil
}

// tokenBucket is a token bucket kept as a generic cell rate algorithm
// (GCRA): instead of a token count refilled by a ticker, it stores tat, the
// time at which the bucket will be full again, and computes the tokens at
// any moment from it. Nothing runs while it refills. Times are nanoseconds
// on the clock of package clock. The caller guards it.
type tokenBucket struct {
	e   int64 // nanoseconds per token
	cap int64 // tokens it holds when full
	tat int64 // when it is full again; full when tat <= now
}

// avail returns the tokens available at now, between 0 and cap.
func (b *tokenBucket) avail(now int64) int64 {
	if b.tat <= now {
		return b.cap
	}
	return b.cap - (b.tat-now+b.e-1)/b.e
}

// take uses one token; call it only when avail(now) >= 1.
func (b *tokenBucket) take(now int64) { b.tat = max(b.tat, now) + b.e }

// at returns the time from which m tokens (m <= cap) are available, if
// none is taken meanwhile.
func (b *tokenBucket) at(m int64) int64 { return b.tat - (b.cap-m)*b.e }

// A RateLimited runs tasks on an [Executor] (a [Pool], or another
// RateLimited), starting at most as many as its [Rate] allows, in
// submission order. Tasks waiting for a token wait in the RateLimited's
// own queue: they hold no worker and no goroutine, and an idle RateLimited
// runs nothing (no ticker). A task is handed to the pool only when a token
// is available for it, and takes the token when it starts on a worker, so
// a pool queue or busy workers can delay starts but never bunch them
// beyond the rate.
//
// A RateLimited is an Executor: [Keyed] and [Priority] layers built on it
// run their tasks at its rate, across all their keys or priorities.
// Several RateLimited may share one pool, each with its own rate. All
// methods are safe for concurrent use. Make one with [NewRateLimited].
type RateLimited struct {
	l     layer
	clock func() int64 // clock.Now; tests replace it
	step  layerStep    // r.run under r's number (see layer.mark), made once

	mu       sync.Mutex
	b        tokenBucket
	q        queue.FIFO[layerEntry]
	inflight int         // steps handed to the pool that have not started
	timer    *time.Timer // calls tick when the next token is due
	timerAt  int64       // when timer fires; -1: not armed

	tookToken func(now int64) // tests: called under mu at each token taken
}

// NewRateLimited returns a [RateLimited] that runs tasks on ex (a [*Pool]
// or a [*RateLimited]) at rate r. It panics with an error wrapping
// [ErrInvalid] if ex is nil or r is invalid (see [Rate]). It costs a few
// small allocations, once.
func NewRateLimited(ex Executor, r Rate) *RateLimited {
	b, err := r.bucket()
	if err != nil {
		panic(err)
	}
	rl := &RateLimited{b: b, clock: clock.Now, timerAt: -1}
	rl.q.Keep = maxKeptQueue
	rl.l.init(ex, "NewRateLimited", rl.abandon)
	rl.step = rl.l.mark(rl.run, rl)
	return rl
}

// Go queues task to start once the rate allows, after the tasks queued
// before it. It never waits: the RateLimited's queue is unbounded, and a
// bounded pool queue only bounds the tasks already given a token. It
// returns [ErrStopped] once the pool has begun to stop and [ErrNilTask] for
// a nil task. A panic in task goes to the pool's panic handler.
//
// A task still waiting for a token when the pool stops is dropped and
// counted in Stats().Dropped (see [LayerStats]): [Pool.Stop] runs what the
// pool has queued, not what a limiter holds back; call [RateLimited.Wait]
// first to run everything. It is dropped when its token comes due or when
// Stop or [Pool.Shutdown] returns, whichever is first, so a Wait that runs
// meanwhile (in a plain task of the pool, say) waits until then. (A Stop
// from inside one of the pool's tasks returns at once and drops nothing:
// the task waits for its token, or for a Stop from outside.) Go costs a
// lock and a pool submission: no allocation beyond the task's own closure.
func (r *RateLimited) Go(task func()) error {
	return submitGo(r.layer(), r.push, nil, struct{}{}, task, pushGo)
}

// TryGo is [RateLimited.Go], which never waits, reporting whether task was
// queued.
func (r *RateLimited) TryGo(task func()) bool {
	return submitGo(r.layer(), r.push, nil, struct{}{}, task, pushTry) == nil
}

// GoContext is [RateLimited.Go], which never waits, for the grammar every
// crew type shares: it returns ctx's error if ctx has already ended, and
// an error wrapping [ErrInvalid] for a nil ctx.
func (r *RateLimited) GoContext(ctx context.Context, task func()) error {
	return submitGo(r.layer(), r.push, ctx, struct{}{}, task, pushCtx)
}

// Submit queues task like [RateLimited.Go] and returns a [Task] to wait for
// its result; the task receives a context of its own (see [Pool.Submit]).
// A Task that cannot be queued is already done with the error; one
// dropped because the pool stopped first completes with [ErrDropped].
// [Task.Cancel] keeps it from starting; it still waits for its turn and
// its token, which it spends as it is passed over.
func (r *RateLimited) Submit(task func(ctx context.Context) error) *Task {
	return submitTask(r.layer(), r.push, nil, struct{}{}, task, pushGo)
}

// TrySubmit is [RateLimited.Submit], which never waits, reporting whether
// task was queued; if not, the [Task] is already done with the reason.
func (r *RateLimited) TrySubmit(task func(ctx context.Context) error) (*Task, bool) {
	t := submitTask(r.layer(), r.push, nil, struct{}{}, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [RateLimited.Submit] with [RateLimited.GoContext]'s
// checks of ctx.
func (r *RateLimited) SubmitContext(ctx context.Context, task func(ctx context.Context) error) *Task {
	return submitTask(r.layer(), r.push, ctx, struct{}{}, task, pushCtx)
}

// Wait blocks until every task queued on r has started and finished, or
// been dropped. Tasks queued while it waits count too.
//
// Called from inside one of r's own tasks, which it would wait for
// forever, Wait panics with an error wrapping [ErrInsideTask], like
// [Pool.Wait]. The tasks of a [Keyed] or [Priority] built on r are r's
// tasks too. Any other caller may wait, a plain task of the pool included.
// Recognising the caller costs microseconds, and only when Wait is about
// to block.
func (r *RateLimited) Wait() { r.layer().wait("RateLimited") }

// Stats returns a snapshot of r's counters ([LayerStats]); Waiting counts
// the tasks waiting for a token or for a worker.
func (r *RateLimited) Stats() LayerStats { return r.layer().stats(r.waiting) }

// waiting fills the counts Stats adds to the layer's: the tasks waiting
// for a token or a worker.
func (r *RateLimited) waiting(s *LayerStats) {
	r.mu.Lock()
	s.Waiting = r.q.Len()
	r.mu.Unlock()
}

// layer returns r's layer, nil if r is nil.
func (r *RateLimited) layer() *layer {
	if r == nil {
		return nil
	}
	return &r.l
}

// pool makes a RateLimited an Executor.
func (r *RateLimited) pool() *Pool {
	if r == nil {
		return nil // a layer on it reports a zero pool
	}
	return r.l.p
}

// push queues e and hands the executor a step for each task that has a
// token. It never waits, whatever mode says: a step that the executor's
// full queue refuses is owed (see stepper). The empty argument is the
// layers' ordering argument, which a RateLimited does not have.
func (r *RateLimited) push(_ context.Context, _ struct{}, e layerEntry, _ pushMode) error {
	r.mu.Lock()
	if err := r.l.refuses(); err != nil {
		r.mu.Unlock()
		e.refuse(err)
		return err
	}
	r.q.Push(e)
	r.l.accept()
	n := r.pump(r.clock())
	r.mu.Unlock()
	r.submit(n)
	return nil
}

// pump reserves a step for each waiting task that has a token now, and
// arms the timer for the next one. It returns how many steps the caller
// must submit. Called under mu.
//
// Each step takes its token when it starts, not here; pump keeps the
// steps in flight no more than the tokens available, and tokens only
// accrue until a step takes one, so every step finds its token.
func (r *RateLimited) pump(now int64) int {
	waiting := r.q.Len() - r.inflight
	if waiting <= 0 {
		return 0
	}
	n := min(waiting, max(0, int(r.b.avail(now))-r.inflight))
	r.inflight += n
	// With as many steps in flight as the bucket holds, the next pump is
	// the next step's, when it takes its token.
	if waiting > n && r.inflight < int(r.b.cap) {
		r.arm(r.b.at(int64(r.inflight+1)), now)
	}
	return n
}

// arm makes sure tick runs at or before at. Called under mu.
func (r *RateLimited) arm(at, now int64) {
	if r.timerAt >= 0 && r.timerAt <= at {
		return
	}
	d := time.Duration(max(0, at-now))
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.tick)
	} else {
		r.timer.Reset(d)
	}
	r.timerAt = at
}

// tick runs on the timer's goroutine when a token is due.
func (r *RateLimited) tick() {
	r.mu.Lock()
	r.timerAt = -1
	n := r.pump(r.clock())
	r.mu.Unlock()
	r.submit(n)
}

// submit hands n reserved steps to the executor without waiting. A step
// that a full queue refuses is owed (see stepper.owe). Once the pool has
// stopped, the rest are lost (see stepsLost).
func (r *RateLimited) submit(n int) {
	for i := range n {
		switch err := r.l.steps.submit(nil, r.step, pushTry); err {
		case nil:
		case ErrQueueFull:
			for range n - i {
				r.l.steps.owe(r.step)
			}
			return
		default:
			r.stepsLost(n - i)
			return
		}
	}
}

// stepDropped deals with one of r's steps that its executor dropped.
func (r *RateLimited) stepDropped() { r.stepsLost(1) }

// stepsLost deals with n reserved steps that will never run: the executor
// refused or dropped them as the pool stopped. The tasks that have a step
// still run (Stop runs the pool's queue); the others never will.
func (r *RateLimited) stepsLost(n int) {
	r.mu.Lock()
	r.inflight -= n
	var dropped []layerEntry
	for r.q.Len() > r.inflight {
		dropped = append(dropped, r.popBack())
	}
	r.l.holdDrop()
	r.mu.Unlock()
	r.l.dropTaken(dropped)
}

// run is the step: it starts the first waiting task with a token.
func (r *RateLimited) run() {
	r.mu.Lock()
	r.inflight--
	if r.q.Len() == 0 { // dropped as the pool stopped
		r.mu.Unlock()
		return
	}
	now := r.clock()
	if r.b.avail(now) < 1 { // cannot happen (see pump); never start without a token
		r.arm(r.b.at(1), now)
		r.mu.Unlock()
		return
	}
	r.b.take(now)
	if r.tookToken != nil {
		r.tookToken(now)
	}
	e := r.q.Take()
	n := r.pump(now)
	r.mu.Unlock()
	r.submit(n) // never blocks a worker
	defer r.l.done(1)
	r.l.runEntry(e)
}

// popBack removes the last waiting task; one must wait. Called under mu.
func (r *RateLimited) popBack() layerEntry {
	e, _ := r.q.PopBack()
	return e
}

// abandon drops every waiting task once the pool has stopped.
func (r *RateLimited) abandon() {
	r.mu.Lock()
	var dropped []layerEntry
	for r.q.Len() > 0 {
		dropped = append(dropped, r.q.Take())
	}
	if r.timer != nil {
		r.timer.Stop()
		r.timerAt = -1
	}
	r.mu.Unlock()
	r.l.dropEntries(dropped...)
}
