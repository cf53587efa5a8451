package crew_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	"github.com/gocrew/crew/internal/leak"
	"github.com/gocrew/crew/internal/stress"
)

// TestStressLayers runs randomized rounds on one small pool. Each round
// draws its parameters from its seed (pool size, bounded or non-blocking
// queue, idle timeout, a panic handler that may panic in turn, a
// WithContext parent that may be cancelled) and puts on the pool at once:
//   - plain Go, Submit, TryGo and GoContext tasks;
//   - Keyed k1 (sometimes WithKeyRate) and Priority q1 on the pool, and a
//     RateLimited with Keyed k2 and Priority q2 on it, fed with Go and
//     Submit;
//   - Groups, ResultGroups, Streams, MapErrSeq and ForEachSeq calls, each
//     given a few tasks and waited for by a producer, and groups made and
//     waited for inside a task;
//   - a batch.Batcher WithPool on the same pool.
//
// Tasks return, fail, panic, call runtime.Goexit, sleep, wait for their
// context, or submit more work from inside (to their own or another layer,
// on their own key or one the producers use, to their group, to the
// Batcher), and now and then Stop or Shutdown the pool from inside. Beside
// them a goroutine calls Resize (growing and shrinking), Wait, the layers'
// Waits and Stats. The round ends with a Stop, a Shutdown (short deadline,
// or already cancelled), both at once, or, in graceful rounds, a Wait for
// every layer before Stop.
//
// Checked, task by task: an accepted task runs at most once, and exactly
// once unless it is reported dropped (each layer's Stats().Dropped counts
// exactly its accepted tasks that did not run, a Submit task completes
// with ErrDropped); a refused task never runs; a Submit task completes with
// its own outcome (nil, its error, its panic, ErrGoexit); tasks of one key
// never overlap and keep each producer's order; the RateLimited never
// starts more tasks than its rate allows; Stop drops nothing that the pool
// or k1 accepted (but for what their docs except), and a graceful round
// nothing at all; a group's Wait returns nil only if each accepted task ran
// and succeeded, ResultGroup and MapErrSeq results match their tasks, and
// Stream callbacks run one at a time, in order, until the first failure;
// every item the Batcher accepted is flushed or handed to its error handler
// exactly once; and every Wait, Stop, Shutdown and Close returns (a hang
// fails the round with the goroutines' stacks).
//
// Like the tests in stress_test.go it runs for about 2 s, 30 s with
// CREW_STRESS=long, and not at all with -short or CREW_STRESS=off. A
// failure names its round's seed; CREW_STRESS_SEED=n runs every round with
// seed n (the same parameters and choices; the timing differs), which is
// how to reproduce one. Names start with ls (layer stress).
//
//	go test -race -run TestStressLayers -count=1 -v .
//	CREW_STRESS=long CREW_STRESS_SEED=1234 go test -race -run TestStressLayers -count=1 -v .

const (
	lsMaxRecs  = 1 << 13
	lsMaxItems = 1 << 12
	lsDeadline = 15 * time.Second
)

type lsBeh uint8

const (
	lsRet lsBeh = iota
	lsErr
	lsPanic
	lsGoexit
	lsSleep
	lsSpawn
	lsCtx
)

var lsBehName = [...]string{"ret", "err", "panic", "goexit", "sleep", "spawn", "ctx"}

type lsCat uint8

const (
	lcPoolGo lsCat = iota
	lcPoolSubmit
	lcPoolTry
	lcPoolCtx
	lcK1Go
	lcK1Sub
	lcK2Go
	lcK2Sub
	lcQ1Go
	lcQ1Sub
	lcQ2Go
	lcQ2Sub
	lcRLGo
	lcRLSub
	lcGroup  // Group, ResultGroup, Stream, MapErrSeq, ForEachSeq
	lcNested // a group made and waited for inside a task
	lcCount
)

var lsCatName = [...]string{"pool.Go", "pool.Submit", "pool.TryGo", "pool.GoContext",
	"k1.Go", "k1.Submit", "k2.Go", "k2.Submit", "q1.Go", "q1.Submit", "q2.Go", "q2.Submit",
	"rl.Go", "rl.Submit", "group", "nested"}

func (c lsCat) submit() bool {
	switch c {
	case lcPoolSubmit, lcK1Sub, lcK2Sub, lcQ1Sub, lcQ2Sub, lcRLSub:
		return true
	}
	return false
}

func (c lsCat) layered() bool { return c >= lcK1Go && c <= lcRLSub }

func (c lsCat) viaRL() bool {
	switch c {
	case lcK2Go, lcK2Sub, lcQ2Go, lcQ2Sub, lcRLGo, lcRLSub:
		return true
	}
	return false
}

type lsPanicVal struct {
	id      int
	layered bool
}

var errLS = errors.New("stress: task error")

const (
	stPending int32 = iota
	stAccepted
	stRefused
)

type lsRec struct {
	cat    lsCat
	beh    lsBeh
	cbBeh  lsBeh // Stream: lsRet (a callback), lsErr (none), lsPanic, lsGoexit
	depth  int
	nested bool // spawns only what never waits
	// behind: a Keyed task submitted from inside a task on a key the
	// producers use, which may queue behind their first Go of the key; if
	// Stop refuses that Go, Stop drops it.
	behind bool
	key    string
	prod   int64
	pseq   int64
	sleep  time.Duration
	sess   *lsSess

	runs   atomic.Int32
	status atomic.Int32
	task   atomic.Pointer[crew.Task]
	subErr error // the error a Go-like call returned
}

type lsSess struct {
	g    *crew.Group // plain groups: tasks may Go more into it
	done atomic.Bool
	mu   sync.Mutex
	ids  []int
}

func (s *lsSess) add(id int) {
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
}

type lsKey struct {
	running atomic.Int32
	mu      sync.Mutex
	last    map[int64]int64
}

type lsRound struct {
	t        *testing.T
	seed     uint64
	p        *crew.Pool
	size     int
	bounded  bool
	qsize    int
	nonBlock bool
	hpanic   bool

	k1 *crew.Keyed[string]
	k2 *crew.Keyed[string] // on rl
	q1 *crew.Priority
	q2 *crew.Priority // on rl
	rl *crew.RateLimited

	rate     crew.Rate
	rlMade   time.Time
	rlStarts atomic.Int64

	b           *batch.Batcher[int]
	bCloseMu    sync.Mutex
	bClosed     atomic.Bool
	bGaveUp     atomic.Bool   // a Close gave up: flush calls may still run, on the Batcher's goroutines
	bProgress   chan struct{} // signalled when an item is flushed or handed over
	itemNext    atomic.Int64
	itemAcc     []atomic.Bool
	itemFlushed []atomic.Int32
	itemHanded  []atomic.Int32
	flushCalls  atomic.Int64

	recs  []lsRec
	next  atomic.Int64
	keyMu sync.Mutex
	keys  map[string]*lsKey

	keyRate      bool // k1 WithKeyRate
	parentCancel context.CancelFunc
	parentDone   atomic.Bool // the pool's WithContext parent was cancelled
	stopping     atomic.Bool
	innerStop    atomic.Bool
	graceful     bool // waits for every layer before Stop (modes 0 and 1)
	failed       atomic.Bool
	errMu        sync.Mutex
	dumped       bool
	log          []string
	logMu        sync.Mutex
}

