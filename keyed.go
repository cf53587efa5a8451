package crew

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"reflect"
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
// goroutine per entity. [WithKeyLimit] lets up to n tasks of a key run at
// once, still starting in submission order; [Keyed.Pause] holds one key's
// tasks back while the others run.
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
// [WithKeyLimit](n) lets a key have up to n steps at once. A task queued
// for a busy key below its limit hands the pool one more step, without
// waiting (when the pool's bounded queue is full, the key's other steps
// take the task on as they finish, or, if none is left, the step goes
// into the pool's queue past its bound: see [WithQueueSize]); each step
// takes the key's first task as it starts, so tasks start in submission
// order, at most n at once.
//
// A paused key ([Keyed.Pause]) keeps its queue and its entry, and submits
// no step; a step of it that a worker takes starts nothing, and a task of
// it that runs finishes. [Keyed.Resume] submits its steps again, and
// deletes the key if it is idle.
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
// delete when it is done. Each task takes one step, which costs one pool
// submission, with any key limit. In steady state neither allocates beyond
// the task's closure: a key's queue holds its first two tasks inline, and
// queues are recycled.
//
// # Stopping
//
// [Pool.Stop] runs every task the Keyed accepted (except those waiting for
// a token: see [Keyed.Go]), but not the tasks of a paused key: it does not
// resume keys. When [Pool.Shutdown]'s deadline passes, the tasks that have
// not started are dropped, and so are a paused key's once Stop or Shutdown
// has run the pool's queue: they are counted in Stats().Dropped (see
// [LayerStats]), and a [Task] made by [Keyed.Submit] completes with
// [ErrDropped]. Neither waits for a paused key, so neither hangs on one.
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
	limit  int32        // WithKeyLimit: the most tasks of one key that run at once
	// startsWait: ex is a pool whose Go waits for room, so a key's start
	// may wait for room (see push).
	startsWait bool
	keyCheck   keyCheck  // what a key of type K may hold that a map cannot take
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

// keyQueue is a key's queue. At most limit steps exist for it at any
// time, each of which takes the first task of the queue as it starts:
// that is what makes its tasks start in order, at most limit at once (one
// at a time by default).
//
// A key with no step (pending and running 0, not sleeping) is idle; an
// idle key with tasks queued is paused, or is being started. Every
// pending step has a task in the queue to take (pending <= q.Len()), and,
// WithKeyRate, a token (pending <= b.avail).
type keyQueue[K comparable] struct {
	k       *Keyed[K]
	sh      *keyShard[K]
	key     K
	q       queue.FIFO[layerEntry]
	small   [2]layerEntry   // the queue's first chunk: a key that rarely holds more allocates none
	lists   [2][]layerEntry // the queue's lists of chunks, likewise
	pending int32           // steps submitted (or being submitted, or owed) that have not taken a task
	running int32           // steps running one of its tasks
	// sleeping: waiting for a token of its bucket (WithKeyRate); its
	// timer will submit the steps.
	sleeping bool
	paused   bool // Keyed.Pause: its tasks start no more until Resume
	dead     bool // removed while a step might still run it; never reused
	// starting is set while the Go that made the key busy hands its step
	// to the executor; other producers of the key wait meanwhile, and the
	// queue is neither removed nor reused (that Go still refers to it).
	starting bool
	// held is set when the pool's end is held for a starting key, for
	// started to drop what it must before Stop and Shutdown return (see
	// abandon); started releases it.
	held bool
	step layerStep // kq.run under k's number (see layer.mark), made once

	// WithKeyRate only.
	b       tokenBucket
	wakeGen uint32 // of its latest entry in the shard's wakes (see arm)
}

// A KeyedOption configures a [Keyed] in [NewKeyed], which reports an
// invalid one (see [Option]).
type KeyedOption func(*keyedConfig)

type keyedConfig struct {
	rate  *Rate
	limit int
}

