package engine

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gocrew/crew/internal/queue"
)

// A shard is a queue that many producers and many workers share. Most of a
// tiny task's cost is moving cache lines between cores, so the common case,
// a short queue, goes through a ring that needs no lock: a producer claims a
// cell by advancing the ring's write count, stores the task and then the
// cell's sequence number; a worker claims the oldest cell by advancing the
// read count once its sequence number says it is full, and hands the cell
// back to the producers of the next lap. Producers write one line of counts
// and workers another, so a producer pays no transfer for the workers'
// bookkeeping, and a line of cells carries several tasks across. (This is
// Dmitry Vyukov's bounded multi-producer multi-consumer queue.) A lock
// around each shard's queue proved slower than the ring.
//
// The ring is small, so a backlog spills over into a chunked fifo under a
// mutex: while anything is spilled, producers keep appending there and
// workers empty the ring first, which keeps each shard's tasks nearly in
// order (a producer that found no spill may still be filling its cell).
// A worker that has to take from the spill queue moves a ringful of it
// into the ring under the same lock. A backlog then costs producers a lock
// per task and workers one per ringful; the workers, not the queue, are
// what the tasks wait for.
//
// Close sets a bit in the write count, so a producer either claimed its
// cell before Close, and its task is counted, or sees the bit and is
// refused: no task is lost between a check and a push.

// ringSize is the number of cells in a shard's ring, a power of two.
// Smaller rings proved no faster and larger ones slower, as they spread
// the producers and workers over more lines. Each cell holds a sequence
// word and a task.
const ringSize = 64

// closedBit, in a shard's write count, refuses further pushes.
const closedBit = 1 << 63

type cell[T any] struct {
	// seq is the write count that may fill the cell next (the cell is
	// free), or one more than the count that filled it (the cell is full).
	seq atomic.Uint64
	t   T
}

// The groups of fields that different cores write are kept 64 bytes
// apart, so that they fall on different cache lines. The allocator does
// not place shards on line boundaries (and a shard's size depends on T),
// so in some shards a group straddles two lines and shares one with the
// next group's first word: that costs speed, never correctness.
type shard[T any] struct {
	// Written by producers: closedBit | tasks pushed into the ring, and
	// the read count as the last look for a stall saw it (see stalled).
	written atomic.Uint64
	checked atomic.Uint64
	_       [48]byte
	// Written by workers: tasks taken from the ring.
	read atomic.Uint64
	_    [56]byte
	ring [ringSize]cell[T]
	// Whether the spill queue holds tasks. Written under mu when that
	// changes, read on every push: apart from the spill queue's counts,
	// it stays in every core's cache.
	spilling atomic.Bool
	_        [63]byte

	mu sync.Mutex // guards the spill queue and closed
	// Tasks pushed into and taken from the spill queue, and those of them
	// moved into the ring: written under mu, read without it.
	spilled, unspilled, moved atomic.Uint64
	// Odd while popSpilled moves tasks into the ring, and two more after
	// each move: a read of the counts that saw it even and unchanged
	// overlapped no move.
	moving atomic.Uint64
	closed bool // guarded by mu: refuse pushes
	q      queue.FIFO[T]
	// The spill queue's lists of chunks start here, so that a shard's
	// first spill allocates only its first chunk.
	lists [16][]T
	_     [64]byte
}

// keepChunk is the largest chunk that trim leaves a drained spill queue; a
// bigger one, left by a burst, goes back to the garbage collector.
const keepChunk = 1 << 10

func (s *shard[T]) init() {
	s.q.Lend(s.lists[:], nil)
	for i := range s.ring {
		s.ring[i].seq.Store(uint64(i))
	}
	s.checked.Store(notChecked)
}

// notChecked, in a shard's checked word, says that no look has noted a
// read count yet: no read count equals it, so the first look only notes
// one (see stalled).
const notChecked = ^uint64(0)

// pushResult says what became of a push.
type pushResult int

