package crew

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"time"

	"github.com/gocrew/crew/internal/clock"
	"github.com/gocrew/crew/internal/queue"
)

// A Keyed runs tasks on an [Executor] (a [Pool], or a [RateLimited]) so
// that tasks with the same key run one at a time, in the order they were
// submitted, while tasks with different keys run in parallel, all under
// the pool's limit. Use it for work that must not overlap per entity (per
// user, per account, per file) without a lock held across the work or a
// goroutine per entity.
//
// # How it runs
//
// Each busy key has a small FIFO queue in a map, sharded by the key's hash
// so that producers of different keys rarely meet on one lock. When a key
// goes from idle to busy, the submission submits one step for it to the
// pool. The step runs the key's first task and then gives its worker back:
// if the key has more, it submits itself again, to the back of the pool's
// queue, so one hot key cannot monopolise workers and keys take turns.
// (When the pool's bounded queue is full, or the pool is stopping, the
// step goes on with the key's next task itself, on the worker it holds.)
// When a key's queue empties, its entry is deleted: an idle key holds no
// goroutine, no channel and no memory of its own. Since Go maps do not
// shrink, a shard's map that held 4,096 keys or more is rebuilt once
// deletions leave it one-eighth full, so a burst of keys gives its memory
// back.
//
// [WithKeyRate] limits each key to a [Rate] of task starts. A key waiting
// for a token holds no worker (a timer brings it back); an idle key keeps
// its bucket until the bucket is full again (at most Burst×Per/Limit),
// then its memory is reclaimed. For a limit across all keys, build the
// Keyed on a RateLimited.
//
// # Cost
//
// A task for a busy key costs a shard lock and a small queue append; a task
// for an idle key also costs a map insert, a pool submission and a map
// delete when it is done. In steady state neither allocates beyond the
// task's closure: a key's queue holds its first two tasks inline, and
// queues are recycled.
//
// # Stopping
//
// [Pool.Stop] runs every task the Keyed accepted (except those waiting for
// a token: see [Keyed.Go]). When [Pool.Shutdown]'s deadline passes, the
// tasks that have not started are dropped: they are counted in
// Stats().Dropped (see [LayerStats]), and a [Task] made by [Keyed.Submit]
// completes with [ErrDropped].
//
// A Keyed must be made with [NewKeyed]; its methods are safe for concurrent
// use. Several may share one pool.
type Keyed[K comparable] struct {
	l      layer
	seed   maphash.Seed
	shards []keyShard[K]
	mask   uint64
	clock  func() int64 // clock.Now; tests replace it
	rate   tokenBucket  // a full bucket: the template of every key's, with WithKeyRate
	perKey bool         // WithKeyRate
	// startsWait: ex is a pool whose Go waits for room, so a key's start
	// may wait for room (see push).
	startsWait bool
	free       sync.Pool // of *keyQueue[K], without WithKeyRate

	tookToken func(key K, now int64) // tests: called under the shard lock at each token taken
}

type keyShard[K comparable] struct {
	mu      sync.Mutex
	started sync.Cond // on mu: a start (see keyQueue.starting) has ended
	m       map[K]*keyQueue[K]
	peak    int // len(m) at its largest since the map was made
	waiting int // tasks queued in m's keys, not yet started

	// WithKeyRate: the keys that wait for a time (a token, or a full
	// bucket), in a min-heap on it, and the one timer that serves them:
	// however many keys wait, a shard's wakes run on one goroutine at a
	// time.
	wakes   []keyWake[K]
	timer   *time.Timer
	timerAt int64 // when timer fires; -1: not armed

	_ [64]byte
}

// keyWake is a key's wake in its shard's heap. An entry whose gen is not
// its key's wakeGen any more was overtaken by a later arm, and is ignored.
type keyWake[K comparable] struct {
	at  int64
	kq  *keyQueue[K]
	gen uint32
}

// rebuildKeys is the peak size from which a shard's map is rebuilt once
// deletions leave it at most one-eighth full: below it, the room kept for
// idle keys (about 20 bytes each) is cheaper than making the map again.
const rebuildKeys = 4096

// The states of a key's queue.
const (
	keyIdle      uint8 = iota // no step; empty (kept only while its bucket refills)
	keyScheduled              // its step is submitted (or being submitted)
	keyRunning                // its step runs one of its tasks
	keySleeping               // waiting for a token of its bucket; its timer will submit the step
)

