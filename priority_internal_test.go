package crew

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// With a fake clock, the order of starts is exactly the aging rule's, and
// the starvation bound holds for every task: a task of priority p
// submitted at t starts after no task submitted at or after
// t + (q-p)×aging with priority q. The bound is tight: a task of priority
// q submitted just before that instant does overtake it.
func TestPriorityAgingOrderAndBoundExactly(t *testing.T) {
	leak.Check(t)
	const aging = int64(10 * time.Millisecond)
	p := New(1)
	defer p.Stop()
	q := NewPriority(p, WithAging(time.Duration(aging)))
	var now int64
	q.clock = func() int64 { return now } // read under q.mu, written before each Go

	started := make(chan struct{})
	release := make(chan struct{})
	p.Go(func() { close(started); <-release })
	<-started

	type job struct {
		seq  int
		prio int
		at   int64
	}
	var jobs []job
	var ran []job // one worker: one task at a time
	submit := func(j job) {
		now = j.at
		j.seq = len(jobs)
		jobs = append(jobs, j)
		if err := q.Go(j.prio, func() { ran = append(ran, j) }); err != nil {
			t.Fatal(err)
		}
	}
	// The scripted case: a task of priority 0 at t=0, then one of
	// priority 3 every millisecond. Those before 30ms overtake it; the one
	// at exactly 30ms ties and loses to it (earlier submission); later
	// ones cannot overtake it.
	submit(job{prio: 0, at: 0})
	for ms := int64(1); ms <= 50; ms++ {
		submit(job{prio: 3, at: ms * int64(time.Millisecond)})
	}
	// Random ones after, from 100ms on: priorities up to 9 cannot reach
	// back to the scripted ones (9×10ms < 100ms).
	now = 100 * int64(time.Millisecond)
	for range 500 {
		submit(job{prio: rand.IntN(10), at: now + rand.Int64N(3*int64(time.Millisecond))})
	}
	close(release)
	q.Wait()

	if len(ran) != len(jobs) {
		t.Fatalf("%d of %d ran", len(ran), len(jobs))
	}
	if i := slices.IndexFunc(ran, func(j job) bool { return j.seq == 0 }); i != 29 {
		t.Fatalf("the priority-0 task ran %dth, want 30th (after the 29 submitted before 30ms)", i+1)
	}
	// The whole order is the aging rule's: by at - prio×aging, then by
	// submission.
	want := slices.Clone(jobs)
	slices.SortStableFunc(want, func(a, b job) int {
		return cmp.Compare(a.at-int64(a.prio)*aging, b.at-int64(b.prio)*aging)
	})
	if !slices.Equal(ran, want) {
		t.Fatal("the start order is not the aging rule's")
	}
	// The bound, task by task.
	pos := make([]int, len(jobs))
	for i, j := range ran {
		pos[j.seq] = i
	}
	for _, a := range jobs {
		for _, b := range jobs {
			if b.seq > a.seq && pos[b.seq] < pos[a.seq] && b.at >= a.at+int64(b.prio-a.prio)*aging {
				t.Fatalf("task %+v overtook %+v, past the bound", b, a)
			}
		}
	}
}