const (
	accepted pushResult = iota
	ringFull            // the ring is full, or a backlog is spilling: spill t
	refused             // the shard is closed
)

// push puts t into the ring unless the shard is spilling, and returns the
// ring's write count, by which the caller samples.
func (s *shard[T]) push(t T) (n uint64, r pushResult) {
	if s.spilling.Load() {
		return 0, ringFull
	}
	switch n := s.pushRing(t); {
	case n&closedBit != 0:
		return 0, refused
	case n != 0:
		return n, accepted
	}
	return 0, ringFull
}

// spill appends t to the spill queue and unlocks s.mu, which the caller
// holds, and returns the number of spilled tasks so far.
func (s *shard[T]) spill(t T) (n uint64, r pushResult) {
	defer s.mu.Unlock()
	if s.closed {
		return 0, refused
	}
	s.q.Push(t)
	if !s.spilling.Load() {
		s.spilling.Store(true)
	}
	return s.spilled.Add(1), accepted
}

// pushRing puts t into a free cell and returns the ring's new write count.
// It returns 0 if the ring is full, and closedBit if the shard is closed.
func (s *shard[T]) pushRing(t T) uint64 {
	for {
		n := s.written.Load()
		if n&closedBit != 0 {
			return closedBit
		}
		c := &s.ring[n%ringSize]
		switch seq := c.seq.Load(); {
		case seq == n:
			if s.written.CompareAndSwap(n, n+1) {
				c.t = t
				c.seq.Store(n + 1)
				return n + 1
			}
		case seq < n:
			return 0 // the cell still holds the task of the previous lap
		}
		// Another producer took the cell; try the next.
	}
}

// pop takes the oldest task. wait is set for a worker's last look before
// it parks, which must not miss a task: it looks behind the ring even when
// the shard was not spilling as it looked (see popBehindRing).
func (s *shard[T]) pop(wait bool) (t T, ok bool) {
	if t, ok = s.popRing(); ok || !wait && !s.spilling.Load() {
		return t, ok
	}
	return s.popBehindRing(wait)
}

// popBehindRing is pop once the ring was found empty.
func (s *shard[T]) popBehindRing(wait bool) (t T, ok bool) {
	if !s.spilling.Load() {
		if wait {
			// Since the ring looked empty, a worker may have moved
			// the whole spill queue into it and cleared spilling: a
			// last look that missed those tasks would park with them
			// queued and nobody to take them.
			return s.popRing()
		}
		return t, false
	}
	// A busy spill queue is waited for, not skipped: its lock is held for
	// one append or one move into the ring, and a worker that skipped it
	// would take later tasks from the other shards while this backlog
	// waited a turn.
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.popSpilled()
}

// popSpilled takes the oldest task of a shard that was spilling when the
// caller looked, with s.mu held: the ring's, if it has one, else the
// spill queue's. A worker that takes from the spill queue moves what fits
// of the rest into the ring, so that a backlog costs the workers a lock
// per ringful, not per task. The spill queue may have been
// moved into the ring while the caller waited for the lock, so an empty
// one sends it back to the ring: a worker's last look before it parks
// that missed those tasks would leave them queued with nobody to take
// them (popBehindRing covers the same move when it finds the flag clear).
func (s *shard[T]) popSpilled() (t T, ok bool) {
	// The ring may have filled since the caller found it empty: its tasks
	// are older than the spill queue's, which were queued while they
	// waited.
	if t, ok = s.popRing(); ok {
		return t, true
	}
	if _, more := s.q.Peek(); more && s.written.Load()&^closedBit != s.read.Load() {
		// The ring's oldest cell is claimed by a producer still filling
		// it, and its task and those behind it are older than the spill
		// queue's: leave the backlog until the cell is filled, rather than
		// let it pass them. The producer looks for a worker once it has
		// filled the cell.
		return t, false
	}
	if t, ok = s.q.Pop(); ok {
		s.moving.Add(1)
		defer s.moving.Add(1)
		var moved uint64
		for {
			next, more := s.q.Peek()
			if !more || s.pushRing(next)&^closedBit == 0 {
				break
			}
			s.q.Pop()
			moved++
		}
		// Moved tasks are counted in written and in spilled until moved
		// says otherwise: see pushed.
		s.unspilled.Add(1 + moved)
		s.moved.Add(moved)
	}
	if _, more := s.q.Peek(); !more {
		s.spilling.Store(false)
	}
	if !ok {
		return s.popRing()
	}
	return t, true
}