// keyQueue is a key's queue. At most one step exists for it at any time,
// which is what makes its tasks run one at a time and in order.
type keyQueue[K comparable] struct {
	k     *Keyed[K]
	sh    *keyShard[K]
	key   K
	q     queue.FIFO[layerEntry]
	small [2]layerEntry   // the queue's first chunk: a key that rarely holds more allocates none
	lists [2][]layerEntry // the queue's lists of chunks, likewise
	state uint8
	dead  bool // removed while a step might still run it; never reused
	// starting is set while the Go that made the key busy hands its step
	// to the executor; other producers of the key wait meanwhile, and the
	// queue is neither removed nor reused (that Go still refers to it).
	starting bool
	step     layerStep // kq.run under k's number (see layer.mark), made once

	// WithKeyRate only.
	b       tokenBucket
	wakeGen uint32 // of its latest entry in the shard's wakes (see arm)
}

// A KeyedOption configures a [Keyed] in [NewKeyed], which reports an
// invalid one (see [Option]).
type KeyedOption func(*keyedConfig)

type keyedConfig struct {
	rate *Rate
}

// WithKeyRate limits every key to r: each key has its own token bucket,
// and at most r.Burst + r.Limit·d/r.Per tasks of one key start in any
// interval of length d. Tasks of a key waiting for a token hold no worker.
// r must be valid (see [Rate]).
func WithKeyRate(r Rate) KeyedOption {
	return func(c *keyedConfig) { c.rate = &r }
}

// NewKeyed returns a [Keyed] that runs its tasks on ex (a [*Pool] or a
// [*RateLimited]). It panics with an error wrapping [ErrInvalid] if ex is
// nil or an option is nil or invalid.
func NewKeyed[K comparable](ex Executor, opts ...KeyedOption) *Keyed[K] {
	var c keyedConfig
	errs := applyOptions(&c, "crew.NewKeyed", opts)
	var rate tokenBucket
	if c.rate != nil {
		var err error
		rate, err = c.rate.bucket()
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	n := 8
	for n < 4*runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	k := &Keyed[K]{seed: maphash.MakeSeed(), shards: make([]keyShard[K], n), mask: uint64(n - 1), clock: clock.Now}
	k.rate, k.perKey = rate, c.rate != nil
	for i := range k.shards {
		sh := &k.shards[i]
		sh.m = make(map[K]*keyQueue[K])
		sh.started.L = &sh.mu
		sh.timerAt = -1
	}
	k.l.init(ex, "NewKeyed", k.abandon)
	if p, ok := ex.(*Pool); ok && p.core().usable() {
		k.startsWait = p.c.e.Bounded() && !p.c.nonBlocking
	}
	return k
}

// Go queues task to run after every task submitted before it with the same
// key, and never at the same time as another task of that key. It returns
// without waiting for the task to run. When key is idle, Go submits a step
// to the pool and waits for room in a full bounded queue like [Pool.Go]
// ([ErrQueueFull] on a pool built [WithNonBlocking]); when key is busy, it
// only appends to the key's queue, which is unbounded. (While another Go
// is submitting the step of the same key, Go waits for that to end, unless
// it is called from inside one of the pool's tasks: that Go may be waiting
// for room only the caller can free, so the task queues behind it at
// once.)
//
// Go returns [ErrStopped] once the pool has begun to stop and [ErrNilTask]
// for a nil task. A panic in task goes to the pool's panic handler and the
// key's next task runs as usual. [Pool.Stop] runs every task Go accepted,
// except those still waiting for a token ([WithKeyRate], or a Keyed on a
// [RateLimited]) and those queued behind a first submission of their key
// that Stop refused; those, and the tasks that [Pool.Shutdown]'s deadline
// keeps from starting, are dropped and counted in Stats().Dropped (one
// waiting for a token when it comes due or when a Stop from outside the
// pool returns, as [RateLimited.Go] says).
func (k *Keyed[K]) Go(key K, task func()) error {
	return submitGo(k.layer(), k.push, nil, key, task, pushGo)
}

// TryGo queues task under key like [Keyed.Go] if that needs no waiting, and
// reports whether it did: it returns false when the key is idle and the
// pool's bounded queue has no room for its step, once the pool has begun
// to stop, and for a nil task. While another submission of the same key is
// starting it, TryGo queues task behind that one.
func (k *Keyed[K]) TryGo(key K, task func()) bool {
	return submitGo(k.layer(), k.push, nil, key, task, pushTry) == nil
}

// GoContext queues task under key like [Keyed.Go], waiting for room in a
// full bounded queue until ctx ends (even on a pool built
// [WithNonBlocking]); it then returns ctx's error. ctx bounds only the
// wait: a queued task runs whatever becomes of ctx. It returns an error
// wrapping [ErrInvalid] for a nil ctx.
func (k *Keyed[K]) GoContext(ctx context.Context, key K, task func()) error {
	return submitGo(k.layer(), k.push, ctx, key, task, pushCtx)
}

// Submit queues task under key like [Keyed.Go] and returns a [Task] to wait
// for its result; the task receives a context of its own (see
// [Pool.Submit]). A Task that cannot be queued is already done with the
// error; one dropped because the pool stopped first completes with
// [ErrDropped]. [Task.Cancel] keeps it from starting; it still waits for
// its turn in the key's order, where it is passed over.
func (k *Keyed[K]) Submit(key K, task func(ctx context.Context) error) *Task {
	return submitTask(k.layer(), k.push, nil, key, task, pushGo)
}

// TrySubmit is [Keyed.Submit] with [Keyed.TryGo]'s rule: it reports whether
// task was queued, and if not, the [Task] is already done with the reason.
func (k *Keyed[K]) TrySubmit(key K, task func(ctx context.Context) error) (*Task, bool) {
	t := submitTask(k.layer(), k.push, nil, key, task, pushTry)
	return t, !t.refused
}

// SubmitContext is [Keyed.Submit] with [Keyed.GoContext]'s wait for room,
// until ctx ends.
func (k *Keyed[K]) SubmitContext(ctx context.Context, key K, task func(ctx context.Context) error) *Task {
	return submitTask(k.layer(), k.push, ctx, key, task, pushCtx)
}

// Wait blocks until every task queued on k has finished or been dropped.
// Tasks queued while it waits count too. When it returns, every key that
// has no bucket refilling has been deleted, except one whose first Go is
// still returning: that Go deletes it.
//
// Called from inside one of k's own tasks, which it would wait for
// forever, Wait panics with an error wrapping [ErrInsideTask], like
// [Pool.Wait]. Any other caller may wait, a plain task of the pool or a
// task of another layer included. Recognising the caller costs
// microseconds, and only when Wait is about to block.
func (k *Keyed[K]) Wait() { k.layer().wait("Keyed") }

// Stats returns a snapshot of k's counters. Keys counts the keys that hold
// memory: busy ones, and with [WithKeyRate] idle ones whose bucket is still
// refilling. It locks each shard in turn, briefly.
func (k *Keyed[K]) Stats() LayerStats { return k.layer().stats(k.keys) }

// keys fills the counts Stats adds to the layer's: it locks each shard in
// turn.
func (k *Keyed[K]) keys(s *LayerStats) {
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		s.Keys += len(sh.m)
		s.Waiting += sh.waiting
		sh.mu.Unlock()
	}
}