func (r *lsRound) note(format string, args ...any) {
	r.logMu.Lock()
	if len(r.log) < 200 {
		r.log = append(r.log, fmt.Sprintf(format, args...))
	}
	r.logMu.Unlock()
}

func (r *lsRound) errorf(format string, args ...any) {
	r.failed.Store(true)
	r.t.Errorf("seed %d: "+format, append([]any{r.seed}, args...)...)
}

func (r *lsRound) hang(what string) {
	r.errMu.Lock()
	dump := !r.dumped
	r.dumped = true
	r.errMu.Unlock()
	if dump {
		r.errorf("%s did not return within %v; goroutines:\n\n%s", what, lsDeadline, leak.Dump())
	} else {
		r.errorf("%s did not return within %v", what, lsDeadline)
	}
}

// guard runs f on a goroutine of its own, which a task run there may end
// with runtime.Goexit; it reports whether f returned, and fails the round
// if f hangs.
func (r *lsRound) guard(what string, f func()) bool {
	done := make(chan bool, 1)
	go func() {
		ok := false
		defer func() { done <- ok }()
		f()
		ok = true
	}()
	select {
	case ok := <-done:
		return ok
	case <-time.After(lsDeadline):
		r.hang(what)
		return false
	}
}

// guardRetry calls f until it returns (a goroutine that ran a task calling
// Goexit ends; the call is made again on another).
func (r *lsRound) guardRetry(what string, f func()) bool {
	for range 50 {
		if r.guard(what, f) {
			return true
		}
		if r.failed.Load() {
			return false
		}
	}
	r.errorf("%s: Goexit 50 times in a row", what)
	return false
}

func (r *lsRound) keyState(k string) *lsKey {
	r.keyMu.Lock()
	defer r.keyMu.Unlock()
	ks := r.keys[k]
	if ks == nil {
		ks = &lsKey{last: map[int64]int64{}}
		r.keys[k] = ks
	}
	return ks
}

// newRec returns a new record's id, or -1 when the round has made enough.
func (r *lsRound) newRec(cat lsCat, beh lsBeh, depth int) int {
	id := int(r.next.Add(1) - 1)
	if id >= lsMaxRecs {
		return -1
	}
	rec := &r.recs[id]
	rec.cat, rec.beh, rec.depth = cat, beh, depth
	if beh == lsSleep {
		rec.sleep = time.Duration(rand.IntN(300)) * time.Microsecond
	}
	return id
}

func (r *lsRound) pickBeh(rng *rand.Rand, depth int, goexit bool) lsBeh {
	x := rng.IntN(100)
	switch {
	case x < 30:
		return lsRet
	case x < 40:
		return lsErr
	case x < 50:
		return lsPanic
	case x < 54:
		if goexit {
			return lsGoexit
		}
		return lsRet
	case x < 70:
		return lsSleep
	case x < 88:
		if depth < 2 {
			return lsSpawn
		}
		return lsRet
	case x < 93:
		return lsCtx
	}
	return lsRet
}

// body is every task's function.
func (r *lsRound) body(id int, ctx context.Context) error {
	rec := &r.recs[id]
	if n := rec.runs.Add(1); n != 1 {
		r.errorf("task %d (%s) ran %d times", id, lsCatName[rec.cat], n)
	}
	if rec.sess != nil && rec.sess.done.Load() {
		r.errorf("task %d (%s) started after its group's Wait returned", id, lsCatName[rec.cat])
	}
	if rec.cat.viaRL() {
		r.rlStarts.Add(1)
	}
	if rec.key != "" {
		ks := r.keyState(rec.key)
		if n := ks.running.Add(1); n != 1 {
			r.errorf("key %q: %d tasks at once (task %d)", rec.key, n, id)
		}
		defer ks.running.Add(-1)
		ks.mu.Lock()
		if last, ok := ks.last[rec.prod]; ok && last >= rec.pseq {
			r.errorf("key %q: producer %d's task %d (seq %d) ran after its seq %d", rec.key, rec.prod, id, rec.pseq, last)
		}
		ks.last[rec.prod] = rec.pseq
		ks.mu.Unlock()
	}
	if ctx == nil {
		ctx = r.p.Context()
	}
	switch rec.beh {
	case lsErr:
		return errLS
	case lsPanic:
		panic(lsPanicVal{id, rec.cat.layered()})
	case lsGoexit:
		runtime.Goexit()
	case lsSleep:
		time.Sleep(rec.sleep)
	case lsSpawn:
		r.spawn(id, ctx)
	case lsCtx:
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// submit hands record id to its category's entry point and records whether
// it was accepted (Go-like calls; Submit tasks are judged by their Task).
func (r *lsRound) submit(id int) {
	rec := &r.recs[id]
	var err error
	fn := func() { r.body(id, nil) }
	tf := func(ctx context.Context) error { return r.body(id, ctx) }
	var t *crew.Task
	switch rec.cat {
	case lcPoolGo:
		err = r.p.Go(fn)
	case lcPoolSubmit:
		t = r.p.Submit(tf)
	case lcPoolTry:
		if !r.p.TryGo(fn) {
			err = crew.ErrQueueFull
		}
	case lcPoolCtx:
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(500))*time.Microsecond)
		err = r.p.GoContext(ctx, fn)
		cancel()
	case lcK1Go:
		err = r.k1.Go(rec.key, fn)
	case lcK1Sub:
		t = r.k1.Submit(rec.key, tf)
	case lcK2Go:
		err = r.k2.Go(rec.key, fn)
	case lcK2Sub:
		t = r.k2.Submit(rec.key, tf)
	case lcQ1Go:
		err = r.q1.Go(int(rec.pseq), fn)
	case lcQ1Sub:
		t = r.q1.Submit(int(rec.pseq), tf)
	case lcQ2Go:
		err = r.q2.Go(int(rec.pseq), fn)
	case lcQ2Sub:
		t = r.q2.Submit(int(rec.pseq), tf)
	case lcRLGo:
		err = r.rl.Go(fn)
	case lcRLSub:
		t = r.rl.Submit(tf)
	default:
		panic("stress: bad category")
	}
	if t != nil {
		rec.task.Store(t)
		return
	}
	rec.subErr = err
	switch {
	case err == nil:
		rec.status.Store(stAccepted)
	case errors.Is(err, crew.ErrStopped), errors.Is(err, crew.ErrQueueFull), errors.Is(err, context.DeadlineExceeded):
		rec.status.Store(stRefused)
	default:
		rec.status.Store(stRefused)
		r.errorf("%s of task %d: unexpected error %v", lsCatName[rec.cat], id, err)
	}
}

