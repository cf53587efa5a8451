package engine

import (
	"errors"
	"maps"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
)

// Some calls cannot work from inside one of the engine's own tasks: Wait
// would wait for the task that called it, and a push that waits for room
// may wait for room only its caller can free. To tell such a caller apart,
// the engine must know whether the calling goroutine is one of its workers,
// and Go has no goroutine-local storage to ask.
//
// But a goroutine can read its own stack (runtime.Callers). So a worker
// writes its engine's number onto its stack when it starts (RunAs): it
// calls its loop below one frame per hexadecimal digit of the number, a
// function of its own for each digit value, between a RunAs frame
// (outermost) and an end frame (innermost). Reading the caller's stack and
// decoding the runs of digit frames tells which numbers the goroutine runs
// under (more than one when a task runs under another owner's mark, as a
// layer's steps do on a pool's workers). Writing costs a few function
// calls; reading walks the whole stack, so only paths that are about to
// block read it. Other owners of tasks (crew's layers) use the same
// numbers and functions to mark the goroutine while it runs one of
// theirs.

// lastID numbers the owners of marks: engines, and whoever calls NewID.
// Numbers are never reused, so a stale digit run cannot name a newer owner.
var lastID atomic.Uint64

// NewID returns a number for RunAs and CallerIs that no earlier call
// returned (and no engine uses). It costs one atomic add.
func NewID() uint64 { return lastID.Add(1) }

// A Runner is what RunAs runs.
type Runner interface{ Run() }

// Func makes a func() a Runner, without an allocation.
type Func func()

// Run calls f.
func (f Func) Run() { f() }

// RunAs calls r.Run on the calling goroutine below frames that spell id,
// so that CallerIs(id) reports true for every call made while it runs, at
// any depth, on this goroutine (not on goroutines it starts). Runs nest:
// inside RunAs(a, Func(func() { RunAs(b, g) })), g's calls are under both
// a and b. id must come from NewID; RunAs(0, r) just calls r.Run.
//
// It costs two calls plus one per hexadecimal digit of id (at most five
// for an id below 4,096), plus the stack they take (a few words each). It
// allocates nothing, but r escapes: pass a pointer, or a func value made
// once rather than a closure made per call. (A Runner rather than a func,
// so that a worker can pass itself: a method value would cost an
// allocation per worker.)
//
//go:noinline
func RunAs(id uint64, r Runner) { next(id, r) }

// digitBase is the base in which RunAs writes a number: one frame per
// digit, so a larger base means fewer calls, and more digit functions.
const digitBase = 16

// digits[d] writes the digit d; digits[digitBase] ends the number and calls
// the task. Set by init: the functions refer to digits themselves.
var digits [digitBase + 1]func(rest uint64, r Runner)

// next writes the lowest digit of rest, or runs r once rest is spelled
// out. It makes one call, so that the compiler can inline it into RunAs and
// the digit functions: each digit then costs one call.
func next(rest uint64, r Runner) {
	d := rest % digitBase
	if rest == 0 {
		d = digitBase
	}
	digits[d](rest/digitBase, r)
}

// The frames: the lowest digit outermost, each digit function calling the
// next one through next.

//go:noinline
func end(_ uint64, r Runner) { r.Run() }