// layer returns k's layer, nil if k is nil.
func (k *Keyed[K]) layer() *layer {
	if k == nil {
		return nil
	}
	return &k.l
}

func (k *Keyed[K]) shard(key K) *keyShard[K] {
	return &k.shards[maphash.Comparable(k.seed, key)&k.mask]
}

// push queues e under key, and submits the key's step as mode says if the
// key was idle.
func (k *Keyed[K]) push(ctx context.Context, key K, e layerEntry, mode pushMode) error {
	if k.shards == nil {
		e.refuse(errZeroLayer)
		return errZeroLayer
	}
	sh := k.shard(key)
	sh.mu.Lock()
	var kq *keyQueue[K]
	for {
		if err := k.l.refuses(); err != nil {
			sh.mu.Unlock()
			e.refuse(err)
			return err
		}
		kq = sh.m[key]
		if kq == nil || !kq.starting {
			break
		}
		// Another submission is handing the key's first task to the pool:
		// wait for the outcome, so that a task is accepted only behind a
		// step that exists (a refused start would otherwise strand it). A
		// submission that must not wait queues behind the start instead,
		// and so does a task of the pool: that submission may be waiting
		// for room that only the caller's worker can free. A refused
		// start hands the tasks behind it to the stepper (see started).
		if mode != pushGo || k.startsWait && k.l.p.c.e.InWorker() {
			break
		}
		sh.started.Wait()
	}
	if kq == nil {
		kq = k.newQueue(sh, key)
		sh.m[key] = kq
		sh.peak = max(sh.peak, len(sh.m))
	}
	kq.q.Push(e)
	sh.waiting++
	k.l.accept()
	if kq.state != keyIdle || kq.starting {
		// The key's step will come to it, or the submission that is
		// starting the key will find it queued (see started).
		sh.mu.Unlock()
		return nil
	}
	if !kq.schedule() {
		sh.mu.Unlock()
		return nil
	}
	kq.starting = true
	sh.mu.Unlock()
	return kq.started(k.l.steps.submit(ctx, kq.step, mode))
}

