package workload

import (
	"crypto/sha256"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// A Task is a kind of work the users submit, with the workloads it runs under.
type Task struct {
	Name      string
	Fn        func()
	Workloads []Workload
}

// Tasks lists every task kind: the two of the matrix, the CPU-bound one, and
// the service workloads, each of which brings its own task (Fn nil).
var Tasks = []Task{
	{"rand", RandFloat, Matrix},
	{"sleep", Sleep10ms, Matrix},
	{"cpu", SHA256, []Workload{CPU}},
	{"service", nil, Service},
}

// sink keeps task results live so the compiler cannot drop the work.
var sink atomic.Uint64

// RandFloat draws one random float64, a task that takes a few nanoseconds.
func RandFloat() {
	if rand.Float64() >= 1 { // never true, but the compiler cannot know
		sink.Add(1)
	}
}

// Sleep10ms blocks for 10 ms: tasks bound by timers and parking, not CPU.
func Sleep10ms() { time.Sleep(10 * time.Millisecond) }

var shaInput = func() (b [256]byte) {
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}()

// SHA256 hashes 256 bytes: a short CPU-bound task.
func SHA256() {
	if h := sha256.Sum256(shaInput[:]); h[0] == 0 && h[1] == 0 && h[2] == 0 {
		sink.Add(1)
	}
}

// MostlyTiny is a tiny task (RandFloat), except one call in a hundred,
// which sleeps for a millisecond: slow calls among fast ones.
func MostlyTiny() {
	if rand.IntN(100) == 0 {
		time.Sleep(time.Millisecond)
		return
	}
	RandFloat()
}

// IOCall waits 100 µs, as a call to another service would.
func IOCall() { time.Sleep(100 * time.Microsecond) }

// Spawn hashes on two goroutines it starts and waits for, as CPU-bound
// tasks that parallelise their own work do.
func Spawn() {
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 4 {
				SHA256()
			}
		})
	}
	wg.Wait()
}
