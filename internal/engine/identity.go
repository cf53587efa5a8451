package engine

import (
	"reflect"
	"runtime"
	"sync/atomic"
)

// Some calls cannot work from inside one of the engine's own tasks: Wait
// would wait for the task that called it, and a push that waits for room
// may wait for room only its caller can free. To tell such a caller apart,
// the engine must know whether the calling goroutine is one of its workers,
// and Go has no goroutine-local storage to ask.
//
// But a goroutine can read its own stack (runtime.Callers). So a worker
// writes its engine's number onto its stack when it starts: it calls its
// loop below one frame per binary digit of the number, bit0 for a zero and
// bit1 for a one. Reading the caller's stack and decoding the runs of digit
// frames tells which engines the goroutine is working for (more than one
// when a task runs another engine's worker loop). Writing costs a few
// function calls per started worker and nothing per task; reading walks
// the whole stack (microseconds), so only paths that are about to block
// read it.

// lastID numbers engines. Numbers are never reused, so a stale digit run
// cannot name a newer engine.
var lastID atomic.Uint64

// The names of withID, bit0 and bit1 as stack frames report them.
var withIDName, bit0Name, bit1Name = funcName(withID), funcName(bit0), funcName(bit1)

func funcName(f func(uint64, func())) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}

// withID calls f below the frames that spell id, lowest digit outermost.
//
//go:noinline
func withID(id uint64, f func()) {
	switch {
	case id == 0:
		f()
	case id&1 == 0:
		bit0(id>>1, f)
	default:
		bit1(id>>1, f)
	}
}

//go:noinline
func bit0(rest uint64, f func()) { withID(rest, f) }

//go:noinline
func bit1(rest uint64, f func()) { withID(rest, f) }

// callerIDs returns the numbers of the engines whose worker loops are on
// the calling goroutine's stack, innermost first.
func callerIDs() []uint64 {
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(1, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	var ids []uint64
	var id uint64
	frames := runtime.CallersFrames(pcs)
	for more := true; more; {
		var f runtime.Frame
		f, more = frames.Next()
		switch f.Function {
		case bit0Name:
			id <<= 1 // the innermost digit frame holds the highest digit
		case bit1Name:
			id = id<<1 | 1
		case withIDName:
			// between digit frames
		default:
			if id != 0 {
				ids = append(ids, id)
				id = 0
			}
		}
	}
	return ids
}

// InWorker reports whether the calling goroutine is one of e's workers,
// that is, whether the call comes from inside one of e's tasks. It walks
// the caller's stack, which costs microseconds: call it only on a path
// that is about to block.
func (e *Engine[T]) InWorker() bool {
	for _, id := range callerIDs() {
		if id == e.id {
			return true
		}
	}
	return false
}