// spawn submits one or two more tasks from inside task parent.
func (r *lsRound) spawn(parent int, ctx context.Context) {
	prec := &r.recs[parent]
	rng := rand.New(rand.NewPCG(r.seed, uint64(parent)))
	n := 1 + rng.IntN(2)
	for i := range n {
		d := prec.depth + 1
		beh := r.pickBeh(rng, d, true)
		x := rng.IntN(100)
		if prec.nested {
			// Inside a group waited for inside a task: only what never
			// waits for room.
			var cat lsCat
			switch x % 3 {
			case 0:
				cat = lcPoolTry
			case 1:
				if r.rl == nil {
					cat = lcPoolTry
				} else {
					cat = lcRLGo
				}
			default:
				if r.k2 == nil {
					cat = lcPoolTry
				} else {
					cat = lcK2Go
				}
			}
			id := r.newRec(cat, beh, d)
			if id < 0 {
				return
			}
			if cat == lcK2Go {
				r.recs[id].key = "k2/p" + strconv.Itoa(parent)
				r.recs[id].prod = int64(-1 - parent)
				r.recs[id].pseq = int64(i)
			}
			r.submit(id)
			continue
		}
		switch {
		case x < 30 && prec.cat != lcGroup && prec.cat != lcNested && prec.cat != lcPoolCtx && prec.cat != lcPoolTry:
			// The same layer (or pool).
			r.spawnSame(parent, i, beh, d, rng)
		case x < 40 && prec.sess != nil && prec.sess.g != nil:
			// The same group.
			id := r.newRec(lcGroup, beh, d)
			if id < 0 {
				return
			}
			r.groupGo(prec.sess, id, "Group.Go from inside its task")
		case x < 50 && d < 2:
			r.nestedGroup(parent, rng, d, ctx)
		case x < 55 && r.b != nil:
			it := int(r.itemNext.Add(1) - 1)
			if it < lsMaxItems {
				// TryAdd runs the flush itself when the pool refuses the
				// flusher (stopped, or full WithNonBlocking); flush does
				// not call Goexit under a task's body (see flush).
				if r.b.TryAdd(it) {
					r.itemAcc[it].Store(true)
				}
			}
		case x == 55 && rng.IntN(8) == 0:
			r.innerStop.Store(true)
			r.note("task %d: Stop from inside", parent)
			r.p.Stop()
		case x == 56 && rng.IntN(8) == 0:
			r.innerStop.Store(true)
			r.note("task %d: Shutdown from inside", parent)
			// On a worker: ErrInsideTask; on a goroutine that helps a
			// group (Wait, Stream.Go, MapErrSeq's caller): a plain Shutdown.
			if err := r.p.Shutdown(context.Background()); err != nil && !errors.Is(err, crew.ErrInsideTask) {
				r.errorf("Shutdown(Background) from inside a task = %v", err)
			}
		default:
			r.spawnOther(parent, i, beh, d, rng)
		}
	}
}

func (r *lsRound) spawnSame(parent, i int, beh lsBeh, d int, rng *rand.Rand) {
	prec := &r.recs[parent]
	cat := prec.cat
	id := r.newRec(cat, beh, d)
	if id < 0 {
		return
	}
	rec := &r.recs[id]
	switch cat {
	case lcK1Go, lcK1Sub, lcK2Go, lcK2Sub:
		if rng.IntN(2) == 0 {
			cat = [2]lsCat{lcK1Go, lcK2Go}[(cat-lcK1Go)/2]
		} else {
			cat = [2]lsCat{lcK1Sub, lcK2Sub}[(cat-lcK1Go)/2]
		}
		rec.cat = cat
		rec.key = prec.key // its own key: busy, so Go only appends
		rec.prod = int64(-1 - parent)
		rec.pseq = int64(i)
	case lcQ1Go, lcQ1Sub, lcQ2Go, lcQ2Sub:
		rec.pseq = int64(rng.IntN(7) - 3)
	}
	r.submit(id)
}

// keyPrefix returns the prefix of the keys of cat's Keyed, k1 or k2.
func keyPrefix(cat lsCat) string {
	if cat >= lcK2Go {
		return "k2/"
	}
	return "k1/"
}

// sharedKey returns one of the three keys of cat's Keyed that producers and
// tasks share.
func sharedKey(cat lsCat, rng *rand.Rand) string {
	return keyPrefix(cat) + string(rune('a'+rng.IntN(3)))
}

func (r *lsRound) spawnOther(parent, i int, beh lsBeh, d int, rng *rand.Rand) {
	cats := []lsCat{lcPoolGo, lcPoolSubmit, lcPoolTry, lcPoolCtx, lcK1Go, lcK1Sub, lcQ1Go, lcQ1Sub}
	if r.rl != nil {
		cats = append(cats, lcK2Go, lcK2Sub, lcQ2Go, lcQ2Sub, lcRLGo, lcRLSub)
	}
	cat := cats[rng.IntN(len(cats))]
	id := r.newRec(cat, beh, d)
	if id < 0 {
		return
	}
	rec := &r.recs[id]
	switch cat {
	case lcK1Go, lcK1Sub, lcK2Go, lcK2Sub:
		// A key of its own, or one the producers use: a first Go from
		// inside a task may then meet a first Go from outside waiting for
		// room.
		if rng.IntN(2) == 0 {
			rec.key = sharedKey(cat, rng)
			rec.behind = true
		} else {
			rec.key = keyPrefix(cat) + "p" + strconv.Itoa(parent)
		}
	case lcQ1Go, lcQ1Sub, lcQ2Go, lcQ2Sub:
		rec.pseq = int64(rng.IntN(7) - 3)
	}
	if rec.key != "" {
		rec.prod = int64(-1 - parent)
		rec.pseq = int64(i)
	}
	r.submit(id)
}

// nestedGroup makes a group inside task parent and waits for it there.
func (r *lsRound) nestedGroup(parent int, rng *rand.Rand, d int, ctx context.Context) {
	s := &lsSess{}
	g := crew.NewGroup(context.Background(), r.p, r.groupOpts(rng)...)
	n := 1 + rng.IntN(3)
	var ids []int
	for range n {
		beh := r.pickBeh(rng, d, false)
		id := r.newRec(lcNested, beh, d)
		if id < 0 {
			break
		}
		r.recs[id].nested = true
		ids = append(ids, id)
		r.submitTo(s, id, "nested Group.Go", func() error {
			return g.Go(func(ctx context.Context) error { return r.body(id, ctx) })
		})
	}
	err := g.Wait()
	s.done.Store(true)
	r.checkGroupRan("nested group", ids, err)
}

func (r *lsRound) groupOpts(rng *rand.Rand) []crew.GroupOption {
	var opts []crew.GroupOption
	if rng.IntN(2) == 0 {
		opts = append(opts, crew.WithLimit(1+rng.IntN(3)))
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, crew.WithAllErrors())
	}
	if rng.IntN(5) == 0 {
		opts = append(opts, crew.WithTaskTimeout(time.Duration(1+rng.IntN(1000))*time.Microsecond))
	}
	return opts
}

