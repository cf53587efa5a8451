package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

func newShard() *shard[int] {
	s := new(shard[int])
	s.init()
	return s
}

// add pushes v into s the way enqueue does, and reports whether s took it.
func add(s *shard[int], v int) bool {
	_, r := s.push(v)
	if r == ringFull {
		s.mu.Lock()
		_, r = s.spill(v)
	}
	return r == accepted
}

// A worker that found the ring empty and then waited for the spill
// queue's lock may find the ring refilled meanwhile, and a task spilled
// behind it: it takes the ring's oldest task, not the spill queue's, which
// was queued after every task in the ring.
func TestShardSpillPopTakesARefilledRingFirst(t *testing.T) {
	leak.Check(t)
	s := newShard()
	for i := range ringSize + 1 {
		if !add(s, i) {
			t.Fatalf("push %d refused", i)
		}
	}
	s.mu.Lock()
	v, ok := s.popSpilled()
	s.mu.Unlock()
	if !ok || v != 0 {
		t.Fatalf("popSpilled = %d, %v; want 0, the ring's oldest", v, ok)
	}
}

// One goroutine pushing past the ring into the spill queue and popping
// everything gets its tasks back in order, with the counts right at every
// step: the ring first, then the spill queue moved into the ring.
func TestShardKeepsOrderThroughSpill(t *testing.T) {
	leak.Check(t)
	s := newShard()
	const n = 5*ringSize + 3
	for i := range n {
		if !add(s, i) {
			t.Fatalf("push %d refused", i)
		}
		if got := s.len(); got != uint64(i+1) {
			t.Fatalf("after %d pushes len = %d", i+1, got)
		}
	}
	if !s.spilling.Load() {
		t.Fatalf("%d pushes never spilled out of a ring of %d", n, ringSize)
	}
	for i := range n {
		v, ok := s.pop(false)
		if !ok || v != i {
			t.Fatalf("pop %d = %d, %v", i, v, ok)
		}
		if got := s.len(); got != uint64(n-i-1) {
			t.Fatalf("after %d pops len = %d", i+1, got)
		}
		if got := s.pushed(); got != n {
			t.Fatalf("after %d pops pushed = %d, want %d", i+1, got, n)
		}
	}
	if v, ok := s.pop(true); ok {
		t.Fatalf("empty shard popped %d", v)
	}
	// Drained, the shard takes the ring path again.
	add(s, -1)
	if s.spilling.Load() {
		t.Fatal("a push into a drained shard spilled")
	}
}

// After close every push is refused and counted nowhere; what was queued
// can still be popped.
func TestShardClose(t *testing.T) {
	leak.Check(t)
	s := newShard()
	for i := range ringSize + 1 { // one in the spill queue
		add(s, i)
	}
	s.close()
	if add(s, 99) {
		t.Fatal("push after close accepted")
	}
	if got := s.pushed(); got != ringSize+1 {
		t.Fatalf("pushed = %d after close, want %d", got, ringSize+1)
	}
	for i := range ringSize + 1 {
		if v, ok := s.pop(false); !ok || v != i {
			t.Fatalf("pop %d after close = %d, %v", i, v, ok)
		}
	}
	if _, ok := s.pop(true); ok {
		t.Fatal("closed, drained shard popped a task")
	}
}

func TestShardDrain(t *testing.T) {
	leak.Check(t)
	s := newShard()
	const n = 3 * ringSize
	for i := range n {
		add(s, i)
	}
	for range 10 {
		s.pop(false)
	}
	got := s.drain(nil)
	if len(got) != n-10 {
		t.Fatalf("drained %d tasks, want %d", len(got), n-10)
	}
	for i, v := range got {
		if v != i+10 {
			t.Fatalf("drained[%d] = %d, want %d", i, v, i+10)
		}
	}
	if s.len() != 0 || s.pushed() != n {
		t.Fatalf("after drain len = %d, pushed = %d", s.len(), s.pushed())
	}
}

