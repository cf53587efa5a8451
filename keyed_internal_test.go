package crew

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew/internal/engine"
	"github.com/gocrew/crew/internal/leak"
)

// Idle keys are deleted, and the shards' maps are rebuilt once most of
// their keys are gone (each keeps room for fewer than rebuildKeys), so the
// memory of 100,000 keys that ran once is returned: not one map entry,
// queue or goroutine stays per idle key. (The pool's own queues keep their
// chunks for the next burst until the idle timeout; a short one returns
// them before the heap is measured.)
func TestKeyedIdleKeysAreReclaimed(t *testing.T) {
	leak.Check(t)
	p := New(4, WithIdleTimeout(time.Millisecond))
	defer p.Stop()
	k := NewKeyed[int](p)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC() // recycled key queues wait one more cycle in the sync.Pool's victim cache
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const keys = 100_000
	for round := range 2 {
		release := make(chan struct{})
		started := make(chan struct{})
		for range 4 { // hold the workers so that every key is busy at once
			p.Go(func() { started <- struct{}{}; <-release })
			<-started
		}
		for key := range keys {
			k.Go(round*keys+key, func() {})
		}
		if s := k.Stats(); s.Keys != keys {
			t.Fatalf("round %d: %d busy keys, want %d", round, s.Keys, keys)
		}
		peak := heap()
		close(release)
		k.Wait()
		// Wait for the workers to park and the reaper to trim the queues.
		deadline := time.Now().Add(5 * time.Second)
		after := heap()
		for after > before+(peak-before)/10 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			after = heap()
		}
		for i := range k.shards {
			sh := &k.shards[i]
			sh.mu.Lock()
			n, pk, w := len(sh.m), sh.peak, sh.waiting
			sh.mu.Unlock()
			if n != 0 || pk >= rebuildKeys || w != 0 {
				t.Fatalf("round %d: shard %d keeps %d keys (peak %d, waiting %d) after Wait", round, i, n, pk, w)
			}
		}
		// The busy keys cost tens of MB; what is left is at most a few
		// hundred KB of recycled queues and chunks.
		t.Logf("round %d: heap %d KB before, %d KB with %d busy keys, %d KB after Wait",
			round, before>>10, peak>>10, keys, after>>10)
		if after > before+(peak-before)/10 {
			t.Fatalf("round %d: heap %d KB after Wait, %d KB before and %d KB with the keys busy", round, after>>10, before>>10, peak>>10)
		}
	}
}

// With WithKeyRate, the token times of each key obey the bucket's bound
// exactly: in any interval of length d, at most Burst + d/e starts, where
// e is Per/Limit rounded up. Idle keys are reclaimed once their bucket is
// full again.
func TestKeyedRatePerKeyIsNeverExceeded(t *testing.T) {
	leak.Check(t)
	p := New(4)
	defer p.Stop()
	r := Rate{Limit: 1, Per: 3 * time.Millisecond, Burst: 2}
	k := NewKeyed[int](p, WithKeyRate(r))
	took := recordTokens(k)
	const keys, perKey = 4, 12
	for i := range keys * perKey {
		k.Go(i%keys, func() {})
	}
	k.Wait()
	b, _ := r.bucket()
	for key, ts := range took {
		if len(ts) != perKey {
			t.Fatalf("key %d took %d tokens, want %d", key, len(ts), perKey)
		}
		checkBucketBound(t, ts, b)
	}
	// Keys stay while their bucket refills, then their memory goes.
	deadline := time.Now().Add(schedDeadlineInternal)
	for k.Stats().Keys != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still held after their buckets refilled", k.Stats().Keys)
		}
		time.Sleep(time.Millisecond)
	}
}

const schedDeadlineInternal = 10 * time.Second

// recordTokens makes k record the times at which each key takes a token,
// in the map it returns; read it once k's tasks are done.
func recordTokens(k *Keyed[int]) map[int][]int64 {
	var mu sync.Mutex
	took := map[int][]int64{}
	k.tookToken = func(key int, now int64) { // under the shard lock
		mu.Lock()
		took[key] = append(took[key], now)
		mu.Unlock()
	}
	return took
}