// checkGroupRan: a group whose Wait returned nil ran every accepted task
// exactly once; none ran twice anyway.
func (r *lsRound) checkGroupRan(what string, ids []int, err error) {
	for _, id := range ids {
		rec := &r.recs[id]
		runs := rec.runs.Load()
		if runs > 1 {
			r.errorf("%s: task %d ran %d times", what, id, runs)
		}
		if rec.status.Load() == stRefused && runs != 0 {
			r.errorf("%s: task %d refused but ran", what, id)
		}
		if err == nil && rec.status.Load() == stAccepted && runs != 1 {
			r.errorf("%s: Wait returned nil, but accepted task %d (%s) ran %d times", what, id, lsBehName[rec.beh], runs)
		}
		if err == nil && runs == 1 && (rec.beh == lsErr || rec.beh == lsPanic || rec.beh == lsGoexit) {
			r.errorf("%s: Wait returned nil, but task %d ran with %s", what, id, lsBehName[rec.beh])
		}
	}
}

// ---- outside producers ----

func (r *lsRound) produce(prod int, ops int) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(1000+prod)))
	pseq := map[string]int64{}
	for range ops {
		if r.failed.Load() {
			return
		}
		if r.stopping.Load() && rng.IntN(3) == 0 {
			return
		}
		x := rng.IntN(100)
		switch {
		case x < 50:
			cats := []lsCat{lcPoolGo, lcPoolSubmit, lcPoolTry, lcPoolCtx, lcK1Go, lcK1Sub, lcK1Go, lcK1Sub, lcQ1Go, lcQ1Sub}
			if r.rl != nil {
				cats = append(cats, lcK2Go, lcK2Sub, lcK2Go, lcK2Sub, lcQ2Go, lcQ2Sub, lcRLGo, lcRLSub)
			}
			cat := cats[rng.IntN(len(cats))]
			id := r.newRec(cat, r.pickBeh(rng, 0, true), 0)
			if id < 0 {
				return
			}
			rec := &r.recs[id]
			switch cat {
			case lcK1Go, lcK1Sub, lcK2Go, lcK2Sub:
				rec.key = sharedKey(cat, rng)
				rec.prod = int64(prod)
				rec.pseq = pseq[rec.key]
				pseq[rec.key]++
			case lcQ1Go, lcQ1Sub, lcQ2Go, lcQ2Sub:
				rec.pseq = int64(rng.IntN(7) - 3)
			}
			r.submit(id)
		case x < 60:
			r.groupJob(rng)
		case x < 66:
			r.resultJob(rng)
		case x < 74:
			r.streamJob(rng)
		case x < 80:
			r.seqJob(rng)
		case x < 95 && r.b != nil:
			r.batchOp(rng)
		default:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
	}
}

func (r *lsRound) groupCtx(rng *rand.Rand) (context.Context, context.CancelFunc) {
	if rng.IntN(6) == 0 {
		return context.WithTimeout(context.Background(), time.Duration(rng.IntN(500))*time.Microsecond)
	}
	return context.WithCancel(context.Background())
}

func (r *lsRound) groupJob(rng *rand.Rand) {
	ctx, cancel := r.groupCtx(rng)
	defer cancel()
	s := &lsSess{}
	g := crew.NewGroup(ctx, r.p, r.groupOpts(rng)...)
	s.g = g
	n := rng.IntN(8)
	for range n {
		id := r.newRec(lcGroup, r.pickBeh(rng, 0, true), 0)
		if id < 0 {
			break
		}
		r.groupGo(s, id, "Group.Go")
	}
	var err error
	if !r.guardRetry("Group.Wait", func() { err = g.Wait() }) {
		return
	}
	s.done.Store(true)
	s.mu.Lock()
	ids := append([]int(nil), s.ids...)
	s.mu.Unlock()
	if ctx.Err() == nil {
		r.checkGroupRan("Group", ids, err)
	}
}

// groupGo submits task id to s's plain group.
func (r *lsRound) groupGo(s *lsSess, id int, what string) {
	s.add(id)
	r.submitTo(s, id, what, func() error {
		return s.g.Go(func(ctx context.Context) error { return r.body(id, ctx) })
	})
}

// submitTo adds task id to s's tasks, submits it with submit and
// marks it accepted or refused; only a stopping pool may refuse it. It
// reports whether the task was accepted.
func (r *lsRound) submitTo(s *lsSess, id int, what string, submit func() error) bool {
	rec := &r.recs[id]
	rec.sess = s
	if err := submit(); err != nil {
		rec.status.Store(stRefused)
		if !errors.Is(err, crew.ErrStopped) {
			r.errorf("%s: %v", what, err)
		}
		return false
	}
	rec.status.Store(stAccepted)
	return true
}

func (r *lsRound) resultJob(rng *rand.Rand) {
	ctx, cancel := r.groupCtx(rng)
	defer cancel()
	s := &lsSess{}
	g := crew.NewResultGroup[int](ctx, r.p, r.groupOpts(rng)...)
	var ids []int // accepted, in order
	var all []int
	n := rng.IntN(8)
	for range n {
		id := r.newRec(lcGroup, r.pickBeh(rng, 0, true), 0)
		if id < 0 {
			break
		}
		all = append(all, id)
		if r.submitTo(s, id, "ResultGroup.Go", func() error {
			return g.Go(func(ctx context.Context) (int, error) { return id + 1, r.body(id, ctx) })
		}) {
			ids = append(ids, id)
		}
	}
	var res []int
	var err error
	if !r.guardRetry("ResultGroup.Wait", func() { res, err = g.Wait() }) {
		return
	}
	s.done.Store(true)
	if len(res) != len(ids) {
		r.errorf("ResultGroup: %d results for %d accepted tasks", len(res), len(ids))
		return
	}
	for i, id := range ids {
		rec := &r.recs[id]
		want := 0
		if rec.runs.Load() == 1 && rec.beh != lsPanic && rec.beh != lsGoexit {
			want = id + 1
		}
		if res[i] != want {
			r.errorf("ResultGroup: result %d = %d, want %d (task %d, %s, ran %d)", i, res[i], want, id, lsBehName[rec.beh], rec.runs.Load())
		}
	}
	if ctx.Err() == nil {
		r.checkGroupRan("ResultGroup", all, err)
	}
}

