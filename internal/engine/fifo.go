package engine

const (
	// minChunk is the number of tasks in a queue's first chunk: with 8-byte
	// tasks, half a kilobyte, so an idle shard keeps little memory.
	minChunk = 64
	// maxChunk bounds chunk growth: each new chunk of a growing queue is
	// twice the size of the last, so a backlog of n tasks costs about
	// log2(n/minChunk) allocations, not n/minChunk.
	maxChunk = 1 << 16
	// keepChunk is the largest chunk a drained queue keeps for reuse; a
	// bigger one, left by a burst, goes back to the garbage collector.
	keepChunk = 1 << 10
)

type chunk[T any] struct {
	items []T
	next  *chunk[T]
}

// fifo is an unbounded first-in first-out queue built from chunks that
// double in size as the queue grows. A queue that drains keeps one chunk of
// at most keepChunk tasks (and one small spare), so a steady stream of tasks
// allocates nothing, while the memory of a burst goes back to the garbage
// collector. fifo is not safe for concurrent use; a shard guards it.
type fifo[T any] struct {
	head, tail *chunk[T]
	r, w       int32 // next read index in head, next write index in tail; chunks hold at most maxChunk
	spare      *chunk[T]
}

func (q *fifo[T]) push(t T) {
	if q.tail == nil {
		c := q.acquire(minChunk)
		q.head, q.tail = c, c
	}
	if int(q.w) == len(q.tail.items) {
		c := q.acquire(min(2*len(q.tail.items), maxChunk))
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
		q.r, q.w = 0, 0 // empty: rewind and reuse the chunk, if small
		if len(c.items) > keepChunk {
			q.head, q.tail = nil, nil
		}
	case c != q.tail && int(q.r) == len(c.items):
		q.head = c.next
		q.r = 0
		c.next = nil
		if len(c.items) == minChunk {
			q.spare = c
		}
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

// acquire returns an empty chunk of n tasks, the spare if it fits.
func (q *fifo[T]) acquire(n int) *chunk[T] {
	if c := q.spare; c != nil && len(c.items) == n {
		q.spare = nil
		return c
	}
	return &chunk[T]{items: make([]T, n)}
}
