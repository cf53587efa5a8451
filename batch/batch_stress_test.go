package batch_test

import (
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"runtime"
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

// TestStressBatcher runs randomized rounds of one to three Batchers, most
// of them WithPool on one shared pool, each round drawing its parameters
// from its seed: pool size, bounded or non-blocking queue, idle timeout;
// batch size, byte limit, wait, concurrent flushes, pending bound with each
// FullPolicy, retries. Producers Add (with deadlines), TryAdd, Flush and
// Close (with and without a deadline) and submit tasks to the pool and to
// a Keyed on it (on keys the tasks share, or of their own), whose tasks add
// items from inside and submit more. Flush functions fail, panic, call
// runtime.Goexit, block briefly, submit tasks or add to another Batcher;
// error handlers panic or call Goexit. Beside them a goroutine resizes the
// pool (growing and shrinking) and reads Stats. The shared pool is stopped
// while the producers run (Stop, or Shutdown with a short deadline), or
// after the Batchers are closed (Shutdown), or the Batchers are closed
// while the producers run and the pool stopped after.
//
// Checked: every item accepted is flushed or handed to the error handler
// exactly once, by its own Batcher, and no item refused is; no flush call
// begins after its Batcher's Close returned; a Flush returns only once the
// items its caller added before are done (but for a DropOldest hand-over
// still on its way), a Close once all are; each Batcher's Stats match the
// test's counts, Latency.Count its flush calls; and every call returns (a
// hang fails the round with the goroutines' stacks).
//
// Like the stress tests of package crew it runs for about 2 s, 30 s with
// CREW_STRESS=long, and not at all with -short or CREW_STRESS=off. A
// failure names its round's seed; CREW_STRESS_SEED=n runs every round with
// seed n (the same parameters and choices; the timing differs). Names
// start with bs (Batcher stress).
//
//	go test -race -run TestStressBatcher -count=1 -v ./batch
//	CREW_STRESS=long CREW_STRESS_SEED=1234 go test -race -run TestStressBatcher -count=1 -v ./batch

const (
	bsItems    = 1 << 12
	bsDeadline = 15 * time.Second
)

var errBS = errors.New("stress: flush error")

type bsBatcher struct {
	b        *batch.Batcher[int]
	idx      int
	shared   bool         // WithPool(r.p)
	calls    atomic.Int64 // flush calls
	closedOK atomic.Bool  // Close returned without giving up
	gaveUp   atomic.Bool  // Close gave up: flush calls may still run
	closeMu  sync.Mutex   // one Close at a time (see closeCall)
}

type bsLate struct {
	it, b int
	err   error
}

type bsRound struct {
	t       *testing.T
	seed    uint64
	p       *crew.Pool
	k       *crew.Keyed[int]
	bs      []*bsBatcher
	bounded bool
	nonBl   bool

	itemNext atomic.Int64
	owner    []atomic.Int32 // batcher index + 1 of an accepted item, 0 if none
	flushed  []atomic.Int32
	handed   []atomic.Int32
	dropped  []atomic.Int32 // handed with batch.ErrDropped

	lateMu sync.Mutex
	late   []bsLate

	progress chan struct{} // signalled when an item is flushed or handed over

	failed atomic.Bool
	dumpMu sync.Mutex
	dumped bool
	stats  struct{ adds, flushes, closes, inner atomic.Int64 }
}

func (r *bsRound) errorf(format string, args ...any) {
	r.failed.Store(true)
	r.t.Errorf("seed %d: "+format, append([]any{r.seed}, args...)...)
}

func (r *bsRound) guard(what string, f func()) bool {
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
	case <-time.After(bsDeadline):
		r.dumpMu.Lock()
		first := !r.dumped
		r.dumped = true
		r.dumpMu.Unlock()
		if first {
			r.errorf("%s did not return within %v; goroutines:\n\n%s", what, bsDeadline, leak.Dump())
		} else {
			r.errorf("%s did not return within %v", what, bsDeadline)
		}
		return false
	}
}

// underTask reports whether the caller runs inside one of the test's own
// pool tasks (a flush that TryAdd ran itself from a task): Goexit there
// would end that task, which the test does not expect.
func underTask() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "bsRound).task")
}

