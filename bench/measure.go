package main

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// A Sample is the measurement of one full run of one subject.
type Sample struct {
	Task     string `json:"task"`
	Procs    int    `json:"procs"`
	Workload string `json:"workload"`
	Subject  string `json:"subject"`
	Run      int    `json:"run"`
	// WallNs is the wall time of the run: pool creation, submission, waiting and teardown.
	WallNs int64 `json:"wall_ns"`
	// Bytes and Allocs are runtime.MemStats deltas (TotalAlloc, Mallocs) over the run.
	Bytes  uint64 `json:"bytes"`
	Allocs uint64 `json:"allocs"`
	// PeakHeap is the highest heap-object bytes (HeapAlloc) the sampler saw,
	// less those live when the run started (StartHeap). The runtime never
	// frees goroutine descriptors, so StartHeap grows once many goroutines
	// have existed; the difference is what the run itself added.
	PeakHeap  uint64 `json:"peak_heap_bytes"`
	StartHeap uint64 `json:"start_heap_bytes"`
	// PeakGoroutines is the highest goroutine count seen by the sampler.
	PeakGoroutines int `json:"peak_goroutines"`
	// Leftover counts goroutines still alive right after the run returned,
	// beyond those alive before it (e.g. workers a pool lets exit later).
	Leftover int `json:"leftover_goroutines"`
}

// sampleEvery is how often the sampler reads the heap size and goroutine count.
const sampleEvery = time.Millisecond

// measure runs f once after a GC and returns its sample (without labels).
// A sampler goroutine reads runtime/metrics (which, unlike ReadMemStats,
// does not stop the world) every sampleEvery while f runs.
func measure(f func()) Sample {
	runtime.GC()
	s := startSampler()
	base := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	start := time.Now()
	f()
	wall := time.Since(start)

	leftover := runtime.NumGoroutine() - base
	runtime.ReadMemStats(&after)
	startHeap, heap, goroutines := s.stop()
	settle(base - 1) // the sampler has exited
	return Sample{
		WallNs:         wall.Nanoseconds(),
		Bytes:          after.TotalAlloc - before.TotalAlloc,
		Allocs:         after.Mallocs - before.Mallocs,
		PeakHeap:       heap - startHeap,
		StartHeap:      startHeap,
		PeakGoroutines: goroutines,
		Leftover:       max(leftover, 0),
	}
}

// settle waits (up to 2 s) until no more than n goroutines are alive, so that
// workers a pool left behind do not run into the next measurement.
func settle(n int) {
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// A sampler tracks the peak heap and goroutine count from its own goroutine.
type sampler struct {
	samples    []metrics.Sample
	start      uint64
	heap       uint64
	goroutines int
	quit, done chan struct{}
}

func startSampler() *sampler {
	s := &sampler{
		samples: []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/sched/goroutines:goroutines"},
		},
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	s.read()
	s.start = s.heap
	started := make(chan struct{})
	go s.loop(started)
	<-started
	return s
}

func (s *sampler) loop(started chan<- struct{}) {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	close(started)
	for {
		s.read()
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
	}
}

func (s *sampler) read() {
	metrics.Read(s.samples)
	s.heap = max(s.heap, s.samples[0].Value.Uint64())
	s.goroutines = max(s.goroutines, int(s.samples[1].Value.Uint64()))
}

// stop takes a last reading, ends the sampler and returns the heap when it
// started and the peaks.
func (s *sampler) stop() (start, heap uint64, goroutines int) {
	close(s.quit)
	<-s.done
	s.read()
	return s.start, s.heap, s.goroutines
}

// warmGoroutines starts n goroutines at once and lets them exit. The runtime
// allocates a goroutine's descriptor and stack once and reuses them for ever,
// so without this the first subject to start many goroutines would pay for
// allocations that every later subject gets for free.
func warmGoroutines(n int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { <-release })
	}
	close(release)
	wg.Wait()
}
