package engine

import (
	"runtime"
	"testing"
	"weak"

	"github.com/gocrew/crew/internal/leak"
)

func TestFIFOKeepsOrderAcrossChunks(t *testing.T) {
	var q fifo[int]
	next := 0
	for round, n := range []int{1, minChunk, minChunk + 1, 5000, 3, maxChunk + 7} {
		for i := range n {
			q.push(round*1_000_000 + i)
		}
		for i := range n {
			got, ok := q.pop()
			if !ok || got != round*1_000_000+i {
				t.Fatalf("round %d: pop %d = %d, %v", round, i, got, ok)
			}
			next++
		}
		if _, ok := q.pop(); ok {
			t.Fatalf("round %d: pop from an empty queue succeeded", round)
		}
	}
}

var heapFIFO *fifo[int]

func TestFIFOFirstPushAllocatesOnlyAChunk(t *testing.T) {
	leak.Check(t)
	allocs := testing.AllocsPerRun(10, func() {
		q := new(fifo[int])
		heapFIFO = q // on the heap, as in a shard: one allocation
		q.push(1)
		if got, ok := q.pop(); !ok || got != 1 {
			t.Fatalf("pop = %d, %v; want 1, true", got, ok)
		}
	})
	if allocs != 2 {
		t.Errorf("%v allocations for a new queue and its first task, want 2 (the queue and a chunk)", allocs)
	}
}

func TestFIFORepeatedBurstsReuseChunks(t *testing.T) {
	var q fifo[int]
	burst := func() {
		for i := range 100_000 {
			q.push(i)
		}
		for i := range 100_000 {
			if got, ok := q.pop(); !ok || got != i {
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
	var q fifo[int]
	for i := range 100_000 {
		q.push(i)
	}
	q.trim() // holds tasks: nothing to give back
	for i := range 100_000 {
		if got, ok := q.pop(); !ok || got != i {
			t.Fatalf("pop %d after trim = %d, %v", i, got, ok)
		}
	}
	if len(q.chunks) != 1 || len(q.chunks[0]) <= keepChunk {
		t.Fatalf("drained queue kept no big chunk for the next burst")
	}
	q.trim()
	if len(q.chunks) > 0 && len(q.chunks[0]) > keepChunk {
		t.Fatalf("trimmed queue keeps a chunk of %d tasks", len(q.chunks[0]))
	}
	if len(q.free) != 0 {
		t.Fatalf("trimmed queue keeps %d free chunks", len(q.free))
	}
	q.push(1)
	q.push(2)
	if a, _ := q.pop(); a != 1 {
		t.Fatalf("first pop after trim = %d, want 1", a)
	}
	if b, _ := q.pop(); b != 2 {
		t.Fatalf("second pop after trim = %d, want 2", b)
	}
}

func TestFIFOSteadyStreamDoesNotAllocate(t *testing.T) {
	var q fifo[int]
	allocs := testing.AllocsPerRun(1000, func() {
		for i := range 100 {
			q.push(i)
		}
		for range 100 {
			q.pop()
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per 100 pushes and pops of a drained queue", allocs)
	}
}

// Chunks that trim gives back become garbage, even after the lists of
// chunks outgrew the array they started in.
func TestFIFOTrimmedChunksAreCollected(t *testing.T) {
	var q fifo[int]
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
		q.push(i)
		if i%minChunk == 0 {
			note()
		}
	}
	note()
	for range n {
		q.pop()
	}
	q.trim()
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
	var q fifo[int]
	for i := range 100_000 {
		q.push(i)
	}
	grown := q.grown
	q.trim()
	if q.grown != grown {
		t.Fatalf("trim of a queue with a backlog set the next chunk size from %d to %d", grown, q.grown)
	}
	for i := range 100_000 {
		if got, ok := q.pop(); !ok || got != i {
			t.Fatalf("pop %d after trim = %d, %v", i, got, ok)
		}
	}
}
