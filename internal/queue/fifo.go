// Package queue holds crew's one FIFO: the queue that the engine's shards
// spill a backlog into, and that groups and layers keep their own tasks
// in.
package queue

// A FIFO is an unbounded first-in first-out queue built from chunks, each
// bigger than the last one allocated (twice as big, from First up to
// MaxChunk), so that a backlog of n elements costs about log2(n/First)
// allocations. It recycles what it empties: emptied chunks go on a free
// list, which the queue draws on before it allocates, and a queue that
// drains rewinds into its last chunk. A backlog that comes and goes in
// bursts thus allocates only while it outgrows the largest burst so far;
// Trim gives the memory of past bursts back. A chunk is a bare slice, one
// allocation, and the lists of chunks are short.
//
// The zero FIFO is ready to use; its owner may set the fields below before
// the first Push, and lend it storage (Lend). A FIFO is not safe for
// concurrent use, and must not be copied once used.
type FIFO[T any] struct {
	// First is the size of the first chunk the queue allocates
	// (DefaultFirst if 0).
	First int
	// Keep, if positive, makes Pop trim a queue as it empties: the queue
	// then keeps at most one chunk, of at most Keep elements. At 0 the
	// owner calls Trim when it sees fit.
	Keep int

	chunks [][]T // the queue's chunks, oldest first
	r, w   int   // next read index in chunks[0], next write index in the last
	n      int   // elements held
	free   [][]T
	grown  int // the size of the last chunk allocated
	lent   *T  // the first element of the owner's chunk (see Lend), nil if none
}

const (
	// DefaultFirst is the size of a queue's first chunk unless First says
	// otherwise.
	DefaultFirst = 256
	// MaxChunk bounds the size of a chunk.
	MaxChunk = 1 << 16
)

// Lend gives the queue storage of its owner's: lists, an array the queue
// keeps its two lists of chunks in until one outgrows its half (so that a
// first push allocates at most a chunk), and first, a chunk the queue uses
// first (so that a queue that never holds more allocates nothing). Either
// may be nil. Call it before the first Push.
func (q *FIFO[T]) Lend(lists [][]T, first []T) {
	if half := len(lists) / 2; half > 0 {
		q.chunks, q.free = lists[:0:half], lists[half:half:2*half]
	}
	if len(first) > 0 {
		q.free = appendChunk(q.free, first[:len(first):len(first)])
		q.lent = &first[0]
	}
}

// Len returns the number of elements in the queue.
func (q *FIFO[T]) Len() int { return q.n }

// Push appends t to the queue.
func (q *FIFO[T]) Push(t T) {
	n := len(q.chunks)
	if n == 0 || q.w == len(q.chunks[n-1]) {
		q.chunks = appendChunk(q.chunks, q.acquire())
		q.w = 0
		n++
	}
	q.chunks[n-1][q.w] = t
	q.w++
	q.n++
}

// Pop removes and returns the first element, if any.
func (q *FIFO[T]) Pop() (t T, ok bool) {
	if q.n == 0 {
		return t, false
	}
	head := q.chunks[0]
	t = head[q.r]
	var zero T
	head[q.r] = zero // let the element be collected
	q.r++
	q.n--
	switch {
	case q.n == 0:
		q.r, q.w = 0, 0 // empty: rewind into the chunk (a single one)
		if q.Keep > 0 {
			q.Trim(q.Keep)
		}
	case q.r == len(head):
		q.free = appendChunk(q.free, head)
		n := copy(q.chunks, q.chunks[1:])
		q.chunks[n] = nil // the vacated slot must not keep a chunk alive
		q.chunks = q.chunks[:n]
		q.r = 0
	}
	return t, true
}

// Take is Pop for a queue known not to be empty.
func (q *FIFO[T]) Take() T {
	t, _ := q.Pop()
	return t
}

// PopBack removes and returns the last element, if any.
func (q *FIFO[T]) PopBack() (t T, ok bool) {
	if q.n == 0 {
		return t, false
	}
	last := len(q.chunks) - 1
	q.w--
	t = q.chunks[last][q.w]
	var zero T
	q.chunks[last][q.w] = zero
	q.n--
	switch {
	case q.n == 0: // then the queue has one chunk: Pop leaves none empty at the head, Push none at the tail
		q.r, q.w = 0, 0
		if q.Keep > 0 {
			q.Trim(q.Keep)
		}
	case q.w == 0:
		q.free = appendChunk(q.free, q.chunks[last])
		q.chunks[last] = nil
		q.chunks = q.chunks[:last]
		q.w = len(q.chunks[last-1])
	}
	return t, true
}

// Memory reports what the queue holds of memory: its chunks (free ones
// included), how many of them are free, how many elements they have room
// for, and the size of the largest.
func (q *FIFO[T]) Memory() (chunks, free, room, largest int) {
	for _, list := range [][][]T{q.chunks, q.free} {
		for _, c := range list {
			chunks++
			room += len(c)
			largest = max(largest, len(c))
		}
	}
	return chunks, len(q.free), room, largest
}

// Peek returns the first element without removing it.
func (q *FIFO[T]) Peek() (t T, ok bool) {
	if q.n == 0 {
		return t, false
	}
	return q.chunks[0][q.r], true
}

// appendChunk appends c to list. A list that outgrows its array leaves
// that array's slots cleared: the two lists may start in one array (see
// Lend), and slots left behind there would keep chunks alive after Trim.
func appendChunk[T any](list [][]T, c []T) [][]T {
	if len(list) < cap(list) {
		return append(list, c)
	}
	grown := append(list, c)
	clear(list)
	return grown
}

// acquire returns an empty chunk: a free one, whatever its size, or a new
// one bigger than the last one allocated. (Growing from
// the queue's last chunk instead, often a small recycled one, would keep
// new chunks small and allocations many.)
func (q *FIFO[T]) acquire() []T {
	if c, ok := PopLast(&q.free); ok {
		return c
	}
	first := q.First
	if first <= 0 {
		first = DefaultFirst
	}
	q.grown = min(max(2*q.grown, first), MaxChunk)
	return make([]T, q.grown)
}

// PopLast removes the last element of the stack s and reports whether s
// held one. It clears the element's slot, so that s's array does not keep
// it alive.
func PopLast[T any](s *[]T) (t T, ok bool) {
	n := len(*s)
	if n == 0 {
		return t, false
	}
	t = (*s)[n-1]
	var zero T
	(*s)[n-1] = zero
	*s = (*s)[:n-1]
	return t, true
}

// Trim gives back the free chunks, and the chunk of a drained queue if it
// holds more than keep elements. A queue that holds elements keeps its
// chunks, and keeps growing from the last size it allocated. A lent chunk
// (see Lend) stays with the queue.
func (q *FIFO[T]) Trim(keep int) {
	var lent []T
	for _, c := range q.free {
		if q.lent != nil && &c[0] == q.lent {
			lent = c
		}
	}
	clear(q.free)
	q.free = q.free[:0]
	if lent != nil {
		q.free = append(q.free, lent)
	}
	if q.n > 0 {
		return
	}
	q.grown = 0
	if len(q.chunks) == 1 && len(q.chunks[0]) > keep && &q.chunks[0][0] != q.lent {
		q.chunks[0] = nil
		q.chunks = q.chunks[:0]
		q.r, q.w = 0, 0
	}
}