func (r *bsRound) flushFn(sb *bsBatcher) func(context.Context, []int) error {
	return func(ctx context.Context, items []int) error {
		c := sb.calls.Add(1)
		if sb.closedOK.Load() {
			r.errorf("batcher %d: flush call after Close returned", sb.idx)
		}
		for _, it := range items {
			if o := r.owner[it].Load(); o != 0 && int(o) != sb.idx+1 {
				r.errorf("batcher %d flushes item %d of batcher %d", sb.idx, it, o-1)
			}
		}
		rng := rand.New(rand.NewPCG(r.seed, uint64(sb.idx)<<32|uint64(c)))
		x := rng.IntN(100)
		switch {
		case x < 15:
			return errBS
		case x < 22:
			panic("stress: flush")
		case x < 25:
			if !underTask() {
				runtime.Goexit()
			}
			return errBS
		case x < 40:
			t := time.NewTimer(time.Duration(rng.IntN(400)) * time.Microsecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		case x < 50:
			r.submitTask(rng, 1)
		case x < 55 && len(r.bs) > 1:
			// Add to another batcher from inside a flush, never waiting.
			other := r.bs[rng.IntN(len(r.bs))]
			if other != sb {
				r.tryAdd(other)
			}
		}
		for _, it := range items {
			r.flushed[it].Add(1)
		}
		r.signalProgress()
		return nil
	}
}

func (r *bsRound) signalProgress() {
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

func (r *bsRound) onError(sb *bsBatcher) func(context.Context, []int, error) {
	var n atomic.Int64
	return func(_ context.Context, items []int, err error) {
		for _, it := range items {
			r.handed[it].Add(1)
			if errors.Is(err, batch.ErrDropped) {
				r.dropped[it].Add(1)
			}
		}
		r.signalProgress()
		c := n.Add(1)
		switch (uint64(c)*2654435761 ^ r.seed) % 20 {
		case 0:
			panic("stress: handler") // logged by the Batcher
		case 1:
			if !underTask() {
				runtime.Goexit()
			}
		}
	}
}

// tryAdd adds a new item with TryAdd; the flush it may run itself can
// call Goexit only after the item was accepted.
func (r *bsRound) tryAdd(sb *bsBatcher) {
	it := int(r.itemNext.Add(1) - 1)
	if it >= bsItems {
		return
	}
	r.owner[it].Store(int32(sb.idx + 1)) // tentatively; cleared if refused
	ok := false
	defer func() {
		if !ok {
			r.owner[it].Store(0)
		}
	}()
	returned := false
	defer func() {
		if !returned {
			ok = true // Goexit in a flush or handler run here: after acceptance
		}
	}()
	ok = sb.b.TryAdd(it)
	returned = true
	r.stats.adds.Add(1)
}

func (r *bsRound) add(sb *bsBatcher, rng *rand.Rand) (int, bool) {
	it := int(r.itemNext.Add(1) - 1)
	if it >= bsItems {
		return -1, false
	}
	r.owner[it].Store(int32(sb.idx + 1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
	defer cancel()
	var err error
	if !r.guard("Add", func() { err = sb.b.Add(ctx, it) }) {
		if r.failed.Load() {
			return -1, false
		}
		return it, true // Goexit in a flush or DropOldest hand-over run by Add: accepted
	}
	switch {
	case err == nil:
		r.stats.adds.Add(1)
		return it, true
	case err == batch.ErrClosed, err == batch.ErrFull, errors.Is(err, context.DeadlineExceeded):
	default:
		r.errorf("Add = %v", err)
	}
	r.owner[it].Store(0)
	return -1, false
}

// task is what the test's pool and Keyed tasks run.
func (r *bsRound) task(rng *rand.Rand, depth int) {
	switch x := rng.IntN(10); {
	case x < 5 && len(r.bs) > 0:
		r.tryAdd(r.bs[rng.IntN(len(r.bs))])
	case x < 7 && depth < 2:
		r.submitTask(rng, depth+1)
	case x < 9:
		time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
	}
}

func (r *bsRound) submitTask(rng *rand.Rand, depth int) {
	seed := rng.Uint64()
	f := func() { r.task(rand.New(rand.NewPCG(seed, 1)), depth) }
	r.stats.inner.Add(1)
	switch rng.IntN(3) {
	case 0:
		r.p.TryGo(f)
	case 1:
		r.p.Go(f)
	default:
		// Half on four keys shared by producers and tasks, so that a
		// first Go from inside a task meets one from outside; half on a
		// key of their own.
		key := int(seed >> 1)
		if seed&1 == 0 {
			key = int(seed>>1) % 4
		}
		r.k.Go(key, f)
	}
}

func (r *bsRound) flushCall(sb *bsBatcher, rng *rand.Rand, mine []int) {
	var ctx context.Context = context.Background()
	if rng.IntN(2) == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
		defer cancel()
	}
	var err error
	if !r.guard("Flush", func() { err = sb.b.Flush(ctx) }) {
		return
	}
	r.stats.flushes.Add(1)
	switch {
	case err == batch.ErrClosed, err == context.DeadlineExceeded:
		return
	case err == nil, errors.Is(err, errBS), errors.Is(err, crew.ErrGoexit), errors.Is(err, context.Canceled),
		errors.Is(err, batch.ErrClosed): // a batch that failed: the flush saw Close give up, or Close handed it over
	default:
		var pe *crew.PanicError
		if !errors.As(err, &pe) {
			r.errorf("Flush = %v", err)
			return
		}
	}
	// Every item this goroutine added before the call is finished, except
	// one that DropOldest took out of its batch and is still on its way to
	// the error handler (Flush waits for batches, not for drop hand-overs):
	// judged at the end of the round.
	for _, it := range mine {
		if r.flushed[it].Load()+r.handed[it].Load() != 1 {
			r.lateMu.Lock()
			r.late = append(r.late, bsLate{it, sb.idx, err})
			r.lateMu.Unlock()
		}
	}
}

func (r *bsRound) closeCall(sb *bsBatcher, d time.Duration, mine []int) {
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	// One Close at a time: a second returns ErrClosed at once, and the
	// caller must know that the Batcher is closed (or gave up) when this
	// returns.
	sb.closeMu.Lock()
	defer sb.closeMu.Unlock()
	var err error
	ok := false
	for range 20 {
		if ok = r.guard("Close", func() { err = sb.b.Close(ctx) }); ok || r.failed.Load() {
			break
		}
	}
	if !ok {
		return
	}
	r.stats.closes.Add(1)
	switch {
	case err == batch.ErrClosed:
		return
	case errors.Is(err, context.DeadlineExceeded):
		sb.gaveUp.Store(true)
		return
	case err == nil, errors.Is(err, errBS), errors.Is(err, crew.ErrGoexit), errors.Is(err, context.Canceled):
	default:
		var pe *crew.PanicError
		if !errors.As(err, &pe) {
			r.errorf("Close = %v", err)
			return
		}
	}
	sb.closedOK.Store(true)
	for _, it := range mine {
		if r.flushed[it].Load()+r.handed[it].Load() != 1 {
			r.errorf("batcher %d: Close returned %v, item %d: flushed %d, handed %d",
				sb.idx, err, it, r.flushed[it].Load(), r.handed[it].Load())
		}
	}
	if s := sb.b.Stats(); s.Pending != 0 || s.InFlight != 0 {
		r.errorf("batcher %d: Close returned %v, stats %+v", sb.idx, err, s)
	}
}

func (r *bsRound) produce(prod, ops int) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(100+prod)))
	mine := map[*bsBatcher][]int{}
	for range ops {
		if r.failed.Load() {
			return
		}
		sb := r.bs[rng.IntN(len(r.bs))]
		switch x := rng.IntN(100); {
		case x < 45:
			if it, ok := r.add(sb, rng); ok {
				mine[sb] = append(mine[sb], it)
			}
		case x < 60:
			r.guard("TryAdd", func() { r.tryAdd(sb) })
		case x < 75:
			r.flushCall(sb, rng, mine[sb])
		case x < 77:
			r.closeCall(sb, time.Duration(rng.IntN(3))*time.Duration(rng.IntN(2000))*time.Microsecond, mine[sb])
		case x < 92:
			r.submitTask(rng, 0)
		default:
			time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		}
	}
}

