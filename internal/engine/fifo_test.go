package engine

import "testing"

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

func TestFIFOReturnsBurstMemory(t *testing.T) {
	var q fifo[int]
	for i := range 100_000 {
		q.push(i)
	}
	for range 100_000 {
		q.pop()
	}
	if q.head != nil && len(q.head.items) > keepChunk {
		t.Fatalf("drained queue keeps a chunk of %d tasks", len(q.head.items))
	}
	if q.spare != nil && len(q.spare.items) > minChunk {
		t.Fatalf("drained queue keeps a spare of %d tasks", len(q.spare.items))
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