func (k *Keyed[K]) newQueue(sh *keyShard[K], key K) *keyQueue[K] {
	kq, _ := k.free.Get().(*keyQueue[K])
	if kq == nil {
		kq = &keyQueue[K]{k: k}
		kq.q.Keep = maxKeptQueue
		kq.q.Lend(kq.lists[:], kq.small[:])
		kq.step = k.l.mark(kq.run, kq)
	}
	kq.sh, kq.key = sh, key
	if k.perKey {
		kq.b = k.rate
	}
	return kq
}

// remove deletes kq from its shard. Called under the shard's lock. A queue
// that no step can reach any more is recycled; one that a stale step or
// timer might still touch (reuse false) is marked dead instead.
func (k *Keyed[K]) remove(kq *keyQueue[K], reuse bool) {
	sh := kq.sh
	delete(sh.m, kq.key)
	if n := len(sh.m); sh.peak >= rebuildKeys && n <= sh.peak/8 {
		// Go maps keep their buckets when emptied: rebuild the map after
		// most of it has gone, so that idle keys' memory is returned.
		// Copying n <= peak/8 entries is paid for by the peak-n deletes,
		// and a shard never keeps room for more than about rebuildKeys
		// idle keys (or 8 times its live ones).
		m := make(map[K]*keyQueue[K], n)
		for key, q := range sh.m {
			m[key] = q
		}
		sh.m, sh.peak = m, n
	}
	if k.perKey || !reuse || kq.starting {
		kq.dead = true // a wake in its shard's heap, or its starting Go, may still refer to it
		kq.wakeGen++
		return
	}
	var zero K
	kq.key, kq.sh, kq.state = zero, nil, keyIdle
	k.free.Put(kq)
}

// dropAll drops kq's queued tasks and removes it. Called under the shard's
// lock; the entries are completed after it is released.
func (k *Keyed[K]) dropAll(kq *keyQueue[K], reuse bool) []layerEntry {
	var dropped []layerEntry
	for kq.q.Len() > 0 {
		dropped = append(dropped, kq.q.Take())
	}
	kq.sh.waiting -= len(dropped)
	k.remove(kq, reuse)
	return dropped
}

// stopping reports whether the pool has stopped for good: Shutdown's
// deadline has passed, or Stop has run everything.
func (k *Keyed[K]) stopping() bool { return k.l.over() }

// abandon runs once the pool has stopped: every key whose step is not
// running will never run again (its step was dropped from the pool's
// queue, or is refused), so its tasks are dropped. A running step drops
// its key's remaining tasks itself when its task returns.
func (k *Keyed[K]) abandon() {
	var dropped []layerEntry
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		var gone []*keyQueue[K]
		for _, kq := range sh.m {
			// A running step, and a starting Go, deal with their key
			// themselves.
			if kq.state != keyRunning && !kq.starting {
				gone = append(gone, kq)
			}
		}
		for _, kq := range gone {
			// A step that a worker took just before the pool dropped
			// the rest may still come: it finds the queue dead.
			dropped = append(dropped, k.dropAll(kq, false)...)
		}
		sh.mu.Unlock()
	}
	k.l.dropEntries(dropped...)
}