// checkBucketBound checks that the sorted times ts (nanoseconds) never put
// more starts in an interval than the bucket allows: for i < j,
// j-i+1 <= cap + (ts[j]-ts[i])/e.
func checkBucketBound(t *testing.T, ts []int64, b tokenBucket) {
	t.Helper()
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			if ts[j] < ts[i] {
				t.Fatalf("token times out of order: %v", ts)
			}
			if int64(j-i+1) > b.cap+(ts[j]-ts[i])/b.e {
				t.Fatalf("%d starts within %v: the bucket allows %d", j-i+1, time.Duration(ts[j]-ts[i]), b.cap+(ts[j]-ts[i])/b.e)
			}
		}
	}
}

// A marked step runs under its own layer's number only, which is what the
// layer's Wait looks for, and a run of it allocates nothing: the marked
// func is made once per step func (Keyed: per key queue).
func TestLayerMarkedStepRunsUnderItsNumber(t *testing.T) {
	leak.Check(t)
	p := New(1)
	defer p.Stop()
	k, q := NewKeyed[int](p), NewPriority(p)
	var inK, inQ bool
	k.l.mark(func() { inK, inQ = engine.CallerIs(k.l.id), engine.CallerIs(q.l.id) }, nil).run()
	if !inK || inQ {
		t.Errorf("inside a step of k: under k's number %v, under q's %v; want true, false", inK, inQ)
	}
	n := 0
	step := k.l.mark(func() { n++ }, nil)
	if a := testing.AllocsPerRun(1000, step.run); a != 0 || n == 0 {
		t.Errorf("a marked step: %v allocations per run (ran %d times), want 0", a, n)
	}
}

// receive returns what ch delivers, failing t if nothing comes in time.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		panic("unreachable")
	}
}

// pausingSend submits a layer's steps as its stepper would, except that
// send i waits on pause[i] after the executor has taken (or refused) the
// i-th step, as if the caller were descheduled right there.
type pausingSend struct {
	st     *stepper
	calls  atomic.Int32
	paused []chan struct{} // receives when call i has submitted
	pause  []chan struct{} // call i returns once it is closed
}

func (x *pausingSend) send(ctx context.Context, s layerStep, mode pushMode) error {
	err := x.st.sendTo(ctx, s, mode)
	if i := int(x.calls.Add(1) - 1); i < len(x.pause) {
		x.paused[i] <- struct{}{}
		<-x.pause[i]
	}
	return err
}

// A Go from inside a task, for a key whose step has already run the task
// of the Go still starting it, queues behind that start and leaves the key
// to it: one Go starts a key, never two, or the second would go on with a
// queue the first had recycled.
func TestKeyedGoFromATaskBehindAStartWhoseStepHasRun(t *testing.T) {
	leak.Check(t)
	p := New(2, WithQueueSize(4)) // bounded: Go waits for room
	defer p.Stop()
	k := NewKeyed[string](p)
	x := &pausingSend{st: &k.l.steps,
		paused: []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)},
		pause:  []chan struct{}{make(chan struct{}), make(chan struct{})}}
	k.l.steps.send = x.send
	release := make([]func(), len(x.pause))
	for i, c := range x.pause {
		release[i] = sync.OnceFunc(func() { close(c) })
		defer release[i]() // before Stop, should the test fail
	}
	var ran atomic.Int32
	outer := make(chan error, 1)
	go func() { outer <- k.Go("a", func() { ran.Add(1) }) }()
	receive(t, x.paused[0], "the outer Go's step submitted")
	k.Wait() // its step ran the task: the key is idle, still starting
	inner := make(chan error, 1)
	p.Go(func() { inner <- k.Go("a", func() { ran.Add(1) }) })
	if err := receive(t, inner, "the Go from inside a task"); err != nil {
		t.Fatalf("inner Go = %v", err)
	}
	release[0]() // the outer Go finds the inner task queued and owes it a step
	receive(t, x.paused[1], "the key's step submitted again")
	release[1]()
	if err := receive(t, outer, "the outer Go"); err != nil {
		t.Fatalf("outer Go = %v", err)
	}
	k.Wait()
	if n := ran.Load(); n != 2 || x.calls.Load() != 2 {
		t.Fatalf("%d tasks ran after %d step submissions, want 2 and 2", n, x.calls.Load())
	}
	if s := k.Stats(); s.Keys != 0 || s.Unfinished != 0 {
		t.Fatalf("Keyed stats %+v, want no key left", s)
	}
}

