package queue

import (
	"runtime"
	"testing"
	"weak"

	"github.com/gocrew/crew/internal/leak"
)

func TestFIFOKeepsOrderAcrossChunks(t *testing.T) {
	var q FIFO[int]
	next := 0
	for round, n := range []int{1, DefaultFirst, DefaultFirst + 1, 5000, 3, MaxChunk + 7} {
		for i := range n {
			q.Push(round*1_000_000 + i)
		}
		for i := range n {
			got, ok := q.Pop()
			if !ok || got != round*1_000_000+i {
				t.Fatalf("round %d: pop %d = %d, %v", round, i, got, ok)
			}
			next++
		}
		if _, ok := q.Pop(); ok {
			t.Fatalf("round %d: pop from an empty queue succeeded", round)
		}
	}
}

// keep is the largest chunk the tests let Trim leave a drained queue.
const keep = 1 << 10

// owner is a queue in a struct that lends it its lists, as a shard does.
type owner struct {
	q     FIFO[int]
	lists [4][]int
}

var heapOwner *owner

func TestFIFOFirstPushAllocatesOnlyAChunk(t *testing.T) {
	leak.Check(t)
	allocs := testing.AllocsPerRun(10, func() {
		o := new(owner)
		heapOwner = o // on the heap, as in a shard: one allocation
		o.q.Lend(o.lists[:], nil)
		o.q.Push(1)
		if got, ok := o.q.Pop(); !ok || got != 1 {
			t.Fatalf("pop = %d, %v; want 1, true", got, ok)
		}
	})
	if allocs != 2 {
		t.Errorf("%v allocations for a new queue and its first task, want 2 (the owner and a chunk)", allocs)
	}
}

// A queue lent a first chunk allocates nothing while it holds no more, and
// keeps that chunk through Trim.
func TestFIFOLentChunk(t *testing.T) {
	var o struct {
		q     FIFO[int]
		small [2]int
	}
	o.q.Keep = 64
	o.q.Lend(nil, o.small[:])
	allocs := testing.AllocsPerRun(100, func() {
		o.q.Push(1)
		o.q.Push(2)
		if a, _ := o.q.Pop(); a != 1 {
			t.Fatalf("pop = %d, want 1", a)
		}
		if b, _ := o.q.Pop(); b != 2 {
			t.Fatalf("pop = %d, want 2", b)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations for two elements in a lent chunk", allocs)
	}
	for i := range 1000 {
		o.q.Push(i)
	}
	for i := range 1000 {
		if got, ok := o.q.Pop(); !ok || got != i {
			t.Fatalf("pop %d = %d, %v", i, got, ok)
		}
	}
	if chunks, _, room, _ := o.q.Memory(); chunks != 1 || room != 2 {
		t.Fatalf("a drained queue with Keep holds %d chunks of room %d, want its lent chunk", chunks, room)
	}
}

// PopBack takes from the tail, across chunks, and leaves the head's order.
func TestFIFOPopBack(t *testing.T) {
	var q FIFO[int]
	q.First = 4
	for i := range 50 {
		q.Push(i)
	}
	for i := 49; i >= 20; i-- {
		if got, ok := q.PopBack(); !ok || got != i {
			t.Fatalf("PopBack = %d, %v; want %d", got, ok, i)
		}
	}
	q.Push(100)
	for i := range 20 {
		if got, ok := q.Pop(); !ok || got != i {
			t.Fatalf("Pop = %d, %v; want %d", got, ok, i)
		}
	}
	if got, ok := q.PopBack(); !ok || got != 100 || q.Len() != 0 {
		t.Fatalf("PopBack = %d, %v, len %d; want 100 and empty", got, ok, q.Len())
	}
	if _, ok := q.PopBack(); ok {
		t.Fatal("PopBack from an empty queue succeeded")
	}
	q.Push(7)
	if got, _ := q.Peek(); got != 7 {
		t.Fatalf("Peek = %d, want 7", got)
	}
}

func TestFIFORepeatedBurstsReuseChunks(t *testing.T) {
	var q FIFO[int]
	burst := func() {
		for i := range 100_000 {
			q.Push(i)
		}
		for i := range 100_000 {
			if got, ok := q.Pop(); !ok || got != i {
				t.Fatalf("pop %d = %d, %v", i, got, ok)
			}
		}
	}
	burst()
	if allocs := testing.AllocsPerRun(10, burst); allocs != 0 {
		t.Fatalf("%.1f allocations per burst after the first", allocs)
	}
}

func TestFIFOTrimReturnsBurstMemory(t *testing.T) {
	var q FIFO[int]
	for i := range 100_000 {
		q.Push(i)
	}
	q.Trim(keep) // holds tasks: nothing to give back
	for i := range 100_000 {
		if got, ok := q.Pop(); !ok || got != i {
			t.Fatalf("pop %d after trim = %d, %v", i, got, ok)
		}
	}
	if chunks, free, _, largest := q.Memory(); chunks-free != 1 || largest <= keep {
		t.Fatalf("drained queue kept no big chunk for the next burst")
	}
	q.Trim(keep)
	if _, free, _, largest := q.Memory(); largest > keep || free != 0 {
		t.Fatalf("trimmed queue keeps a chunk of %d tasks and %d free chunks", largest, free)
	}
	q.Push(1)
	q.Push(2)
	if a, _ := q.Pop(); a != 1 {
		t.Fatalf("first pop after trim = %d, want 1", a)
	}
	if b, _ := q.Pop(); b != 2 {
		t.Fatalf("second pop after trim = %d, want 2", b)
	}
}

func TestFIFOSteadyStreamDoesNotAllocate(t *testing.T) {
	var q FIFO[int]
	allocs := testing.AllocsPerRun(1000, func() {
		for i := range 100 {
			q.Push(i)
		}
		for range 100 {
			q.Pop()
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per 100 pushes and pops of a drained queue", allocs)
	}
}

// Chunks that trim gives back become garbage, even after the lists of
// chunks outgrew the array they started in.
func TestFIFOTrimmedChunksAreCollected(t *testing.T) {
	var q FIFO[int]
	seen := map[weak.Pointer[int]]bool{}
	note := func() {
		for _, list := range [][][]int{q.chunks, q.free} {
			for _, c := range list {
				seen[weak.Make(&c[0])] = true
			}
		}
	}
	const n = 600_000 // more chunks than listCap
	for i := range n {
		q.Push(i)
		if i%DefaultFirst == 0 {
			note()
		}
	}
	note()
	for range n {
		q.Pop()
	}
	q.Trim(keep)
	runtime.GC()
	alive := 0
	for p := range seen {
		if p.Value() != nil {
			alive++
		}
	}
	if alive > len(q.chunks) {
		t.Fatalf("%d of %d chunks still reachable after trim; the queue holds %d", alive, len(seen), len(q.chunks))
	}
	runtime.KeepAlive(&q)
}

// A trim while the queue holds tasks keeps its chunks and its growth.
func TestFIFOTrimKeepsABacklog(t *testing.T) {
	var q FIFO[int]
	for i := range 100_000 {
		q.Push(i)
	}
	grown := q.grown
	q.Trim(keep)
	if q.grown != grown {
		t.Fatalf("trim of a queue with a backlog set the next chunk size from %d to %d", grown, q.grown)
	}
	for i := range 100_000 {
		if got, ok := q.Pop(); !ok || got != i {
			t.Fatalf("pop %d after trim = %d, %v", i, got, ok)
		}
	}
}