// started ends the start of a key that was idle, whose step the executor
// took (err == nil) or refused: then the task just queued, the first in
// the key's queue, is not accepted after all. Tasks queued behind it (by
// submissions that must not wait, or from inside the pool's tasks) were
// accepted: the stepper submits the key's step for them, waiting for room.
func (kq *keyQueue[K]) started(err error) error {
	k, sh := kq.k, kq.sh
	sh.mu.Lock()
	kq.starting = false
	sh.started.Broadcast()
	switch {
	case kq.dead:
		// The pool stopped and abandon dropped the key's tasks, ours too
		// (a Task is done with ErrDropped).
		sh.mu.Unlock()
		return err
	case err == nil && kq.state == keyScheduled && k.stopping():
		// Shutdown's deadline has passed, and abandon left the key to us:
		// the step was dropped with the pool's queue, or will find the
		// key dead.
		dropped := k.dropAll(kq, false)
		sh.mu.Unlock()
		k.l.dropEntries(dropped...)
		return nil
	case err == nil && kq.state == keyIdle && kq.q.Len() > 0:
		// The step has run our task and left the key to us, and tasks
		// from inside the pool's tasks queued meanwhile: start it again
		// for them, from a goroutine that may wait for room.
		if kq.schedule() {
			k.l.steps.owe(kq.step)
		}
		sh.mu.Unlock()
		return nil
	case err == nil:
		if kq.state == keyIdle {
			kq.idle() // the step has run the task and left the key to us
		}
		sh.mu.Unlock()
		return nil
	}
	own := kq.q.Take()
	sh.waiting--
	behind := kq.q.Len() > 0
	if !behind {
		kq.state = keyIdle
		kq.idle()
	}
	sh.mu.Unlock()
	k.l.done(1)
	own.refuse(err)
	if behind {
		k.l.steps.owe(kq.step) // a stopped pool refuses it: the tasks are dropped
	}
	return err
}

// stepDropped drops the tasks of a scheduled key whose step the
// stopped pool refused, or a RateLimited dropped.
func (kq *keyQueue[K]) stepDropped() {
	sh := kq.sh
	sh.mu.Lock()
	if kq.dead || kq.state != keyScheduled {
		sh.mu.Unlock()
		return
	}
	dropped := kq.k.dropAll(kq, true)
	kq.k.l.holdDrop()
	sh.mu.Unlock()
	kq.k.l.dropTaken(dropped)
}

// run is the key's step: it runs the key's first task, then passes the key
// on (see after).
func (kq *keyQueue[K]) run() {
	sh := kq.sh
	sh.mu.Lock()
	for {
		if kq.dead || kq.q.Len() == 0 {
			sh.mu.Unlock() // abandoned as the pool stopped
			return
		}
		e := kq.q.Take()
		sh.waiting--
		kq.state = keyRunning
		if k := kq.k; k.perKey {
			now := k.clock()
			kq.b.take(now) // available: checked before the step was submitted
			if k.tookToken != nil {
				k.tookToken(kq.key, now)
			}
		}
		sh.mu.Unlock()
		if !kq.exec(e) {
			return
		}
		sh.mu.Lock()
	}
}

// exec runs e, then passes the key on, and reports whether the step should
// run the key's next task itself.
func (kq *keyQueue[K]) exec(e layerEntry) (inline bool) {
	l := &kq.k.l
	finished := false
	defer func() {
		if !finished {
			if l.p.crashes() {
				if v := recover(); v != nil {
					// WithCrashOnPanic: crash now, running nothing more.
					// The stack printed still shows the task. (On other
					// pools runEntry recovers the task's panic; one from
					// a panicking panic handler passes the key on below,
					// then goes on to the worker.)
					panic(v)
				}
			}
			// runtime.Goexit: pass the key on, running its next tasks here
			// as the step would (Stop has closed the pool), then let it
			// unwind to the worker.
			inline := kq.after()
			l.done(1)
			if inline {
				kq.run()
			}
		}
	}()
	l.runEntry(e) // recovers panics
	finished = true
	inline = kq.after() // kq may be recycled from here on
	l.done(1)
	return inline
}

// after passes the key on after one of its tasks: it deletes an idle key,
// puts a key out of tokens to sleep, or submits the key's step again. It
// reports whether the calling step should go on with the next task itself:
// the executor would not take the step but lets the caller run it.
func (kq *keyQueue[K]) after() bool {
	k, sh := kq.k, kq.sh
	sh.mu.Lock()
	if kq.dead {
		sh.mu.Unlock()
		return false
	}
	if kq.q.Len() == 0 {
		switch {
		case kq.starting:
			kq.state = keyIdle // the starting Go deals with it
		case k.stopping():
			k.remove(kq, true) // no bucket to keep refilling: nothing will start
		default:
			kq.idle()
		}
		sh.mu.Unlock()
		return false
	}
	if k.stopping() { // Shutdown gave up: drop the rest
		dropped := k.dropAll(kq, true)
		sh.mu.Unlock()
		k.l.dropEntries(dropped...)
		return false
	}
	if !kq.schedule() {
		sh.mu.Unlock()
		return false
	}
	sh.mu.Unlock()
	err := k.l.steps.submit(nil, kq.step, pushTry)
	switch {
	case err == nil:
		return false
	case k.l.steps.inline(err): // the pool's queue is full, or it is stopping
		return true
	}
	kq.stepDropped() // refused for good (a RateLimited never reports a full queue)
	return false
}