func (r *lsRound) streamJob(rng *rand.Rand) {
	ctx, cancel := r.groupCtx(rng)
	defer cancel()
	s := &lsSess{}
	st := crew.NewStream(ctx, r.p, r.groupOpts(rng)...)
	var inCb atomic.Int32
	var cbMu sync.Mutex
	var cbSeqs []int
	var ids []int // accepted, in stream order
	n := rng.IntN(10)
	for range n {
		id := r.newRec(lcGroup, r.pickBeh(rng, 0, true), 0)
		if id < 0 {
			break
		}
		rec := &r.recs[id]
		rec.sess = s
		switch x := rng.IntN(100); {
		case x < 75:
			rec.cbBeh = lsRet
		case x < 88:
			rec.cbBeh = lsErr // no callback
		case x < 97:
			rec.cbBeh = lsPanic
		default:
			rec.cbBeh = lsGoexit
		}
		seq := len(ids)
		task := func(ctx context.Context) func() {
			r.body(id, ctx)
			if rec.cbBeh == lsErr {
				return nil
			}
			return func() {
				if c := inCb.Add(1); c != 1 {
					r.errorf("Stream: %d callbacks at once", c)
				}
				defer inCb.Add(-1)
				if s.done.Load() {
					r.errorf("Stream: callback %d after Wait returned", seq)
				}
				cbMu.Lock()
				cbSeqs = append(cbSeqs, seq)
				cbMu.Unlock()
				switch rec.cbBeh {
				case lsPanic:
					panic("callback")
				case lsGoexit:
					runtime.Goexit()
				}
			}
		}
		var err error
		if !r.guard("Stream.Go", func() { err = st.Go(task) }) {
			if r.failed.Load() {
				return
			}
			rec.status.Store(stRefused) // Go ended before it pushed the task
			continue
		}
		if err != nil {
			rec.status.Store(stRefused)
			if !errors.Is(err, crew.ErrStopped) && ctx.Err() == nil && err != errLS && !errors.Is(err, crew.ErrGoexit) &&
				!(r.parentDone.Load() && errors.Is(err, context.Canceled)) {
				var pe *crew.PanicError
				if !errors.As(err, &pe) {
					r.errorf("Stream.Go: %v", err)
				}
			}
			continue
		}
		rec.status.Store(stAccepted)
		ids = append(ids, id)
	}
	var err error
	if !r.guardRetry("Stream.Wait", func() { err = st.Wait() }) {
		return
	}
	s.done.Store(true)
	_ = err
	var want []int
	for i, id := range ids {
		rec := &r.recs[id]
		if rec.runs.Load() != 1 || rec.beh == lsPanic || rec.beh == lsGoexit {
			break
		}
		if rec.cbBeh == lsErr {
			continue
		}
		want = append(want, i)
		if rec.cbBeh == lsPanic || rec.cbBeh == lsGoexit {
			break
		}
	}
	cbMu.Lock()
	got := append([]int(nil), cbSeqs...)
	cbMu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		var desc []string
		for i, id := range ids {
			rec := &r.recs[id]
			desc = append(desc, fmt.Sprintf("%d:%s/ran%d/cb-%s", i, lsBehName[rec.beh], rec.runs.Load(), lsBehName[rec.cbBeh]))
		}
		r.errorf("Stream: callbacks ran for %v, want %v; tasks %v; Wait = %v", got, want, desc, err)
	}
}

func (r *lsRound) seqJob(rng *rand.Rand) {
	ctx, cancel := r.groupCtx(rng)
	defer cancel()
	n := rng.IntN(10)
	panicAt := -1
	if rng.IntN(6) == 0 {
		panicAt = rng.IntN(n + 1)
	}
	s := &lsSess{}
	base := -1
	var ids []int
	for range n {
		id := r.newRec(lcGroup, r.pickBeh(rng, 0, true), 0)
		if id < 0 {
			return
		}
		r.recs[id].sess = s
		r.recs[id].status.Store(stRefused) // until pulled
		ids = append(ids, id)
		if base < 0 {
			base = id
		}
	}
	var pulled atomic.Int64
	seq := iter.Seq[int](func(yield func(int) bool) {
		for i := range n {
			if i == panicAt {
				panic("stress: iterator")
			}
			pulled.Add(1)
			r.recs[ids[i]].status.Store(stAccepted)
			if !yield(i) {
				return
			}
		}
		if n == panicAt {
			panic("stress: iterator")
		}
	})
	mapErr := rng.IntN(2) == 0
	var out []int
	var err error
	var pv any
	opts := r.groupOpts(rng)
	// Not retried: a call run on this goroutine may end it (Goexit).
	ok := r.guard("MapErrSeq/ForEachSeq", func() {
		defer func() { pv = recover() }()
		if mapErr {
			out, err = crew.MapErrSeq(ctx, r.p, seq, func(ctx context.Context, i int) (int, error) {
				return 2*i + 1, r.body(ids[i], ctx)
			}, opts...)
		} else {
			err = crew.ForEachSeq(ctx, r.p, seq, func(ctx context.Context, i int) error {
				return r.body(ids[i], ctx)
			}, opts...)
		}
	})
	if !ok {
		return
	}
	s.done.Store(true)
	if pv != nil {
		if pv != "stress: iterator" {
			r.errorf("MapErrSeq/ForEachSeq panicked with %v", pv)
		}
		return
	}
	if mapErr {
		if len(out) > n {
			r.errorf("MapErrSeq: %d results for %d values", len(out), n)
			return
		}
		for i := range out {
			rec := &r.recs[ids[i]]
			want := 0
			if rec.runs.Load() == 1 && rec.beh != lsPanic && rec.beh != lsGoexit {
				want = 2*i + 1
			}
			if out[i] != want {
				r.errorf("MapErrSeq: out[%d] = %d, want %d (%s, ran %d)", i, out[i], want, lsBehName[rec.beh], rec.runs.Load())
			}
		}
		for i := len(out); i < n; i++ {
			if r.recs[ids[i]].runs.Load() != 0 {
				r.errorf("MapErrSeq: value %d ran but has no result (%d results)", i, len(out))
			}
		}
		if err == nil && ctx.Err() == nil && len(out) != n {
			r.errorf("MapErrSeq returned nil with %d results for %d values", len(out), n)
		}
	}
	if ctx.Err() == nil && panicAt < 0 {
		r.checkGroupRan("MapErrSeq/ForEachSeq", ids, err)
	}
}

// ---- batcher ----

func (r *lsRound) flush(_ context.Context, items []int) error {
	c := r.flushCalls.Add(1)
	rng := rand.New(rand.NewPCG(r.seed, uint64(c)))
	x := rng.IntN(100)
	switch {
	case x < 15:
		return errLS
	case x < 22:
		panic("stress: flush")
	case x < 24:
		if lsUnderTaskBody() {
			return errLS // a task's goroutine: its Submit would report ErrGoexit
		}
		runtime.Goexit()
	case x < 40:
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	case x < 50:
		cat := []lsCat{lcPoolGo, lcPoolTry, lcPoolSubmit}[rng.IntN(3)]
		if id := r.newRec(cat, r.pickBeh(rng, 1, true), 1); id >= 0 {
			r.submit(id)
		}
	}
	for _, it := range items {
		r.itemFlushed[it].Add(1)
	}
	r.signalProgress()
	return nil
}

func (r *lsRound) signalProgress() {
	select {
	case r.bProgress <- struct{}{}:
	default:
	}
}

// lsUnderTaskBody reports whether the calling goroutine runs a task's body
// (a flush that TryAdd ran itself, from inside a task).
func lsUnderTaskBody() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "lsRound).body")
}

func (r *lsRound) onBatchError(_ context.Context, items []int, err error) {
	for _, it := range items {
		r.itemHanded[it].Add(1)
	}
	r.signalProgress()
}