// WithKeyRate limits every key to r: each key has its own token bucket,
// and at most r.Burst + r.Limit·d/r.Per tasks of one key start in any
// interval of length d. Tasks of a key waiting for a token hold no worker.
// r must be valid (see [Rate]).
func WithKeyRate(r Rate) KeyedOption {
	return func(c *keyedConfig) { c.rate = &r }
}

// WithKeyLimit lets up to n tasks of one key run at once (1 if not set:
// one at a time). They still start in submission order, and never more
// than n at once; with n > 1 they may finish in any order. n must be at
// least 1.
func WithKeyLimit(n int) KeyedOption {
	return func(c *keyedConfig) { c.limit = n }
}

// NewKeyed returns a [Keyed] that runs its tasks on ex (a [*Pool] or a
// [*RateLimited]). It panics with an error wrapping [ErrInvalid] if ex is
// nil or an option is nil or invalid.
func NewKeyed[K comparable](ex Executor, opts ...KeyedOption) *Keyed[K] {
	c := keyedConfig{limit: 1}
	errs := applyOptions(&c, "crew.NewKeyed", opts)
	var rate tokenBucket
	if c.rate != nil {
		var err error
		rate, err = c.rate.bucket()
		errs = append(errs, err)
	}
	errs = append(errs, problem(c.limit < 1, func() error {
		return invalidf("WithKeyLimit(%d): limit must be at least 1", c.limit)
	}))
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	n := 8
	for n < 4*runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	k := &Keyed[K]{seed: maphash.MakeSeed(), shards: make([]keyShard[K], n), mask: uint64(n - 1), clock: clock.Now}
	k.rate, k.perKey = rate, c.rate != nil
	k.keyCheck = keyChecks(reflect.TypeFor[K]())
	k.limit = int32(min(c.limit, math.MaxInt32))
	for i := range k.shards {
		sh := &k.shards[i]
		sh.m = make(map[K]*keyQueue[K])
		sh.started.L = &sh.mu
		sh.timerAt = -1
	}
	k.l.init(ex, "NewKeyed", k.abandon)
	if p, ok := direct(ex).(*Pool); ok && p.core().usable() {
		k.startsWait = p.c.e.Bounded() && !p.c.nonBlocking
	}
	return k
}

// Go queues task to run after every task submitted before it with the same
// key, and never at the same time as another task of that key; with
// [WithKeyLimit](n), to start after every task submitted before it with
// the same key has started, while fewer than n tasks of the key run. It
// returns without waiting for the task to run. When key is idle, Go
// submits a step to the pool and waits for room in a full bounded queue
// like [Pool.Go] ([ErrQueueFull] on a pool built [WithNonBlocking]); when
// key is busy or paused, it only appends to the key's queue, which is
// unbounded (below the key's limit, it also hands the pool one more step
// without waiting: see [Keyed]). (While another Go is submitting the step
// of the same key, Go waits for that to end, unless it is called from
// inside one of the pool's tasks: that Go may be waiting for room only the
// caller can free, so the task queues behind it at once.)
//
// Go returns [ErrStopped] once the pool has begun to stop, [ErrNilTask]
// for a nil task, and an error wrapping [ErrInvalid] for a key that a map
// cannot hold: one not equal to itself (a NaN, or a struct, array or
// interface value holding one), or an interface value holding one whose
// type cannot be hashed (a slice, map or func); so do the other
// submission forms. A panic in task goes to the pool's panic handler and the
// key's next task runs as usual. [Pool.Stop] runs every task Go accepted,
// except those still waiting for a token ([WithKeyRate], or a Keyed on a
// [RateLimited]), those of a paused key (see [Keyed.Pause]), and those
// queued behind a submission of their key's step that Stop refused when no
// other step of the key was left to run them; those, and the tasks that
// [Pool.Shutdown]'s deadline keeps from starting, are dropped and counted
// in Stats().Dropped (one waiting for a token when it comes due or when a
// Stop from outside the pool returns, as [RateLimited.Go] says).
func (k *Keyed[K]) Go(key K, task func()) error {
	return submitGo(k.layer(), k.push, nil, key, task, pushGo)
}

