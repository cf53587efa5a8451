package engine

const (
	// minChunk is the number of tasks in a queue's first chunk: with 8-byte
	// tasks, 2 KB. Only a backlog beyond a shard's ring needs one.
	minChunk = 256
	// chunkGrowth is how much bigger each chunk a queue allocates is than
	// the last it allocated, so that a backlog of n tasks costs about
	// log2(n/minChunk) allocations, not n/minChunk. A larger factor saves
	// a few allocations (growing by 4 saved rand 1u-1Mt some 15 a run) but
	// leaves the newest chunk emptier: at 100,000 queued tasks, 28 bytes a
	// task against 10.
	chunkGrowth = 2
	// maxChunk bounds chunk growth.
	maxChunk = 1 << 16
	// keepChunk is the largest chunk that trim leaves a drained queue; a
	// bigger one, left by a burst, goes back to the garbage collector.
	keepChunk = 1 << 10
)

// fifo is an unbounded first-in first-out queue built from chunks, each
// bigger than the last one allocated. It recycles what it empties: emptied
// chunks go on a free list, which the queue draws on before it allocates,
// and a queue that drains rewinds into its last chunk. A backlog that comes
// and goes in bursts thus allocates only while it outgrows the largest
// burst so far: at 1M tasks from one producer, a queue that threw away the
// chunks of each burst made some 170 allocations a run. trim gives the
// memory of past bursts back. A chunk is a bare slice, one allocation
// (a linked chunk costs two), and the lists of chunks are short. fifo is
// not safe for concurrent use; a shard guards it.
type fifo[T any] struct {
	chunks [][]T // the queue's chunks, oldest first
	r, w   int32 // next read index in chunks[0], next write index in the last; chunks hold at most maxChunk
	free   [][]T
	grown  int // the size of the last chunk allocated
	// lists holds the two lists until one outgrows its half. Most shards
	// never spill, but allocating the lists on a shard's first spill
	// cost a pool four of the 50-60 allocations it made in the matrix's
	// rand 1u-1Mt cell. A fifo must not be copied once used.
	lists [2 * listCap][]T
}

// listCap is the room each of a queue's two lists of chunks starts with:
// 8 chunks hold some 65,000 tasks; a longer list moves to the heap.
const listCap = 8

func (q *fifo[T]) push(t T) {
	n := len(q.chunks)
	if q.chunks == nil {
		q.chunks, q.free = q.lists[:0:listCap], q.lists[listCap:listCap:2*listCap]
	}
	if n == 0 || int(q.w) == len(q.chunks[n-1]) {
		q.chunks = appendChunk(q.chunks, q.acquire())
		q.w = 0
		n++
	}
	q.chunks[n-1][q.w] = t
	q.w++
}

func (q *fifo[T]) pop() (t T, ok bool) {
	if t, ok = q.peek(); !ok {
		return t, false
	}
	head := q.chunks[0]
	var zero T
	head[q.r] = zero // let the task's closure be collected
	q.r++
	switch {
	case len(q.chunks) == 1 && q.r == q.w:
		q.r, q.w = 0, 0 // empty: rewind into the chunk
	case len(q.chunks) > 1 && int(q.r) == len(head):
		q.free = appendChunk(q.free, head)
		n := copy(q.chunks, q.chunks[1:])
		q.chunks[n] = nil // the vacated slot must not keep a chunk alive
		q.chunks = q.chunks[:n]
		q.r = 0
	}
	return t, true
}

// appendChunk appends c to list. A list that outgrows its array leaves
// that array's slots cleared: the two lists start in one array, and slots
// left behind there would keep chunks alive after trim.
func appendChunk[T any](list [][]T, c []T) [][]T {
	if len(list) < cap(list) {
		return append(list, c)
	}
	grown := append(list, c)
	clear(list)
	return grown
}

// peek returns the task at the head without removing it.
func (q *fifo[T]) peek() (t T, ok bool) {
	if len(q.chunks) == 0 || len(q.chunks) == 1 && q.r == q.w {
		return t, false
	}
	return q.chunks[0][q.r], true
}

// acquire returns an empty chunk: a free one, whatever its size, or a new
// one bigger than the last one allocated. (Growing from the queue's last
// chunk instead, often a small recycled one, kept new chunks small and
// allocations many.)
func (q *fifo[T]) acquire() []T {
	if n := len(q.free); n > 0 {
		c := q.free[n-1]
		q.free[n-1] = nil
		q.free = q.free[:n-1]
		return c
	}
	q.grown = min(max(chunkGrowth*q.grown, minChunk), maxChunk)
	return make([]T, q.grown)
}

// trim gives back the free chunks, and the chunk of a drained queue if it
// holds more than keepChunk tasks. A queue that holds tasks keeps its
// chunks, and keeps growing from the last size it allocated.
func (q *fifo[T]) trim() {
	clear(q.free)
	q.free = q.free[:0]
	if _, ok := q.peek(); ok {
		return
	}
	q.grown = 0
	if len(q.chunks) == 1 && len(q.chunks[0]) > keepChunk {
		q.chunks[0] = nil
		q.chunks = q.chunks[:0]
		q.r, q.w = 0, 0
	}
}