func (r *lsRound) batchOp(rng *rand.Rand) {
	switch x := rng.IntN(100); {
	case x < 50:
		it := int(r.itemNext.Add(1) - 1)
		if it >= lsMaxItems {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
		defer cancel()
		var err error
		if !r.guard("Batcher.Add", func() { err = r.b.Add(ctx, it) }) {
			// A flush run here (the pool stopped) called Goexit: that
			// happens only after the item was accepted.
			if !r.failed.Load() {
				r.itemAcc[it].Store(true)
			}
			return
		}
		switch {
		case err == nil:
			r.itemAcc[it].Store(true)
		case err == batch.ErrClosed, err == batch.ErrFull, errors.Is(err, context.DeadlineExceeded):
		default:
			r.errorf("Batcher.Add: %v", err)
		}
	case x < 80:
		it := int(r.itemNext.Add(1) - 1)
		if it >= lsMaxItems {
			return
		}
		var ok bool
		if !r.guard("Batcher.TryAdd", func() { ok = r.b.TryAdd(it) }) {
			ok = !r.failed.Load() // see Add
		}
		if ok {
			r.itemAcc[it].Store(true)
		}
	case x < 95:
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
		defer cancel()
		var err error
		if r.guard("Batcher.Flush", func() { err = r.b.Flush(ctx) }) {
			if err != nil && err != batch.ErrClosed && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errLS) &&
				!errors.Is(err, crew.ErrGoexit) && !isPanicErr(err) {
				r.errorf("Batcher.Flush: %v", err)
			}
		}
	default:
		r.closeBatcher(time.Duration(rng.IntN(3000)) * time.Microsecond)
	}
}

func isPanicErr(err error) bool {
	var pe *crew.PanicError
	return errors.As(err, &pe)
}

// closeBatcher closes the batcher (d == 0: without a deadline).
func (r *lsRound) closeBatcher(d time.Duration) {
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	// One Close at a time: a second returns ErrClosed at once, and the
	// caller must know that the Batcher is closed (or gave up) when this
	// returns.
	r.bCloseMu.Lock()
	defer r.bCloseMu.Unlock()
	var err error
	if !r.guardRetry("Batcher.Close", func() { err = r.b.Close(ctx) }) {
		return
	}
	r.bClosed.Store(true)
	if errors.Is(err, context.DeadlineExceeded) {
		r.bGaveUp.Store(true)
	}
	if err != nil && err != batch.ErrClosed && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errLS) &&
		!errors.Is(err, crew.ErrGoexit) && !isPanicErr(err) {
		r.errorf("Batcher.Close: %v", err)
	}
}

// awaitItems waits until each of the first n items that was accepted has
// been flushed or handed over: a Close that gave up does not wait for the
// flush calls under way, and once the pool has stopped they may run on the
// Batcher's own goroutines, which nothing else waits for.
func (r *lsRound) awaitItems(n int) {
	deadline := time.After(lsDeadline)
	for it := 0; it < n; {
		if !r.itemAcc[it].Load() || r.itemFlushed[it].Load()+r.itemHanded[it].Load() > 0 {
			it++
			continue
		}
		select {
		case <-r.bProgress:
		case <-deadline:
			r.hang(fmt.Sprintf("batch item %d (after Close gave up)", it))
			return
		}
	}
}

// ---- the round ----

type lsCounts struct {
	rounds, recs, accepted, ran, dropped, refused, items, flushCalls int64
	modes                                                            [10]int64
}