// TryGo queues task under key like [Keyed.Go] if that needs no waiting, and
// reports whether it did: it returns false when the key is idle and the
// pool's bounded queue has no room for its step, once the pool has begun
// to stop, and for a nil task or a key that Go refuses. While another
// submission of the same key is
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
// Tasks queued while it waits count too. While a key is paused with tasks
// queued (see [Keyed.Pause]), Wait waits until the key is resumed, or
// until the pool has stopped and dropped them: like [Pool.Wait] on a
// paused pool, it does not return with tasks left. When it returns, every
// key that is not paused and has no bucket refilling has been deleted,
// except one whose first Go is still returning: that Go deletes it.
//
// Called from inside one of k's own tasks, which it would wait for
// forever, Wait panics with an error wrapping [ErrInsideTask], like
// [Pool.Wait]. Any other caller may wait, a plain task of the pool or a
// task of another layer included. Recognising the caller costs
// microseconds, and only when Wait is about to block.
func (k *Keyed[K]) Wait() { k.layer().wait("Keyed") }

// Stats returns a snapshot of k's counters. Keys counts the keys that hold
// memory: busy ones, paused ones, and with [WithKeyRate] idle ones whose
// bucket is still refilling. It locks each shard in turn, briefly.
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
// key was idle. A busy key below its limit gets one more step, handed over
// without waiting (see spawn).
func (k *Keyed[K]) push(ctx context.Context, key K, e layerEntry, mode pushMode) error {
	if k.shards == nil {
		e.refuse(errZeroLayer)
		return errZeroLayer
	}
	if err := k.badKey(key); err != nil {
		err = invalidf("Keyed.%s: %w", keyedCall(e.t != nil, mode), err)
		e.refuse(err)
		return err
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
		kq = k.add(sh, key)
	}
	kq.q.Push(e)
	sh.waiting++
	k.l.accept()
	if kq.starting {
		// The submission that is starting the key will find it queued
		// (see started).
		sh.mu.Unlock()
		return nil
	}
	if kq.busy() {
		// The key's steps will come to it; below the limit, one more.
		var n int32
		if k.limit > 1 {
			n = kq.more()
		}
		sh.mu.Unlock()
		if n > 0 {
			kq.spawn(n)
		}
		return nil
	}
	if kq.more() == 0 { // paused, or asleep until a token
		sh.mu.Unlock()
		return nil
	}
	kq.starting = true
	sh.mu.Unlock()
	return kq.started(k.l.steps.submit(ctx, kq.step, mode))
}

// add makes key's queue in sh, which has none. Called under sh's lock.
func (k *Keyed[K]) add(sh *keyShard[K], key K) *keyQueue[K] {
	kq := k.newQueue(sh, key)
	sh.m[key] = kq
	sh.peak = max(sh.peak, len(sh.m))
	return kq
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
// timer might still touch (reuse false, or steps still counted) is marked
// dead instead.
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
	if k.perKey || !reuse || kq.starting || kq.pending+kq.running > 0 {
		// A wake in its shard's heap, its starting Go, or a step of it
		// that a worker took as the pool ended, may still refer to it.
		kq.dead = true
		kq.wakeGen++
		return
	}
	var zero K
	kq.key, kq.sh = zero, nil
	kq.sleeping, kq.paused = false, false
	k.free.Put(kq)
}

// dropAll drops kq's queued tasks and removes it. Called under the shard's
// lock; the entries are completed after it is released.
func (k *Keyed[K]) dropAll(kq *keyQueue[K], reuse bool) []layerEntry {
	dropped := k.takeAll(kq)
	k.remove(kq, reuse)
	return dropped
}

// takeAll takes kq's queued tasks off its queue, to be dropped. Called
// under the shard's lock.
func (k *Keyed[K]) takeAll(kq *keyQueue[K]) []layerEntry {
	var taken []layerEntry
	for kq.q.Len() > 0 {
		taken = append(taken, kq.q.Take())
	}
	kq.sh.waiting -= len(taken)
	return taken
}