// awaitItems waits until each of the first n items that was accepted has
// been flushed or handed over: a Close that gave up does not wait for the
// flush calls under way, which may run on the Batcher's own goroutines
// (or its own pool's) once the shared pool has stopped.
func (r *bsRound) awaitItems(n int) {
	deadline := time.After(bsDeadline)
	for it := 0; it < n; {
		if r.owner[it].Load() == 0 || r.flushed[it].Load()+r.handed[it].Load() > 0 {
			it++
			continue
		}
		select {
		case <-r.progress:
		case <-deadline:
			r.errorf("item %d of batcher %d neither flushed nor handed over within %v; goroutines:\n\n%s",
				it, r.owner[it].Load()-1, bsDeadline, leak.Dump())
			return
		}
	}
}

type bsCounts struct {
	rounds, items, accepted, flushed, handed, dropped, calls, lateDrops int64
	adds, flushes, closes, tasks                                        int64 // calls that returned
}

func bsRunRound(t *testing.T, seed uint64, c *bsCounts) {
	rng := rand.New(rand.NewPCG(seed, 5))
	r := &bsRound{t: t, seed: seed,
		owner: make([]atomic.Int32, bsItems), flushed: make([]atomic.Int32, bsItems),
		handed: make([]atomic.Int32, bsItems), dropped: make([]atomic.Int32, bsItems),
		progress: make(chan struct{}, 1)}
	size := 1 + rng.IntN(4)
	var opts []crew.Option
	if rng.IntN(2) == 0 {
		r.bounded = true
		opts = append(opts, crew.WithQueueSize(rng.IntN(5)))
		if rng.IntN(2) == 0 {
			r.nonBl = true
			opts = append(opts, crew.WithNonBlocking())
		}
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, crew.WithIdleTimeout(time.Duration(50+rng.IntN(1000))*time.Microsecond))
	}
	opts = append(opts, crew.WithPanicHandler(func(*crew.PanicError) {}))
	r.p = crew.New(size, opts...)
	r.k = crew.NewKeyed[int](r.p)
	nb := 1 + rng.IntN(3)
	for i := range nb {
		sb := &bsBatcher{idx: i}
		bopts := []batch.Option{
			batch.WithMaxItems(1 + rng.IntN(6)),
			batch.WithMaxWait(time.Duration(50+rng.IntN(2000)) * time.Microsecond),
			batch.WithMaxConcurrentFlushes(1 + rng.IntN(3)),
			batch.WithErrorHandler(r.onError(sb)),
		}
		if rng.IntN(5) != 0 {
			sb.shared = true
			bopts = append(bopts, batch.WithPool(r.p))
		}
		if rng.IntN(2) == 0 {
			bopts = append(bopts, batch.WithMaxPending(1+rng.IntN(15), batch.FullPolicy(rng.IntN(3))))
		}
		if rng.IntN(3) == 0 {
			bopts = append(bopts, batch.WithRetry(crew.Retry{Attempts: 1 + rng.IntN(3), Delay: time.Duration(rng.IntN(100)) * time.Microsecond, MaxDelay: 300 * time.Microsecond}))
		}
		if rng.IntN(4) == 0 {
			bopts = append(bopts, batch.WithMaxBytes(2+rng.IntN(20), func(v int) int { return 1 + v%5 }))
		}
		sb.b = batch.New(r.flushFn(sb), bopts...)
		r.bs = append(r.bs, sb)
	}
	mode := rng.IntN(5)

	var wg sync.WaitGroup
	for i := range 1 + rng.IntN(3) {
		ops := 5 + rng.IntN(40)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(i, ops)
		}()
	}
	quit := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		crng := rand.New(rand.NewPCG(seed, 9))
		for {
			select {
			case <-quit:
				return
			default:
			}
			switch crng.IntN(4) {
			case 0:
				r.p.Resize(1 + crng.IntN(4))
			case 1:
				for _, sb := range r.bs {
					s := sb.b.Stats()
					if s.Pending < 0 || s.Flushed+s.Failed+s.Dropped > s.Added {
						r.errorf("batcher %d stats while running: %+v", sb.idx, s)
					}
				}
			default:
				_ = r.p.Stats()
			}
			time.Sleep(time.Duration(crng.IntN(400)) * time.Microsecond)
		}
	}()

	switch mode {
	case 0: // Stop while the producers run.
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond) // let the round run a while
		r.guard("Stop", r.p.Stop)
		r.guard("producers", wg.Wait)
	case 1: // Close everything, then Shutdown with a short deadline.
		r.guard("producers", wg.Wait)
		for _, sb := range r.bs {
			r.closeCall(sb, 0, nil)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1000))*time.Microsecond)
		r.guard("Shutdown", func() { r.p.Shutdown(ctx) })
		cancel()
	case 2: // Shutdown with a short deadline while the producers run.
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond) // let the round run a while
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(1000))*time.Microsecond)
		r.guard("Shutdown", func() { r.p.Shutdown(ctx) })
		cancel()
		r.guard("producers", wg.Wait)
	default: // Close while the producers run, then Stop.
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond) // let the round run a while
		for _, sb := range r.bs {
			r.closeCall(sb, time.Duration(rng.IntN(2))*time.Duration(rng.IntN(3000))*time.Microsecond, nil)
		}
		r.guard("producers", wg.Wait)
		r.guard("Stop", r.p.Stop)
	}
	for _, sb := range r.bs {
		r.closeCall(sb, 0, nil)
	}
	r.guard("Stop", r.p.Stop)
	r.guard("Keyed.Wait", r.k.Wait)
	close(quit)
	r.guard("chaos goroutine", side.Wait)
	if r.failed.Load() {
		return
	}
	n := min(int(r.itemNext.Load()), bsItems)
	r.awaitItems(n)
	for _, l := range r.late {
		if r.dropped[l.it].Load() == 1 {
			c.lateDrops++
			continue
		}
		r.errorf("batcher %d: Flush returned %v, item %d added before it was neither flushed nor handed over then (at the end: flushed %d, handed %d)",
			l.b, l.err, l.it, r.flushed[l.it].Load(), r.handed[l.it].Load())
	}
	// Every item: accepted ones flushed or handed over exactly once.
	per := make([]struct{ acc, fl, ha, dr uint64 }, nb)
	for it := range n {
		f, h, d := r.flushed[it].Load(), r.handed[it].Load(), r.dropped[it].Load()
		o := r.owner[it].Load()
		if o == 0 {
			if f+h != 0 {
				r.errorf("item %d not accepted, flushed %d, handed %d", it, f, h)
			}
			continue
		}
		if f+h != 1 {
			r.errorf("item %d of batcher %d: flushed %d, handed %d", it, o-1, f, h)
		}
		a := &per[o-1]
		a.acc++
		a.fl += uint64(f)
		a.ha += uint64(h - d)
		a.dr += uint64(d)
	}
	for i, sb := range r.bs {
		s := sb.b.Stats()
		a := per[i]
		// After a Close that gave up, the Batcher may still be counting
		// the batches whose flush calls just returned.
		settled := !sb.gaveUp.Load()
		if s.Added != a.acc || settled && (s.Flushed != a.fl || s.Failed != a.ha || s.Dropped != a.dr || s.Pending != 0 || s.InFlight != 0) {
			r.errorf("batcher %d stats %+v; test counts: accepted %d, flushed %d, failed %d, dropped %d", i, s, a.acc, a.fl, a.ha, a.dr)
		}
		if got := int64(s.Latency.Count); settled && got != sb.calls.Load() {
			r.errorf("batcher %d: Latency.Count %d, flush calls %d", i, got, sb.calls.Load())
		}
		c.accepted += int64(a.acc)
		c.flushed += int64(a.fl)
		c.handed += int64(a.ha)
		c.dropped += int64(a.dr)
		c.calls += sb.calls.Load()
	}
	c.items += int64(n)
	c.adds += r.stats.adds.Load()
	c.flushes += r.stats.flushes.Load()
	c.closes += r.stats.closes.Load()
	c.tasks += r.stats.inner.Load()
	c.rounds++
}

func TestStressBatcher(t *testing.T) {
	leak.Check(t)
	budget := stress.Budget(t)
	seed, same := stress.Seed(t)
	w := log.Writer()
	log.SetOutput(io.Discard) // the Batcher logs every panic of the error handler
	defer log.SetOutput(w)
	var c bsCounts
	start := time.Now()
	for i := uint64(0); i == 0 || time.Since(start) < budget; i++ {
		if same {
			bsRunRound(t, seed, &c)
		} else {
			bsRunRound(t, seed+i, &c)
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d rounds in %v: %d items tried, %d accepted: %d flushed, %d handed to the error handler, %d dropped; %d flush calls; %d dropped items still on their way to the handler when a Flush returned; %d Add and TryAdd, %d Flush, %d Close calls, %d tasks submitted",
		c.rounds, time.Since(start).Round(time.Millisecond), c.items, c.accepted, c.flushed, c.handed, c.dropped, c.calls, c.lateDrops, c.adds, c.flushes, c.closes, c.tasks)
}