func lsRunRound(t *testing.T, seed uint64, c *lsCounts) {
	rng := rand.New(rand.NewPCG(seed, 99))
	r := &lsRound{t: t, seed: seed, recs: make([]lsRec, lsMaxRecs), keys: map[string]*lsKey{}}
	r.size = 1 + rng.IntN(4)
	var opts []crew.Option
	if rng.IntN(2) == 0 {
		r.bounded = true
		r.qsize = rng.IntN(6)
		opts = append(opts, crew.WithQueueSize(r.qsize))
		if rng.IntN(2) == 0 {
			r.nonBlock = true
			opts = append(opts, crew.WithNonBlocking())
		}
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, crew.WithIdleTimeout(time.Duration(50+rng.IntN(1000))*time.Microsecond))
	}
	r.hpanic = rng.IntN(3) == 0
	opts = append(opts, crew.WithPanicHandler(func(pe *crew.PanicError) {
		if v, ok := pe.Value.(lsPanicVal); ok && r.hpanic && v.layered && v.id%2 == 0 {
			panic(pe) // comes back to the handler as a *PanicError value
		}
	}))
	if rng.IntN(4) == 0 {
		var parent context.Context
		parent, r.parentCancel = context.WithCancel(context.Background())
		defer r.parentCancel()
		opts = append(opts, crew.WithContext(parent))
	}
	r.p = crew.New(r.size, opts...)
	if rng.IntN(4) == 0 {
		r.keyRate = true
		r.k1 = crew.NewKeyed[string](r.p, crew.WithKeyRate(crew.Rate{Limit: 1, Per: time.Duration(20+rng.IntN(200)) * time.Microsecond, Burst: rng.IntN(3)}))
	} else {
		r.k1 = crew.NewKeyed[string](r.p)
	}
	if rng.IntN(2) == 0 {
		r.q1 = crew.NewPriority(r.p, crew.WithAging(0))
	} else {
		r.q1 = crew.NewPriority(r.p)
	}
	if rng.IntN(3) != 0 {
		r.rate = crew.Rate{Limit: 1, Per: time.Duration(30+rng.IntN(300)) * time.Microsecond, Burst: rng.IntN(5)}
		r.rlMade = time.Now()
		r.rl = crew.NewRateLimited(r.p, r.rate)
		r.k2 = crew.NewKeyed[string](r.rl)
		r.q2 = crew.NewPriority(r.rl)
	}
	if rng.IntN(2) == 0 {
		r.itemAcc = make([]atomic.Bool, lsMaxItems)
		r.itemFlushed = make([]atomic.Int32, lsMaxItems)
		r.itemHanded = make([]atomic.Int32, lsMaxItems)
		r.bProgress = make(chan struct{}, 1)
		bopts := []batch.Option{
			batch.WithPool(r.p),
			batch.WithMaxItems(1 + rng.IntN(5)),
			batch.WithMaxWait(time.Duration(100+rng.IntN(2000)) * time.Microsecond),
			batch.WithMaxConcurrentFlushes(1 + rng.IntN(3)),
			batch.WithErrorHandler(r.onBatchError),
		}
		if rng.IntN(2) == 0 {
			bopts = append(bopts, batch.WithMaxPending(1+rng.IntN(12), batch.FullPolicy(rng.IntN(3))))
		}
		if rng.IntN(3) == 0 {
			bopts = append(bopts, batch.WithRetry(crew.Retry{Attempts: 1 + rng.IntN(3), Delay: time.Duration(rng.IntN(100)) * time.Microsecond, MaxDelay: 200 * time.Microsecond}))
		}
		r.b = batch.New(r.flush, bopts...)
	}
	mode := rng.IntN(10)
	r.graceful = mode <= 1
	r.note("seed %d: size %d bounded %v q %d nonblocking %v hpanic %v rl %v batcher %v keyrate %v parent %v mode %d",
		seed, r.size, r.bounded, r.qsize, r.nonBlock, r.hpanic, r.rl != nil, r.b != nil, r.keyRate, r.parentCancel != nil, mode)

	// Producers.
	var wg sync.WaitGroup
	nprod, maxOps := 1+rng.IntN(3), 30
	if rng.IntN(4) == 0 { // a bigger round
		nprod, maxOps = 2+rng.IntN(3), 120
	}
	for i := range nprod {
		ops := 5 + rng.IntN(maxOps)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(i, ops)
		}()
	}
	// Chaos: Resize, Stats, Wait.
	quit := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		crng := rand.New(rand.NewPCG(seed, 7))
		for {
			select {
			case <-quit:
				return
			default:
			}
			switch crng.IntN(10) {
			case 0, 1:
				n := 1 + crng.IntN(4)
				if err := r.p.Resize(n); err != nil && !(err == crew.ErrStopped && (r.stopping.Load() || r.innerStop.Load())) {
					r.errorf("Resize: %v", err)
				}
			case 2:
				if r.parentCancel != nil && crng.IntN(4) == 0 {
					r.parentDone.Store(true)
					r.parentCancel() // cancels the pool's context, not the pool
				}
				r.p.Wait()
			case 3:
				r.k1.Wait()
			case 4:
				r.q1.Wait()
			case 5:
				if r.rl != nil {
					switch crng.IntN(3) {
					case 0:
						r.rl.Wait()
					case 1:
						r.k2.Wait()
					default:
						r.q2.Wait()
					}
				}
			default:
				s := r.p.Stats()
				if s.Submitted < s.Completed+s.Dropped {
					r.errorf("stats while running: %+v", s)
				}
				_ = r.k1.Stats()
				_ = r.q1.Stats()
				if r.rl != nil {
					_ = r.rl.Stats()
				}
				if r.b != nil {
					_ = r.b.Stats()
				}
			}
			time.Sleep(time.Duration(crng.IntN(300)) * time.Microsecond)
		}
	}()

	// Stop the pool.
	var shutErrs []error
	var shutMu sync.Mutex
	shutdown := func(ctx context.Context) {
		var err error
		if !r.guard("Shutdown", func() { err = r.p.Shutdown(ctx) }) {
			return
		}
		shutMu.Lock()
		shutErrs = append(shutErrs, err)
		shutMu.Unlock()
		var se *crew.ShutdownError
		if err != nil && !errors.As(err, &se) {
			r.errorf("Shutdown = %v", err)
		}
	}
	stop := func() { r.guard("Stop", r.p.Stop) }
	usesShutdown := mode >= 5
	if mode <= 1 {
		// Graceful: let everything finish, then Stop.
		if !r.guard("producers", wg.Wait) {
			r.finish(quit, &side)
			return
		}
		if r.b != nil {
			r.closeBatcher(0)
		}
		// Tasks of one layer may submit to another: wait until all are
		// idle at once.
		for i := 0; ; i++ {
			if r.rl != nil {
				r.guard("rl.Wait", r.rl.Wait)
				r.guard("k2.Wait", r.k2.Wait)
				r.guard("q2.Wait", r.q2.Wait)
			}
			r.guard("k1.Wait", r.k1.Wait)
			r.guard("q1.Wait", r.q1.Wait)
			r.guard("pool.Wait", r.p.Wait)
			idle := r.k1.Stats().Unfinished == 0 && r.q1.Stats().Unfinished == 0
			if r.rl != nil {
				idle = idle && r.rl.Stats().Unfinished == 0 && r.k2.Stats().Unfinished == 0 && r.q2.Stats().Unfinished == 0
			}
			if s := r.p.Stats(); s.Queued != 0 || s.Running != 0 {
				idle = false
			}
			if idle || r.failed.Load() {
				break
			}
			if i == 100 {
				r.errorf("graceful: never idle")
				break
			}
		}
		r.stopping.Store(true)
		stop()
	} else {
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond) // let the round run a while
		r.stopping.Store(true)
		switch mode {
		case 2, 3, 4:
			stop()
		case 5, 6:
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(2000))*time.Microsecond)
			shutdown(ctx)
			cancel()
		case 7:
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			shutdown(ctx)
		case 8:
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1000))*time.Microsecond)
			var sw sync.WaitGroup
			sw.Add(2)
			go func() { defer sw.Done(); shutdown(ctx) }()
			go func() { defer sw.Done(); stop() }()
			r.guard("Stop and Shutdown", sw.Wait)
			cancel()
		case 9:
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			shutdown(ctx)
			stop()
		}
		if !r.guard("producers", wg.Wait) {
			r.finish(quit, &side)
			return
		}
	}
	c.modes[mode]++
	// Whatever the producers and tasks left: stop again (a Stop from inside
	// a task does not wait), close the batcher.
	stop()
	if r.b != nil && !r.bClosed.Load() {
		r.closeBatcher(0)
	}
	close(quit)
	r.guard("chaos goroutine", side.Wait)
	if r.failed.Load() {
		r.finish(nil, nil)
		return
	}
	r.check(mode, usesShutdown, shutErrs, c)
	r.finish(nil, nil)
}

// finish stops the chaos goroutine if quit is not nil, and logs the round
// if it failed. (Goroutines the round leaves behind, such as a flush call
// that a Close gave up on, end on their own; leak.Check waits for them.)
func (r *lsRound) finish(quit chan struct{}, side *sync.WaitGroup) {
	if quit != nil {
		close(quit)
		r.guard("chaos goroutine", side.Wait)
	}
	if r.failed.Load() {
		r.logMu.Lock()
		r.t.Logf("round log:\n%v", r.log)
		r.logMu.Unlock()
	}
}