// popRing takes the task in the oldest cell, if that is full. A cell that a
// producer has claimed but not yet filled reads as empty: that producer
// looks for a worker after filling it.
func (s *shard[T]) popRing() (t T, ok bool) {
	for {
		n := s.read.Load()
		c := &s.ring[n%ringSize]
		switch seq := c.seq.Load(); {
		case seq == n+1:
			if s.read.CompareAndSwap(n, n+1) {
				t = c.t
				var zero T
				c.t = zero // let the task's closure be collected
				c.seq.Store(n + ringSize)
				return t, true
			}
		case seq < n+1:
			return t, false
		}
		// Another worker took the cell; try the next.
	}
}

// len reports the tasks in the shard, counting cells claimed but not yet
// filled. Each count is read after the one it is subtracted from can
// only have passed, so the result cannot wrap; and the spill queue's taken
// count is read before the ring's write count, because a task moved into
// the ring raises the latter first: read the other way, a move between the
// two reads would count the task in neither.
func (s *shard[T]) len() uint64 {
	read := s.read.Load()
	unspilled := s.unspilled.Load()
	return s.written.Load()&^closedBit - read + s.spilled.Load() - unspilled
}

// pushed reports how many tasks the shard has accepted, exactly. A task
// moved from the spill queue into the ring is in both the write and the
// spill counts until moved counts it, so a read that overlaps a move is
// retried (see moving): Wait must not count too few, and Stats must not
// count too many, as its Submitted feeds counters that must never go
// down. A move is at most a ringful of pushes under the spill queue's
// lock, so retries are short.
func (s *shard[T]) pushed() uint64 {
	for {
		g := s.moving.Load()
		moved := s.moved.Load()
		n := s.written.Load()&^closedBit + s.spilled.Load() - moved
		if g&1 == 0 && s.moving.Load() == g {
			return n // no move overlapped the reads: exact
		}
		runtime.Gosched()
	}
}

// stalled reports whether the ring seems to hold tasks that nobody takes:
// the task pushed just before the one that made its write count n still
// waits, and no task has been taken from the ring since the previous look
// that came this far. The cell is next to the one the producer has just
// written, so while the workers keep up the look costs little; only
// while tasks wait does it read the workers' line.
func (s *shard[T]) stalled(n uint64) bool {
	if n < 2 {
		return false
	}
	if p := n - 2; s.ring[p%ringSize].seq.Load() != p+1 {
		return false
	}
	read := s.read.Load()
	return s.checked.Swap(read) == read
}

// trim gives back the memory that a past backlog left in the spill queue.
// It waits for the lock: its callers come once per idle timeout, or once
// as the last worker leaves, and a skipped shard would keep its memory.
func (s *shard[T]) trim() {
	s.mu.Lock()
	s.q.Trim(keepChunk)
	s.mu.Unlock()
}

// close refuses every later push.
func (s *shard[T]) close() {
	s.mu.Lock()
	s.closed = true
	s.written.Or(closedBit)
	s.mu.Unlock()
}

// drain removes the queued tasks and appends them to ts. Cells claimed but
// not yet filled stay, and so does what follows them in the ring.
func (s *shard[T]) drain(ts []T) []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		t, ok := s.popRing()
		if !ok {
			break
		}
		ts = append(ts, t)
	}
	n := 0
	for {
		t, ok := s.q.Pop()
		if !ok {
			break
		}
		ts = append(ts, t)
		n++
	}
	s.unspilled.Add(uint64(n))
	s.spilling.Store(false)
	return ts
}