// Producers and consumers hammering one shard: every task comes out exactly
// once, len never wraps below zero, and pushed never counts fewer tasks
// than have been taken (Wait relies on that).
func TestShardConcurrent(t *testing.T) {
	leak.Check(t)
	s := newShard()
	const producers, consumers, each = 4, 4, 20000
	var taken atomic.Int64
	seen := make([]atomic.Int32, producers*each)
	// A backlog to start with, so that consumers move spilled tasks into
	// the ring while producers push.
	const backlog = 3 * ringSize
	var added atomic.Int64 // pushes that have returned
	for i := range backlog {
		add(s, i)
	}
	added.Store(backlog)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if p == 0 && i < backlog {
					continue
				}
				if !add(s, p*each+i) {
					t.Error("push refused")
					return
				}
				added.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	var cg sync.WaitGroup
	for c := range consumers {
		cg.Add(1)
		go func() {
			defer cg.Done()
			for {
				v, ok := s.pop(c == 0) // one consumer waits for the lock
				if ok {
					seen[v].Add(1)
					taken.Add(1)
					continue
				}
				select {
				case <-stop:
					return
				default:
					runtime.Gosched() // as a searching worker does
				}
			}
		}()
	}
	cg.Add(1)
	go func() {
		defer cg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			before, in := taken.Load(), added.Load()
			n := s.len()
			after := taken.Load()
			if n > producers*each {
				t.Errorf("len = %d, more than was ever pushed", n)
				return
			}
			// At least what was in before the look minus what came out by
			// its end, less one task per consumer between its pop and its
			// count.
			if lower := in - after - consumers; int64(n) < lower {
				t.Errorf("len = %d, below the %d tasks that must have been queued", n, lower)
				return
			}
			if n := s.pushed(); n < uint64(before) {
				t.Errorf("pushed = %d, fewer than the %d already taken", n, before)
				return
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for taken.Load() < producers*each && !t.Failed() && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	close(stop)
	cg.Wait()
	if n := taken.Load(); n != producers*each {
		t.Fatalf("took %d of %d tasks; len = %d", n, producers*each, s.len())
	}
	for v := range seen {
		if n := seen[v].Load(); n != 1 {
			t.Fatalf("task %d taken %d times", v, n)
		}
	}
	if s.moved.Load() == 0 {
		t.Fatal("no spilled task was moved into the ring")
	}
	if s.pushed() != producers*each || s.len() != 0 {
		t.Fatalf("at the end pushed = %d, len = %d", s.pushed(), s.len())
	}
}

// stalled reports a stall only while a pushed task waits and nobody takes
// any: not while the workers keep up, nor while they drain a backlog.
func TestShardStalled(t *testing.T) {
	leak.Check(t)
	s := newShard()
	push := func() uint64 {
		n, r := s.push(0)
		if r != accepted {
			t.Fatalf("push: %v", r)
		}
		return n
	}
	// A fresh shard: its first look only notes how far the workers have
	// come, though nobody has taken a task yet.
	if n := push(); s.stalled(n) {
		t.Fatalf("stalled at push %d, the first", n)
	}
	if n := push(); s.stalled(n) {
		t.Fatalf("stalled at push %d, the first look to find a task waiting", n)
	}
	s.pop(false)
	s.pop(false)
	for range 8 { // workers keep up
		n := push()
		s.pop(false)
		if s.stalled(n) {
			t.Fatalf("stalled at push %d with the ring empty", n)
		}
	}
	look := func() (uint64, bool) {
		n := push()
		return n, s.stalled(n)
	}
	// Nobody takes: the first look that finds the task before its own
	// waiting notes how far the workers have come; the next one reports
	// the stall.
	if n, stalled := look(); stalled {
		t.Fatalf("stalled at push %d, with the task before it taken", n)
	}
	if n, stalled := look(); stalled {
		t.Fatalf("stalled at push %d, the first look to find a task waiting", n)
	}
	if n, stalled := look(); !stalled {
		t.Fatalf("not stalled at push %d with %d tasks waiting and none taken", n, s.len())
	}
	s.pop(false) // a worker drains the backlog, slowly
	if n, stalled := look(); stalled {
		t.Fatalf("stalled at push %d although a task was taken since the last look", n)
	}
	if n, stalled := look(); !stalled {
		t.Fatalf("not stalled at push %d: nothing taken since the last look", n)
	}
}

// spillRoom reports the tasks that e's spill queues have room for, in the
// chunks they hold and those they keep free, and whether every shard is
// trimmed: no free chunk, and at most one chunk of at most keepChunk.
func spillRoom(e *Engine[func()]) (room int, trimmed bool) {
	trimmed = true
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		chunks, free, r, largest := s.q.Memory()
		room += r
		if free > 0 || chunks > 1 || largest > keepChunk {
			trimmed = false
		}
		s.mu.Unlock()
	}
	return room, trimmed
}

func TestEngineReaperTrimsSpillQueues(t *testing.T) {
	leak.Check(t)
	for _, idle := range []time.Duration{0, 5 * time.Millisecond} {
		e := New(Config[func()]{MaxWorkers: 1, QueueSize: -1, IdleTimeout: idle, Run: func(f func()) { f() }})
		gate := make(chan struct{})
		e.Push(nil, func() { <-gate })
		for range 100_000 {
			e.Push(nil, func() {})
		}
		if room, _ := spillRoom(e); room < 90_000 {
			t.Fatalf("idle %v: a backlog of 100,000 tasks spilled into chunks for %d", idle, room)
		}
		close(gate)
		if err := e.Wait(nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			room, trimmed := spillRoom(e)
			if trimmed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("idle %v: spill queues still hold chunks for %d tasks 5s after the burst; stats %+v", idle, room, e.Stats())
			}
			time.Sleep(time.Millisecond)
		}
		stop(e)
	}
}