func (r *lsRound) check(mode int, usesShutdown bool, shutErrs []error, c *lsCounts) {
	// The layers come to rest.
	r.guard("k1.Wait after stop", r.k1.Wait)
	r.guard("q1.Wait after stop", r.q1.Wait)
	if r.rl != nil {
		r.guard("k2.Wait after stop", r.k2.Wait)
		r.guard("q2.Wait after stop", r.q2.Wait)
		r.guard("rl.Wait after stop", r.rl.Wait)
	}
	ps := r.p.Stats()
	if ps.Workers != 0 || ps.Queued != 0 || ps.Running != 0 || ps.Submitted != ps.Completed+ps.Dropped {
		r.errorf("pool stats after stop: %+v", ps)
	}
	for _, err := range shutErrs {
		var se *crew.ShutdownError
		if errors.As(err, &se) && uint64(se.Dropped) > ps.Dropped {
			r.errorf("Shutdown reported %d dropped, Stats %d", se.Dropped, ps.Dropped)
		}
	}
	n := min(int(r.next.Load()), lsMaxRecs)
	type acct struct{ accepted, ran, notRan int64 }
	var per [lcCount]acct
	var k1Behind int64 // k1 tasks not run that may have queued behind a refused first Go
	for id := range n {
		rec := &r.recs[id]
		runs := rec.runs.Load()
		if runs > 1 {
			r.errorf("task %d (%s) ran %d times", id, lsCatName[rec.cat], runs)
		}
		accepted := false
		if rec.cat.submit() {
			t := rec.task.Load()
			if t == nil {
				// Submit itself never returned: the producer was ended by
				// Goexit? Not possible for Submit; report.
				r.errorf("task %d (%s): no Task", id, lsCatName[rec.cat])
				continue
			}
			select {
			case <-t.Done():
			case <-time.After(lsDeadline):
				r.hang(fmt.Sprintf("Task.Wait of task %d (%s)", id, lsCatName[rec.cat]))
				return
			}
			err := t.Wait()
			switch {
			case errors.Is(err, crew.ErrStopped), errors.Is(err, crew.ErrQueueFull):
				if runs != 0 {
					r.errorf("task %d (%s) refused with %v, but ran", id, lsCatName[rec.cat], err)
				}
			case err == crew.ErrDropped:
				accepted = true
				if runs != 0 {
					r.errorf("task %d (%s) dropped, but ran (%s)", id, lsCatName[rec.cat], lsBehName[rec.beh])
				}
			default:
				accepted = true
				if runs != 1 {
					r.errorf("task %d (%s) completed with %v, but ran %d times", id, lsCatName[rec.cat], err, runs)
					break
				}
				var want string
				switch rec.beh {
				case lsErr:
					if err != errLS {
						want = "errLS"
					}
				case lsPanic:
					var pe *crew.PanicError
					if !errors.As(err, &pe) {
						want = "a *PanicError"
					} else if v, ok := pe.Value.(lsPanicVal); !ok || v.id != id {
						want = "its own panic"
					}
				case lsGoexit:
					if err != crew.ErrGoexit {
						want = "ErrGoexit"
					}
				default:
					if err != nil {
						want = "nil"
					}
				}
				if want != "" {
					r.errorf("task %d (%s, %s) completed with %v, want %s", id, lsCatName[rec.cat], lsBehName[rec.beh], err, want)
				}
			}
		} else {
			st := rec.status.Load()
			switch st {
			case stAccepted:
				accepted = true
			case stRefused:
				if runs != 0 {
					r.errorf("task %d (%s) refused (%v) but ran", id, lsCatName[rec.cat], rec.subErr)
				}
			case stPending:
				if runs != 0 && rec.cat != lcGroup {
					r.errorf("task %d (%s) ran, its submission never returned", id, lsCatName[rec.cat])
				}
			}
		}
		if accepted {
			a := &per[rec.cat]
			a.accepted++
			if runs == 1 {
				a.ran++
			} else {
				a.notRan++
				if rec.behind && (rec.cat == lcK1Go || rec.cat == lcK1Sub) {
					k1Behind++
				}
			}
			c.accepted++
			c.ran += int64(runs)
		} else {
			c.refused++
		}
	}
	c.recs += int64(n)
	sum := func(cs ...lsCat) (a acct) {
		for _, cat := range cs {
			a.accepted += per[cat].accepted
			a.ran += per[cat].ran
			a.notRan += per[cat].notRan
		}
		return a
	}
	layerCheck := func(name string, s crew.LayerStats, a acct, exact bool) {
		if s.Unfinished != 0 || s.Waiting != 0 || s.Keys != 0 && !(name == "k1" && r.keyRate) {
			r.errorf("%s stats after stop and Wait: %+v", name, s)
		}
		if exact && uint64(a.notRan) != s.Dropped || !exact && uint64(a.notRan) > s.Dropped {
			r.errorf("%s: %d accepted, %d ran, %d not run; Stats.Dropped = %d", name, a.accepted, a.ran, a.notRan, s.Dropped)
		}
		c.dropped += int64(s.Dropped)
	}
	k1 := sum(lcK1Go, lcK1Sub)
	layerCheck("k1", r.k1.Stats(), k1, true)
	layerCheck("q1", r.q1.Stats(), sum(lcQ1Go, lcQ1Sub), true)
	if r.rl != nil {
		layerCheck("k2", r.k2.Stats(), sum(lcK2Go, lcK2Sub), true)
		layerCheck("q2", r.q2.Stats(), sum(lcQ2Go, lcQ2Sub), true)
		layerCheck("rl", r.rl.Stats(), sum(lcRLGo, lcRLSub), false)
		e := int64(r.rate.Per) / int64(r.rate.Limit)
		burst := int64(max(1, r.rate.Burst))
		limit := burst + int64(time.Since(r.rlMade))/e + 1
		if got := r.rlStarts.Load(); got > limit {
			r.errorf("rl: %d starts, at most %d allowed by %+v", got, limit, r.rate)
		}
	}
	pool := sum(lcPoolGo, lcPoolSubmit, lcPoolTry, lcPoolCtx)
	if uint64(pool.notRan) > ps.Dropped {
		r.errorf("pool: %d accepted tasks did not run, Stats.Dropped = %d", pool.notRan, ps.Dropped)
	}
	if !usesShutdown {
		// Stop runs everything the pool and a Keyed on it accepted.
		if ps.Dropped != 0 || pool.notRan != 0 {
			r.errorf("Stop only: pool dropped %d, %d plain tasks did not run", ps.Dropped, pool.notRan)
		}
		// Except with WithKeyRate (tasks waiting for a token are dropped)
		// and tasks queued from inside a task behind a first Go of their
		// key that Stop refused.
		if k1.notRan > k1Behind && !r.keyRate {
			r.errorf("Stop only: %d of k1's accepted tasks did not run, %d of them from inside a task on a shared key (Stats %+v)", k1.notRan, k1Behind, r.k1.Stats())
		}
	}
	if mode <= 1 && !r.innerStop.Load() {
		// Everything was waited for before Stop: nothing dropped anywhere.
		for cat := range lcCount {
			if cat == lcGroup || cat == lcNested {
				continue
			}
			if a := per[cat]; a.notRan != 0 {
				r.errorf("graceful: %d accepted %s tasks did not run", a.notRan, lsCatName[cat])
			}
		}
	}
	// The batcher.
	if r.b != nil {
		ni := min(int(r.itemNext.Load()), lsMaxItems)
		if r.bGaveUp.Load() {
			r.awaitItems(ni)
		}
		bs := r.b.Stats()
		var acc uint64
		for it := range ni {
			f, h := r.itemFlushed[it].Load(), r.itemHanded[it].Load()
			if r.itemAcc[it].Load() {
				acc++
				if f+h != 1 {
					r.errorf("batch item %d: flushed %d times, handed over %d times", it, f, h)
				}
			} else if f+h != 0 {
				r.errorf("batch item %d not accepted, but flushed %d, handed %d", it, f, h)
			}
		}
		// After a Close that gave up, the Batcher may still be counting
		// the batches whose flush calls just returned.
		settled := !r.bGaveUp.Load()
		if bs.Added != acc || settled && (bs.Pending != 0 || bs.InFlight != 0 || bs.Flushed+bs.Failed+bs.Dropped != bs.Added) {
			r.errorf("batcher stats after Close: %+v (accepted %d)", bs, acc)
		}
		c.items += int64(acc)
		c.flushCalls += r.flushCalls.Load()
	}
	c.rounds++
}

func TestStressLayers(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	seed, same := stress.Seed(t)
	var c lsCounts
	start := time.Now()
	for i := uint64(0); i == 0 || time.Since(start) < budget; i++ {
		if same {
			lsRunRound(t, seed, &c)
		} else {
			lsRunRound(t, seed+i, &c)
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d rounds in %v: %d tasks made, %d accepted, %d ran, %d dropped by layers, %d refused; %d batch items, %d flush calls; rounds per mode %v",
		c.rounds, time.Since(start).Round(time.Millisecond), c.recs, c.accepted, c.ran, c.dropped, c.refused, c.items, c.flushCalls, c.modes)
}