//go:noinline
func digit0(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit1(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit2(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit3(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit4(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit5(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit6(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit7(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit8(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digit9(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitA(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitB(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitC(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitD(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitE(rest uint64, r Runner) { next(rest, r) }

//go:noinline
func digitF(rest uint64, r Runner) { next(rest, r) }

// The names of RunAs, end and the digit functions as stack frames report
// them; digitOf maps a digit function's name to its value.
var (
	runAsName = funcName(RunAs)
	endName   = funcName(end)
	digitOf   = map[string]uint64{}
)

func init() {
	digits = [...]func(uint64, Runner){
		digit0, digit1, digit2, digit3, digit4, digit5, digit6, digit7,
		digit8, digit9, digitA, digitB, digitC, digitD, digitE, digitF, end,
	}
	for d, f := range digits[:digitBase] {
		digitOf[funcName(f)] = uint64(d)
	}
}

func funcName(f func(uint64, Runner)) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

// CallerIs reports whether the calling goroutine runs under id, that is,
// whether the call comes from inside r.Run of a RunAs(id, r) that has not
// returned. It walks the caller's stack, which costs far more than RunAs
// does: call it only on a path that is about to block. It allocates only
// for a stack deeper than 64 frames, and when it meets a return address
// it has not cached (see frames).
func CallerIs(id uint64) bool {
	if id == 0 {
		return false
	}
	var stack [64]uintptr
	pcs := stack[:]
	for {
		n := runtime.Callers(1, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	// Decode each run of digit frames, innermost first; there is more than
	// one when a task runs under another owner's mark.
	var got uint64
	in := false // between an end frame and its RunAs frame
	known := frames.Load().(frameTable)
	for _, pc := range pcs {
		f, ok := known[pc]
		if !ok {
			known = learnFrames(pcs)
			f = known[pc]
		}
		switch {
		case f == endFrame:
			in, got = true, 0
		case f < digitBase && in:
			got = got*digitBase + uint64(f) // the innermost digit frame holds the highest digit
		case f == runAsFrame:
			if in && got == id {
				return true
			}
			in = false
		}
		// Any other frame (next, when not inlined) lies between.
	}
	return false
}

// What a frame on a stack is to a mark: a digit (0 to digitBase-1), or one
// of these.
const (
	endFrame = digitBase + iota
	runAsFrame
	otherFrame
)

// frames caches, for each return address that CallerIs has met, what its
// frame is. Finding a return address's function costs a search and two
// allocations (runtime.CallersFrames), and a program reaches CallerIs from
// few distinct stacks, so that is paid once per address. The map is
// replaced, not changed, when a walk meets new addresses, so that a lookup
// takes no lock; framesMu serializes the replacements. Once the map holds
// maxFrames addresses it stops growing, which bounds it in a program that
// reaches CallerIs from ever more places: walks that meet new addresses
// then pay for them each time.
var (
	frames   atomic.Value // frameTable
	framesMu sync.Mutex
)

type frameTable map[uintptr]uint8

// maxFrames is a variable for tests.
var maxFrames = 4096

func init() { frames.Store(frameTable{}) }

// learnFrames returns a table that holds every address in pcs, and adds
// them to the cache unless it is full.
func learnFrames(pcs []uintptr) frameTable {
	if known := frames.Load().(frameTable); len(known) >= maxFrames {
		walk := make(frameTable, len(pcs))
		addFrames(walk, known, pcs)
		return walk
	}
	framesMu.Lock()
	defer framesMu.Unlock()
	known := frames.Load().(frameTable)
	next := maps.Clone(known)
	addFrames(next, known, pcs)
	frames.Store(next)
	return next
}

// addFrames adds to t each address in pcs that it lacks, taking what its
// frame is from known, or finding it.
func addFrames(t, known frameTable, pcs []uintptr) {
	for _, pc := range pcs {
		if _, ok := t[pc]; ok {
			continue
		}
		f, ok := known[pc]
		if !ok {
			f = resolveFrame(pc)
		}
		t[pc] = f
	}
}

// resolveFrame finds which function the frame of return address pc is in.
// runtime.Callers gives one address per frame, inlined calls included, and
// the first frame that CallersFrames makes of an address alone is that
// address's own.
func resolveFrame(pc uintptr) uint8 {
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	switch d, isDigit := digitOf[f.Function]; {
	case f.Function == endName:
		return endFrame
	case f.Function == runAsName:
		return runAsFrame
	case isDigit:
		return uint8(d)
	}
	return otherFrame
}

// ErrInWorker is returned by Wait when called from inside one of the
// engine's own tasks, which would wait for itself. Package crew re-exports
// it.
var ErrInWorker = errors.New("crew: called from inside one of the pool's own tasks")

// InWorker reports whether the calling goroutine is one of e's workers,
// that is, whether the call comes from inside one of e's tasks. It costs
// what CallerIs costs: call it only on a path that is about to block.
func (e *Engine[T]) InWorker() bool { return CallerIs(e.id) }