// spilledShard returns a shard whose ring other workers have emptied,
// with tasks ringSize to ringSize+9 left in its spill queue.
func spilledShard() *shard[int] {
	s := newShard()
	for i := range ringSize + 10 {
		add(s, i)
	}
	for range ringSize {
		s.popRing()
	}
	return s
}

// A worker's last look before it parks waits for the spill queue's lock.
// If the holder moved the spill queue into the ring meanwhile, the look
// must find those tasks there, or it parks with tasks queued and nobody
// to take them.
func TestShardLastLookSeesTasksMovedIntoTheRing(t *testing.T) {
	leak.Check(t)
	s := spilledShard()
	// Both workers found the ring empty and the shard spilling. The first
	// to get the lock takes one task and moves the rest into the ring.
	s.mu.Lock()
	first, ok := s.popSpilled()
	s.mu.Unlock()
	if !ok || first != ringSize {
		t.Fatalf("first worker took %d, %v; want %d", first, ok, ringSize)
	}
	// The second, its last look, had been waiting for the lock.
	s.mu.Lock()
	second, ok := s.popSpilled()
	s.mu.Unlock()
	if !ok || second != ringSize+1 {
		t.Fatalf("last look after the move took %d, %v; want %d (len %d)", second, ok, ringSize+1, s.len())
	}
}

// The same as a last look can see it without the lock: it finds the ring
// empty, and before it reads the spilling flag, another worker takes the
// spill queue's first task and moves the rest into the ring, clearing the
// flag. The look must then find them in the ring.
func TestShardLastLookSeesTasksMovedBeforeTheFlag(t *testing.T) {
	leak.Check(t)
	s := spilledShard()
	if _, ok := s.popRing(); ok { // the last look's first step
		t.Fatal("the ring should be empty")
	}
	if first, ok := s.pop(false); !ok || first != ringSize { // a worker back from its task moves the rest
		t.Fatalf("the moving worker took %d, %v; want %d", first, ok, ringSize)
	}
	if s.spilling.Load() {
		t.Fatal("the spill queue should be empty and the flag cleared")
	}
	if got, ok := s.popBehindRing(true); !ok || got != ringSize+1 { // the last look's second step
		t.Fatalf("last look after the move took %d, %v; want %d (len %d)", got, ok, ringSize+1, s.len())
	}
}

// One producer's tasks go to every shard, about as many to each: a pick
// that kept to one shard (by the producer's stack alone, say) would have a
// worker chase the producer through one ring, cell by cell.
func TestOneProducerSpreadsOverTheShards(t *testing.T) {
	leak.Check(t)
	e := busy(t, 1)
	per := 256
	for range per * len(e.shards) {
		if err := e.Push(nil, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e.shards {
		if n := int(e.shards[i].len()); n < per/2 || n > 2*per {
			t.Errorf("shard %d holds %d of %d tasks, want about %d", i, n, per*len(e.shards), per)
		}
	}
}
