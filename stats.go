package crew

// Stats is a snapshot of a pool's counters. The fields are read one at a
// time while tasks run, so they agree with each other exactly only when the
// pool is quiet. The counters from Submitted on never go down.
//
// The counts are of the pool's own tasks. A [Group], [ResultGroup],
// [Stream] or [Map], and a [Keyed], [Priority] or [RateLimited], runs its
// tasks inside steps it submits to the pool (see [Hooks]), and the pool
// counts those steps: a group whose Wait ran its tasks itself leaves steps
// that find nothing to do, which run, or are dropped by [Pool.Shutdown],
// like any task.
type Stats struct {
	MaxWorkers int // the worker limit
	Workers    int // live worker goroutines
	Idle       int // workers parked until a task wakes them
	Running    int // tasks running now
	Queued     int // tasks waiting for a worker

	Submitted uint64 // tasks accepted
	Completed uint64 // tasks that finished, whatever their outcome
	// Failed counts the tasks whose failure is reported: Submit tasks (a
	// Pool's, a Keyed's, a Priority's or a RateLimited's) and function
	// pool calls that returned an error, panicked or called
	// runtime.Goexit. A Go task has no outcome to fail, and a group's
	// tasks are counted by their group.
	Failed   uint64
	Panicked uint64 // tasks that panicked
	Dropped  uint64 // queued tasks that Shutdown dropped unstarted
	// Cancelled counts the Submit tasks that Task.Cancel kept from
	// starting. Like Dropped, they are not among Completed: once the pool
	// is quiet, Submitted = Completed + Dropped + Cancelled.
	Cancelled uint64
}
