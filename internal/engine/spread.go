package engine

import (
	"sync/atomic"
	"unsafe"
)

// Producers spread their tasks over the shards, so that no shard's lines
// carry every task and workers seldom meet in one shard. A producer counts
// its pushes in a stripe, a counter alone on its cache line, and takes the
// shards in turn from an offset of its own: over any stretch of pushes
// every shard gets its share to within one task, and a single producer's
// tasks lie in the shards in the order the workers visit them (see
// worker.pop), which keeps them close to submission order. A random pick
// would spread as well but costs a noticeable part of a tiny task; the
// count costs one atomic add.
//
// Go gives a goroutine no identity to choose its stripe by, so the address
// of a variable on the producer's stack stands in for one: goroutines have
// stacks of their own, and an address changes only when its stack grows
// and moves, which moves the producer to another stripe, no harm done.
// Producers that hash to the same stripe share its line, as they would
// share a shard's, and take the shards in turn together.

// A stripe counts the pushes of the producers whose stacks hash to it.
type stripe struct {
	pushes atomic.Uint32
	_      [60]byte
}

// golden is 2^64 divided by the golden ratio: the top bits of a*golden
// spread addresses a that differ in a few low bits over the whole range
// (Fibonacci hashing).
const golden = 0x9E3779B97F4A7C15

// pick returns a number whose low bits (under e.mask) choose the shard for
// the calling producer's next push.
func (e *Engine[T]) pick() uint32 {
	if e.mask == 0 {
		return 0
	}
	var here byte
	h := uint32(uint64(uintptr(unsafe.Pointer(&here))) * golden >> 32)
	return h + e.stripes[h&e.mask].pushes.Add(1)
}
