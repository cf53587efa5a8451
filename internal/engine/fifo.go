package engine

const (
	// minChunk is the number of tasks in a queue's first chunk: with 8-byte
	// tasks, 2 KB. Only a backlog beyond a shard's ring needs one.
	minChunk = 256
	// chunkGrowth is how much bigger each chunk a queue allocates is than
	// the last it allocated, so that a backlog of n tasks costs about
	// log4(n/minChunk) allocations, not n/minChunk. Growing by 2 from 64
	// tasks cost rand 1u-1Mt some 30 more allocations a run.
	chunkGrowth = 4
	// maxChunk bounds chunk growth.
	maxChunk = 1 << 16
	// keepChunk is the largest chunk that trim leaves a drained queue; a
	// bigger one, left by a burst, goes back to the garbage collector.
	keepChunk = 1 << 10
)

type chunk[T any] struct {
	items []T
	next  *chunk[T] // the next chunk of the queue, or of the free list
}

// fifo is an unbounded first-in first-out queue built from chunks, each
// bigger than the last one allocated. It recycles what it empties: emptied
// chunks go on a free list, which the queue draws on before it allocates,
// and a queue that drains rewinds into its last chunk. A backlog that comes
// and goes in bursts thus allocates only while it outgrows the largest
// burst so far: at 1M tasks from one producer, a queue that threw away the
// chunks of each burst made some 170 allocations a run. trim gives the
// memory of past bursts back. fifo is not safe for concurrent use; a shard
// guards it.
type fifo[T any] struct {
	head, tail *chunk[T]
	r, w       int32 // next read index in head, next write index in tail; chunks hold at most maxChunk
	free       *chunk[T]
	grown      int // the size of the last chunk allocated
}

func (q *fifo[T]) push(t T) {
	if q.tail == nil {
		c := q.acquire()
		q.head, q.tail = c, c
	}
	if int(q.w) == len(q.tail.items) {
		c := q.acquire()
		q.tail.next = c
		q.tail = c
		q.w = 0
	}
	q.tail.items[q.w] = t
	q.w++
}

func (q *fifo[T]) pop() (t T, ok bool) {
	if t, ok = q.peek(); !ok {
		return t, false
	}
	c := q.head
	var zero T
	c.items[q.r] = zero // let the task's closure be collected
	q.r++
	switch {
	case c == q.tail && q.r == q.w:
		q.r, q.w = 0, 0 // empty: rewind into the chunk
	case c != q.tail && int(q.r) == len(c.items):
		q.head = c.next
		q.r = 0
		c.next = q.free
		q.free = c
	}
	return t, true
}

// peek returns the task at the head without removing it.
func (q *fifo[T]) peek() (t T, ok bool) {
	c := q.head
	if c == nil || (c == q.tail && q.r == q.w) {
		return t, false
	}
	return c.items[q.r], true
}

// acquire returns an empty chunk: a free one, whatever its size, or a new
// one bigger than the last one allocated. (Growing from the queue's last
// chunk instead, often a small recycled one, kept new chunks small and
// allocations many.)
func (q *fifo[T]) acquire() *chunk[T] {
	if c := q.free; c != nil {
		q.free = c.next
		c.next = nil
		return c
	}
	q.grown = min(max(chunkGrowth*q.grown, minChunk), maxChunk)
	return &chunk[T]{items: make([]T, q.grown)}
}

// trim gives back the free chunks, and the chunk of a drained queue if it
// holds more than keepChunk tasks. A queue that holds tasks keeps its
// chunks.
func (q *fifo[T]) trim() {
	q.free, q.grown = nil, 0
	if _, ok := q.peek(); !ok && q.head != nil && len(q.head.items) > keepChunk {
		q.head, q.tail = nil, nil
		q.r, q.w = 0, 0
	}
}