// WithKeyLimit and WithKeyRate together: each key's token times obey its
// bucket's bound exactly, at most limit of its tasks run at once, and
// more than one does at times (the bucket lets three start together).
// Idle keys are reclaimed once their bucket is full again.
func TestKeyedLimitWithKeyRate(t *testing.T) {
	leak.Check(t)
	p := New(8)
	defer p.Stop()
	r := Rate{Limit: 1, Per: 2 * time.Millisecond, Burst: 3}
	const keys, perKey, limit = 3, 15, 3
	k := NewKeyed[int](p, WithKeyRate(r), WithKeyLimit(limit))
	took := recordTokens(k)
	var running, peak [keys]atomic.Int64
	var over atomic.Int64
	for i := range keys * perKey {
		key := i % keys
		k.Go(key, func() {
			n := running[key].Add(1)
			if n > limit {
				over.Add(1)
			}
			for {
				if old := peak[key].Load(); n <= old || peak[key].CompareAndSwap(old, n) {
					break
				}
			}
			time.Sleep(3 * time.Millisecond) // work: lets the next token come while it runs
			running[key].Add(-1)
		})
	}
	k.Wait()
	b, _ := r.bucket()
	most := int64(0)
	for key, ts := range took {
		if len(ts) != perKey {
			t.Fatalf("key %d took %d tokens, want %d", key, len(ts), perKey)
		}
		checkBucketBound(t, ts, b)
		most = max(most, peak[key].Load())
	}
	if over.Load() != 0 || most < 2 {
		t.Fatalf("%d starts above the limit; at most %d tasks of a key ran at once, want 2 or 3", over.Load(), most)
	}
	deadline := time.Now().Add(schedDeadlineInternal)
	for k.Stats().Keys != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d keys still held after their buckets refilled", k.Stats().Keys)
		}
		time.Sleep(time.Millisecond)
	}
}

// A Go for a busy key allocates nothing beyond the task's closure, with
// the default limit of 1 and with a key at a limit above 1; so does the
// Pause and Resume of a key that stays in the map.
func TestKeyedGoForABusyKeyAllocatesNothing(t *testing.T) {
	leak.Check(t)
	for _, limit := range []int{1, 2} {
		p := New(limit)
		k := NewKeyed[int](p, WithKeyLimit(limit))
		release := make(chan struct{})
		started := make(chan struct{}, limit)
		for range limit {
			k.Go(1, func() { started <- struct{}{}; <-release })
		}
		for range limit {
			<-started
		}
		task := func() {}
		if a := testing.AllocsPerRun(1000, func() { k.Go(1, task) }); a != 0 {
			t.Errorf("limit %d: Go for a busy key: %v allocations, want 0", limit, a)
		}
		k.Pause(1)
		if a := testing.AllocsPerRun(1000, func() { k.Pause(1); k.Resume(1); k.Pause(1) }); a != 0 {
			t.Errorf("limit %d: Pause and Resume of a busy key: %v allocations, want 0", limit, a)
		}
		k.Resume(1)
		close(release)
		k.Wait()
		p.Stop()
	}
}

// The Go that starts an idle key is left its key by the layer's drop as
// the pool ends (abandon passes over a starting key), and deals with it
// once its step's submission returns. Stop and Shutdown must still return
// only once the task queued behind that start is dropped: done and
// counted. Stop refuses the step, submitted after Stop closed the pool;
// Shutdown's deadline drops it from the pool's queue. Paused, the key
// must not be left with the task once the pool has ended, or the Task
// never completes and Wait never returns.
func TestKeyedStopWaitsForAStartingGo(t *testing.T) {
	leak.Check(t)
	for _, shutdown := range []bool{false, true} {
		for _, paused := range []bool{false, true} {
			name := map[bool]string{false: "Stop", true: "Shutdown"}[shutdown]
			if paused {
				name += "/paused"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { keyedStopDuringStart(t, shutdown, paused) })
			})
		}
	}
}