// schedule passes on a key with queued tasks and no step: it puts a key
// out of tokens to sleep, or marks it scheduled and reports true, when the
// caller must submit its step. Called under the shard lock.
func (kq *keyQueue[K]) schedule() bool {
	if k := kq.k; k.perKey {
		if now := k.clock(); kq.b.avail(now) < 1 {
			kq.sleep(now)
			return false
		}
	}
	kq.state = keyScheduled
	return true
}

// idle deals with a key whose queue is empty. Called under the shard lock.
func (kq *keyQueue[K]) idle() {
	k := kq.k
	if k.perKey {
		if now := k.clock(); kq.b.tat > now {
			// Keep the bucket until it is full again, or a new task could
			// start before its token.
			kq.state = keyIdle
			kq.arm(kq.b.tat, now)
			return
		}
	}
	k.remove(kq, true)
}

// sleep makes a key wait for a token. Called under the shard lock.
func (kq *keyQueue[K]) sleep(now int64) {
	kq.state = keySleeping
	kq.arm(kq.b.at(1), now)
}

// arm makes the shard's timer call wake for kq at at, in place of any
// earlier arm of kq. Called under the shard lock.
func (kq *keyQueue[K]) arm(at, now int64) {
	sh := kq.sh
	kq.wakeGen++
	sh.wakes = append(sh.wakes, keyWake[K]{at: at, kq: kq, gen: kq.wakeGen})
	up(sh.wakes, len(sh.wakes)-1)
	if sh.timerAt < 0 || at < sh.timerAt {
		kq.k.setTimer(sh, at, now)
	}
}

// setTimer makes sh's timer fire at at. Called under the shard lock.
func (k *Keyed[K]) setTimer(sh *keyShard[K], at, now int64) {
	d := time.Duration(max(0, at-now))
	if sh.timer == nil {
		sh.timer = time.AfterFunc(d, func() { k.fire(sh) })
	} else {
		sh.timer.Reset(d)
	}
	sh.timerAt = at
}

// fire runs on sh's timer: it takes the wakes that are due off the heap,
// arms the timer for the next, and wakes their keys.
func (k *Keyed[K]) fire(sh *keyShard[K]) {
	sh.mu.Lock()
	sh.timerAt = -1
	now := k.clock()
	var due []*keyQueue[K]
	for len(sh.wakes) > 0 && sh.wakes[0].at <= now {
		w := sh.wakes[0]
		n := len(sh.wakes) - 1
		sh.wakes[0] = sh.wakes[n]
		sh.wakes[n] = keyWake[K]{}
		sh.wakes = sh.wakes[:n]
		down(sh.wakes, 0)
		if w.gen == w.kq.wakeGen && !w.kq.dead {
			due = append(due, w.kq)
		}
	}
	switch {
	case len(sh.wakes) > 0:
		k.setTimer(sh, sh.wakes[0].at, now)
	case cap(sh.wakes) > 1024:
		sh.wakes = nil // a drained burst gives its memory back
	}
	sh.mu.Unlock()
	for _, kq := range due {
		kq.wake()
	}
}

// up and down keep a shard's wakes a binary min-heap on at.
func up[K comparable](h []keyWake[K], i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= h[i].at {
			return
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func down[K comparable](h []keyWake[K], i int) {
	for {
		least := i
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) && h[c].at < h[least].at {
				least = c
			}
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

// wake runs when a key's time has come: a sleeping key has a token now, or
// an idle key's bucket is full and its memory can go. A wake that comes
// for a state it was not armed for finds nothing to do, or re-arms.
func (kq *keyQueue[K]) wake() {
	k, sh := kq.k, kq.sh
	sh.mu.Lock()
	if kq.dead {
		sh.mu.Unlock()
		return
	}
	now := k.clock()
	switch {
	case kq.state == keySleeping && kq.b.avail(now) >= 1:
		kq.state = keyScheduled
		sh.mu.Unlock()
		k.l.steps.owe(kq.step) // the stepper waits for room
		return
	case kq.state == keySleeping:
		kq.sleep(now)
	case kq.state == keyIdle && kq.q.Len() == 0:
		if kq.b.tat <= now {
			k.remove(kq, false)
		} else {
			kq.arm(kq.b.tat, now)
		}
	}
	sh.mu.Unlock()
}
