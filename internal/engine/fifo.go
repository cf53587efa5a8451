package engine

// chunkLen is the number of tasks per queue chunk. With 8-byte tasks a chunk
// is half a kilobyte: large enough that allocation is rare, small enough that
// an idle shard keeps little memory.
const chunkLen = 64

type chunk[T any] struct {
	items [chunkLen]T
	next  *chunk[T]
}

// fifo is an unbounded first-in first-out queue built from fixed-size chunks.
// A drained queue keeps one chunk in use and one spare, so a steady stream of
// tasks allocates nothing while the memory of a burst goes back to the garbage
// collector. fifo is not safe for concurrent use; a shard guards it.
type fifo[T any] struct {
	head, tail *chunk[T]
	r, w       int // next read index in head, next write index in tail
	spare      *chunk[T]
}

func (q *fifo[T]) push(t T) {
	if q.tail == nil {
		c := q.acquire()
		q.head, q.tail = c, c
	}
	if q.w == chunkLen {
		c := q.acquire()
		q.tail.next = c
		q.tail = c
		q.w = 0
	}
	q.tail.items[q.w] = t
	q.w++
}

func (q *fifo[T]) pop() (t T, ok bool) {
	c := q.head
	if c == nil || (c == q.tail && q.r == q.w) {
		return t, false
	}
	t = c.items[q.r]
	var zero T
	c.items[q.r] = zero // let the task's closure be collected
	q.r++
	switch {
	case c == q.tail && q.r == q.w:
		q.r, q.w = 0, 0 // empty: rewind and reuse the chunk
	case c != q.tail && q.r == chunkLen:
		q.head = c.next
		q.r = 0
		c.next = nil
		q.spare = c
	}
	return t, true
}

func (q *fifo[T]) acquire() *chunk[T] {
	if c := q.spare; c != nil {
		q.spare = nil
		return c
	}
	return new(chunk[T])
}