func keyedStopDuringStart(t *testing.T, shutdown, paused bool) {
	p := New(1)
	k := NewKeyed[string](p)
	proceed := make(chan struct{})
	release := sync.OnceFunc(func() { close(proceed) })
	defer release()
	var calls atomic.Int32
	k.l.steps.send = func(ctx context.Context, s layerStep, mode pushMode) error {
		first := calls.Add(1) == 1
		if first && !shutdown {
			<-proceed // Stop closes the pool first: the step is refused
		}
		err := k.l.steps.sendTo(ctx, s, mode)
		if first && shutdown {
			<-proceed // the step waits in the pool's queue; Shutdown drops it
		}
		return err
	}
	if shutdown {
		p.Go(func() { <-p.Context().Done() }) // holds the worker: the step stays queued
	}
	outer := make(chan error, 1)
	go func() { outer <- k.Go("a", func() {}) }()
	synctest.Wait() // the Go is starting the key
	if paused {
		k.Pause("a")
	}
	behind, ok := k.TrySubmit("a", func(context.Context) error { return nil })
	if !ok {
		t.Fatalf("TrySubmit behind the start: %v", behind.Wait())
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if shutdown {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			p.Shutdown(ctx)
		} else {
			p.Stop()
		}
	}()
	synctest.Wait() // Stop or Shutdown has returned, or waits for the start
	select {
	case <-stopped:
		select {
		case <-behind.Done():
		default:
			t.Errorf("the pool's stop returned while the task queued behind a starting Go was not done (%+v)", k.Stats())
		}
	default:
	}
	release()
	<-stopped
	err := <-outer
	synctest.Wait()
	select {
	case <-behind.Done():
	default:
		release()
		t.Fatalf("the task queued behind the start is never done: the key is left with it (%+v)", k.Stats())
	}
	if err := behind.Wait(); err != ErrDropped {
		t.Errorf("the task behind the start: Wait = %v, want ErrDropped", err)
	}
	wantErr, wantDropped := error(ErrStopped), uint64(1) // refused: Go reports it
	if shutdown {
		wantErr, wantDropped = nil, 2 // accepted, then dropped with the pool's queue
	}
	if err != wantErr {
		t.Errorf("the starting Go = %v, want %v", err, wantErr)
	}
	if s := k.Stats(); s.Unfinished != 0 || s.Keys != 0 || s.Dropped != wantDropped {
		t.Errorf("Keyed stats %+v, want no key or task left and %d dropped", s, wantDropped)
	}
}

// A Keyed step whose worker is one too many after Resize lowered the limit
// queues the key's next step past the full queue's bound. Should Stop close
// the pool between the full queue's refusal and that push (the hook's
// ErrStopped stands for it), the step goes on with the key's task itself,
// as a step on a stopping pool does: Stop runs what the key accepted, and
// nothing is dropped.
func TestKeyedStepOverLimitRefusedAsStopClosesGoesOn(t *testing.T) {
	leak.Check(t)
	p := New(2, WithQueueSize(0))
	defer p.Stop()
	release := holdWorker(t, p)
	defer release()
	k := NewKeyed[string](p)
	var refusedPast atomic.Bool
	k.l.steps.send = func(ctx context.Context, s layerStep, mode pushMode) error {
		if mode == pushPast && refusedPast.CompareAndSwap(false, true) {
			return ErrStopped
		}
		return k.l.steps.sendTo(ctx, s, mode)
	}
	started, head := make(chan struct{}), make(chan struct{})
	if err := k.Go("a", func() { close(started); <-head }); err != nil {
		t.Fatal(err)
	}
	receive(t, started, "the key's first task")
	if err := p.Resize(1); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	for range 2 {
		if err := k.Go("a", func() { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	close(head)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !untilHolds(ctx, refusedPast.Load) {
		t.Fatal("the key's next step was never pushed past the full queue's bound")
	}
	release()
	k.Wait()
	if n, s := ran.Load(), k.Stats(); n != 2 || s.Dropped != 0 {
		t.Fatalf("%d of the key's 2 tasks ran, Stats %+v; want both run, none dropped", n, s)
	}
}