// ended deals with a key whose step finds that the pool has ended: its
// queued tasks are dropped, and the key is removed once no other step of
// it runs a task (the last one removes it). Called under the shard's lock;
// the entries are completed after it is released.
func (k *Keyed[K]) ended(kq *keyQueue[K]) []layerEntry {
	dropped := k.takeAll(kq)
	if kq.running == 0 {
		k.remove(kq, true)
	}
	return dropped
}

// stopping reports whether the pool has stopped for good: Shutdown's
// deadline has passed, or Stop has run everything.
func (k *Keyed[K]) stopping() bool { return k.l.over() }

// abandon runs once the pool has stopped: every key none of whose steps is
// running will never run again (its steps were dropped from the pool's
// queue, or are refused; a paused key has none), so its tasks are dropped.
// A running step drops its key's remaining tasks itself when its task
// returns.
func (k *Keyed[K]) abandon() {
	var dropped []layerEntry
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		var gone []*keyQueue[K]
		for _, kq := range sh.m {
			// A running step, and a starting Go, deal with their key
			// themselves; Stop and Shutdown wait for the Go, which
			// releases the hold (see started).
			switch {
			case kq.starting && !kq.held:
				kq.held = true
				k.l.holdDrop()
			case kq.running == 0 && !kq.starting:
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

// Pause stops the queued tasks of key from starting until [Keyed.Resume]:
// tasks of key already running finish, tasks of other keys go on as
// before, and Go and Submit for key still queue its tasks (they never wait
// for room: a paused key submits no step to the pool). A step of key that
// a worker was taking as Pause returned may still start one task. Pause of
// a key that has no task pauses it all the same, so that its tasks queue
// from the first; a paused key holds its memory (a map entry and a small
// queue) until Resume, and counts in Stats().Keys.
//
// While a key is paused with tasks queued, [Keyed.Wait] waits until Resume
// or until the pool stops. [Pool.Stop] and [Pool.Shutdown] do not resume a
// paused key: its queued tasks are dropped once the pool has stopped,
// counted in Stats().Dropped (see [LayerStats]), and a [Task] made by
// [Keyed.Submit] completes with [ErrDropped]. Resume the key first to run
// them. Pause is idempotent, and does nothing once Stop or Shutdown has
// begun, on a zero Keyed, or for a key that [Keyed.Go] refuses as
// invalid, of which no task can queue. It costs a shard lock.
func (k *Keyed[K]) Pause(key K) {
	if k == nil || k.shards == nil || k.badKey(key) != nil {
		return
	}
	sh := k.shard(key)
	sh.mu.Lock()
	if k.l.refuses() == nil {
		kq := sh.m[key]
		if kq == nil {
			kq = k.add(sh, key)
		}
		kq.paused = true
	}
	sh.mu.Unlock()
}

// Resume lets the queued tasks of a paused key start again, in order,
// handing the key's steps to the pool without waiting for room (a full
// bounded queue takes them past its bound, as when a key's token comes
// due: see [WithQueueSize]). A paused key with no task is deleted, as
// an idle key is. Resume does nothing for a key that is not paused, or on
// a zero Keyed. Once the pool has begun to stop, the tasks it resumes are
// dropped if the pool no longer takes their steps.
func (k *Keyed[K]) Resume(key K) {
	if k == nil || k.shards == nil || k.badKey(key) != nil {
		return
	}
	sh := k.shard(key)
	sh.mu.Lock()
	kq := sh.m[key]
	if kq == nil || !kq.paused {
		sh.mu.Unlock()
		return
	}
	kq.paused = false
	var n int32
	switch {
	case kq.starting: // the starting Go passes the key on (see started)
	case kq.busy() || kq.q.Len() > 0:
		n = kq.more()
	case k.stopping():
		k.remove(kq, true)
	default:
		kq.idle()
	}
	sh.mu.Unlock()
	kq.spawn(n)
}

// Paused reports whether key is paused: [Keyed.Pause] was called for it,
// and not [Keyed.Resume] since. Once the pool has stopped, a key whose
// tasks it dropped is no longer paused. Paused is false on a zero Keyed.
func (k *Keyed[K]) Paused(key K) bool {
	if k == nil || k.shards == nil || k.badKey(key) != nil {
		return false
	}
	sh := k.shard(key)
	sh.mu.Lock()
	kq := sh.m[key]
	paused := kq != nil && kq.paused
	sh.mu.Unlock()
	return paused
}

// started ends the start of a key that was idle, whose step the executor
// took (err == nil) or refused: then the task just queued, the first in
// the key's queue, is not accepted after all. Tasks queued behind it (by
// submissions that must not wait, or from inside the pool's tasks) were
// accepted: the stepper submits the key's steps for them, waiting for
// room. Once the pool has ended, abandon passes over the key: started
// drops what the key holds, paused or not, holding the pool's end (abandon
// took the hold, or started takes it, under the shard's lock, before
// abandon has let the end go) until it has. (Had it not ended, abandon
// deals with the key once it does.)
func (kq *keyQueue[K]) started(err error) error {
	k, sh := kq.k, kq.sh
	var dropped []layerEntry
	held := false
	defer func() {
		if held {
			k.l.dropTaken(dropped)
		} else {
			k.l.dropEntries(dropped...)
		}
	}()
	sh.mu.Lock()
	kq.starting = false
	held, kq.held = kq.held, false
	sh.started.Broadcast()
	if kq.dead {
		// The pool stopped and abandon dropped the key's tasks, ours too
		// (a Task is done with ErrDropped).
		sh.mu.Unlock()
		return err
	}
	var own layerEntry
	if err != nil {
		own = kq.q.Take()
		sh.waiting--
		kq.pending--
	}
	var n int32
	if kq.running == 0 && k.stopping() {
		// The pool has ended and abandon left the key to us: its step was
		// refused, or dropped with the pool's queue, or will find the key
		// dead; nothing will start its tasks. The end is still held: by
		// abandon for us, or, if abandon has not run, by the layer's link.
		dropped = k.dropAll(kq, false)
		if !held {
			k.l.holdDrop()
			held = true
		}
	} else {
		// The step may have run our task and left the key to us, and
		// tasks may have queued behind our start meanwhile (or, with a
		// limit above 1, behind the step): start them without waiting
		// (see stepper.owe).
		n = kq.more()
		if n == 0 && !kq.busy() && kq.q.Len() == 0 {
			kq.idle()
		}
	}
	sh.mu.Unlock()
	if err != nil {
		k.l.done(1)
		own.refuse(err)
	}
	kq.owe(n) // a stopped pool refuses them: the tasks are dropped
	return err
}

// owe hands n steps of kq, counted as pending, to the stepper.
func (kq *keyQueue[K]) owe(n int32) {
	for range n {
		kq.k.l.steps.owe(kq.step)
	}
}

// spawn hands n steps of kq, counted as pending, to the executor without
// waiting (see refused).
func (kq *keyQueue[K]) spawn(n int32) {
	st := &kq.k.l.steps
	for range n {
		if err := st.submit(nil, kq.step, pushTry); err != nil {
			kq.refused(err)
		}
	}
}

// stepDropped drops the tasks of a scheduled key whose step the
// stopped pool refused, or a RateLimited dropped, unless another step of
// the key is left to carry them.
func (kq *keyQueue[K]) stepDropped() { kq.refused(ErrStopped) }

// refused deals with a step of kq that the executor did not take (err) or
// dropped unrun. Another step of the key, Resume of a paused key, or the
// Go starting the key carries its tasks on if there is one. Otherwise a
// step that a full queue refused is owed (see stepper.owe), and the tasks
// of a key whose step a stopped pool refused are dropped.
func (kq *keyQueue[K]) refused(err error) {
	sh := kq.sh
	sh.mu.Lock()
	if kq.dead || kq.pending == 0 {
		sh.mu.Unlock()
		return
	}
	kq.pending--
	switch {
	case kq.busy() || kq.paused:
		sh.mu.Unlock()
	case err == ErrQueueFull:
		kq.pending++ // q.Len() > pending still: the task the step was for
		sh.mu.Unlock()
		kq.k.l.steps.owe(kq.step)
	default:
		dropped := kq.k.dropAll(kq, true)
		kq.k.l.holdDrop()
		sh.mu.Unlock()
		kq.k.l.dropTaken(dropped)
	}
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
		kq.pending--
		k := kq.k
		if kq.paused {
			sh.mu.Unlock() // Resume submits the key's steps again
			return
		}
		if k.limit > 1 && k.stopping() {
			// Another step of the key was running as Shutdown's deadline
			// passed, and a worker took this one just before the pool
			// dropped its queue.
			dropped := k.ended(kq)
			sh.mu.Unlock()
			k.l.dropEntries(dropped...)
			return
		}
		e := kq.q.Take()
		sh.waiting--
		kq.running++
		if k.perKey {
			now := k.clock()
			kq.b.take(now) // available: reserved when the step was submitted
			if k.tookToken != nil {
				k.tookToken(kq.key, now)
			}
		}
		var n int32
		if k.limit > 1 {
			n = kq.more() // the next step, if it waited for this token
		}
		sh.mu.Unlock()
		if n > 0 {
			kq.spawn(n)
		}
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
// the executor would not take the step but lets the caller run it. A step
// whose worker is one too many (see stepper.overLimit) goes on only if the
// pool closes before it has queued the next step past the full queue's
// bound.
func (kq *keyQueue[K]) after() bool {
	k, sh := kq.k, kq.sh
	sh.mu.Lock()
	if kq.dead {
		sh.mu.Unlock()
		return false
	}
	kq.running--
	if kq.q.Len() == 0 {
		switch {
		case kq.running > 0: // the key's last running step passes it on
		case kq.starting: // the starting Go deals with it
		case k.stopping():
			k.remove(kq, true) // no bucket to keep refilling: nothing will start
		default:
			kq.idle()
		}
		sh.mu.Unlock()
		return false
	}
	if k.stopping() { // Shutdown gave up: drop the rest
		dropped := k.ended(kq)
		sh.mu.Unlock()
		k.l.dropEntries(dropped...)
		return false
	}
	n := kq.more()
	if n == 0 {
		sh.mu.Unlock()
		return false
	}
	sh.mu.Unlock()
	if n > 1 {
		kq.spawn(n - 1) // before ours: the step we still count keeps kq ours
	}
	err := k.l.steps.submit(nil, kq.step, pushTry)
	if err == ErrQueueFull && k.l.steps.overLimit() {
		// The step's worker is one too many (Resize lowered the limit): it
		// must not go on with the key's next task, so the step goes past
		// the full queue's bound, as an owed one would. Should Stop close
		// the pool first, inline lets the step go on after all: Stop runs
		// what the key accepted.
		err = k.l.steps.submit(nil, kq.step, pushPast)
	}
	switch {
	case err == nil:
		return false
	case k.l.steps.inline(err): // the pool's queue is full, or it is stopping
		return true
	}
	kq.refused(err) // for good (a RateLimited never reports a full queue)
	return false
}

// busy reports whether kq has a step: pending, running, or asleep until a
// token. Called under the shard lock.
func (kq *keyQueue[K]) busy() bool { return kq.pending+kq.running > 0 || kq.sleeping }

// more counts as pending, and returns, the steps that the caller must
// submit for kq: one for each queued task that no step is coming for, as
// far as the key's limit allows. None while the key is paused or asleep.
// WithKeyRate, only as many as there are tokens for: when that leaves a
// task without a step, it puts the key to sleep until the next token
// (unless the bucket is too small for one more: then a step that takes
// its token calls more again). Called under the shard lock.
func (kq *keyQueue[K]) more() int32 {
	if kq.paused || kq.sleeping {
		return 0
	}
	k := kq.k
	n := min(k.limit-kq.pending-kq.running, int32(kq.q.Len())-kq.pending)
	if n <= 0 {
		return 0
	}
	if k.perKey {
		now := k.clock()
		if tokens := kq.b.avail(now) - int64(kq.pending); tokens < int64(n) {
			n = int32(max(tokens, 0))
			if next := int64(kq.pending+n) + 1; next <= kq.b.cap {
				kq.sleeping = true
				kq.arm(kq.b.at(next), now)
			}
		}
	}
	kq.pending += n
	return n
}

// idle deals with a key whose queue is empty and that has no step. A
// paused key is kept. Called under the shard lock.
func (kq *keyQueue[K]) idle() {
	if kq.paused {
		return
	}
	k := kq.k
	if k.perKey {
		if now := k.clock(); kq.b.tat > now {
			// Keep the bucket until it is full again, or a new task could
			// start before its token.
			kq.arm(kq.b.tat, now)
			return
		}
	}
	k.remove(kq, true)
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
	case kq.sleeping:
		kq.sleeping = false
		n := kq.more() // asleep again if the token is not due yet
		sh.mu.Unlock()
		kq.owe(n) // a full queue takes them past its bound
		return
	case !kq.busy() && kq.q.Len() == 0 && !kq.paused:
		if kq.b.tat <= now {
			k.remove(kq, false)
		} else {
			kq.arm(kq.b.tat, now)
		}
	}
	sh.mu.Unlock()
}

// keyCheck says what a value of a key type may hold that a map cannot take
// as a key: a NaN (in a float or complex number), which is not equal to
// itself, so that no lookup would find its entry again, and, behind an
// interface, a value whose type cannot be hashed (a slice, map or func),
// whose hashing panics. For other types, strings and integers among them,
// a key needs no check.
type keyCheck uint8

const (
	keyMayBeNaN keyCheck = 1 << iota
	keyMayNotHash
)

// keyChecks returns the checks that the keys of type t need.
func keyChecks(t reflect.Type) keyCheck {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return keyMayBeNaN
	case reflect.Interface:
		return keyMayBeNaN | keyMayNotHash
	case reflect.Array:
		if t.Len() > 0 {
			return keyChecks(t.Elem())
		}
	case reflect.Struct:
		var c keyCheck
		for i := range t.NumField() {
			c |= keyChecks(t.Field(i).Type)
		}
		return c
	}
	return 0
}

// badKey returns why key cannot be one of k's keys, or nil. It costs
// nothing for a key type that needs no check (see keyCheck).
func (k *Keyed[K]) badKey(key K) error {
	switch {
	case k.keyCheck == 0:
		return nil
	case k.keyCheck&keyMayNotHash != 0:
		return unhashable(key)
	case key != key:
		return notItself(key)
	}
	return nil
}

// unhashable returns why key, of a type that may hold an interface, cannot
// be a map key, or nil: comparing it panics if it holds a value that
// cannot be hashed.
func unhashable[K comparable](key K) (err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("key %#v holds a value whose type cannot be hashed (a slice, map or func)", key)
		}
	}()
	if key != key {
		return notItself(key)
	}
	return nil
}

// notItself is the error of a key that is not equal to itself.
func notItself[K comparable](key K) error {
	return fmt.Errorf("key %#v is not equal to itself (it holds a NaN), so no lookup would find its tasks again", key)
}

// keyedCall names the Keyed method that pushes an entry as mode says: a
// Submit form if the entry is a Task.
func keyedCall(task bool, mode pushMode) string {
	name := [...]string{pushGo: "Go", pushTry: "TryGo", pushCtx: "GoContext"}[mode]
	if task {
		name = [...]string{pushGo: "Submit", pushTry: "TrySubmit", pushCtx: "SubmitContext"}[mode]
	}
	return name
}
