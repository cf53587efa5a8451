package crew

import "github.com/gocrew/crew/internal/engine"

// Stats is a snapshot of a pool's counters. The fields are read one at a
// time while tasks run, so they agree with each other exactly only when the
// pool is quiet. The counters from Submitted on never go down.
//
// The counts are of the pool's own tasks. A Group, ResultGroup, Stream or
// Map, and a Keyed, Priority or RateLimited, runs its tasks inside steps
// it submits to the pool (see Hooks), and the pool counts those steps: a
// group whose Wait ran its tasks itself leaves steps that find nothing to
// do, which run, or are dropped by Shutdown, like any task.
type Stats struct {
	MaxWorkers int // the worker limit
	Workers    int // live worker goroutines
	Idle       int // workers parked until a task wakes them
	Running    int // tasks running now
	Queued     int // tasks waiting for a worker

	Submitted uint64 // tasks accepted
	Completed uint64 // tasks that finished, whatever their outcome
	Failed    uint64 // Submit tasks (the pool's or a Keyed's, Priority's or RateLimited's) that returned an error, panicked or called Goexit; a group's tasks are not counted
	Panicked  uint64 // tasks that panicked
	Dropped   uint64 // queued tasks that Shutdown dropped unstarted
}

// Stats returns a snapshot of the pool's counters. It takes no lock that
// tasks wait for; it reads each worker's own count of finished tasks, so
// its cost grows with the live workers (a few nanoseconds each).
func (p *Pool) Stats() Stats {
	if p.unusable() {
		return Stats{}
	}
	// Submit tasks that Shutdown dropped as a worker began them ran as
	// far as the engine knows. A worker counts one as late before the
	// engine counts it as completed, so Completed less the late ones can
	// dip for a moment: it never reports less than it has. The highest
	// value reported is read first: one that a concurrent call published
	// after our reading of the engine could exceed our Submitted.
	high := p.completedHigh.Load()
	s := statsOf(p.e.Stats(), p.failed.Load(), p.panicked.Load())
	late := p.lateDrops.Load()
	s.Dropped += late
	s.Completed = max(s.Completed-min(late, s.Completed), high)
	for s.Completed > high && !p.completedHigh.CompareAndSwap(high, s.Completed) {
		high = p.completedHigh.Load()
	}
	return s
}

// statsOf turns the engine's counters into Stats, adding the failures and
// panics that the layer above the engine counts itself.
func statsOf(s engine.Stats, failed, panicked uint64) Stats {
	return Stats{
		MaxWorkers: s.MaxWorkers,
		Workers:    s.Workers,
		Idle:       s.Idle,
		Running:    int(min(max(0, s.Unfinished-s.Queued), int64(s.Workers))), // a task runs on a live worker
		Queued:     int(s.Queued),
		Submitted:  s.Completed + s.Dropped + uint64(s.Unfinished),
		Completed:  s.Completed,
		Failed:     failed,
		Panicked:   s.Panicked + panicked,
		Dropped:    s.Dropped,
	}
}
