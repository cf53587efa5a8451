// Package subjects wraps crew and each of its peers behind one small interface,
// so the go test benchmarks and the crewbench program run exactly the same code.
package subjects

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// A Pool is one running instance of a subject, bound to a single task function
// (binding it once spares peers that need a wrapper a per-task allocation).
type Pool interface {
	// Submit hands one execution of the bound task to the pool. It may block
	// while the pool is at its limit, as the library does.
	Submit()
	// StopWait waits until every submitted task has finished, then releases
	// the pool the way the library's users do.
	StopWait()
}

// A Subject is a library (or hand-made baseline) under measurement.
type Subject struct {
	Name string
	// Crew marks crew itself; every other subject is a peer.
	Crew bool
	// New starts a pool that runs at most limit tasks at once and runs task on
	// every Submit. queue is how many tasks the caller intends to submit, for
	// the pools that need a queue capacity up front (see queueCap).
	New func(limit, queue int, task func()) Pool
}

// maxQueue caps up-front queue capacities; pond's benchmark uses 1,000,000.
const maxQueue = 1_000_000

func queueCap(queue int) int { return min(max(queue, 1), maxQueue) }

// All lists every subject, crew first.
func All() []Subject {
	return []Subject{
		Crew,
		Ants,
		PondEager, PondBalanced, PondLazy,
		Pond2Submit, Pond2Go,
		Gammazero,
		Conc,
		Errgroup,
		Goroutines,
		ChanPoolUnbuffered, ChanPoolBuffered,
	}
}

// Select returns the subjects named in the comma-separated list, in All's
// order; "all" or "" selects every subject.
func Select(list string) ([]Subject, error) {
	if list == "" || list == "all" {
		return All(), nil
	}
	want := map[string]bool{}
	for name := range strings.SplitSeq(list, ",") {
		want[strings.TrimSpace(name)] = true
	}
	var out []Subject
	for _, s := range All() {
		if want[s.Name] {
			out = append(out, s)
			delete(want, s.Name)
		}
	}
	for name := range want {
		return nil, fmt.Errorf("unknown subject %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return out, nil
}

// Names lists the names of All.
func Names() []string {
	var names []string
	for _, s := range All() {
		names = append(names, s.Name)
	}
	return names
}

// Run is one full matrix run: it creates the pool, starts users goroutines
// that each submit tasksPerUser tasks, waits for every task and tears the pool
// down.
func (s Subject) Run(users, tasksPerUser, limit int, task func()) {
	p := s.New(limit, users*tasksPerUser, task)
	var wg sync.WaitGroup
	for range users {
		wg.Go(func() {
			for range tasksPerUser {
				p.Submit()
			}
		})
	}
	wg.Wait()
	p.StopWait()
}

// RunPaced is Run with bursts: each user pauses for gap after every burst
// tasks it submits (burst <= 0: no pause).
func (s Subject) RunPaced(users, tasksPerUser, limit, burst int, gap time.Duration, task func()) {
	if burst <= 0 {
		s.Run(users, tasksPerUser, limit, task)
		return
	}
	p := s.New(limit, users*tasksPerUser, task)
	var wg sync.WaitGroup
	for range users {
		wg.Go(func() {
			for i := range tasksPerUser {
				if i > 0 && i%burst == 0 {
					time.Sleep(gap)
				}
				p.Submit()
			}
		})
	}
	wg.Wait()
	p.StopWait()
}

// must panics on a submit error: a lost task would hang the benchmark.
func must(err error) {
	if err != nil {
		panic(err)
	}
}
