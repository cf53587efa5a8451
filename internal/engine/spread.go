package engine

import (
	"sync/atomic"
	"unsafe"
)

// Producers spread their tasks over the shards, so that no shard's lines
// carry every task and workers seldom meet in one shard. A random pick
// would do that, but proved slower: a generator costs a noticeable part
// of a tiny task. Instead a producer counts its pushes in a stripe, a
// counter alone on its cache line, and takes the top bits of the count's
// Fibonacci hash: consecutive counts land in shards far apart, and over
// any stretch of pushes every shard gets its share within a few tasks. It
// costs one atomic add.
//
// Go gives a goroutine no identity to choose its stripe by, so the address
// of a variable on the producer's stack stands in for one: goroutines have
// stacks of their own, and an address changes only when its stack grows
// and moves, which moves the producer to another stripe, no harm done.
// Producers that hash to the same stripe share its line, as they would
// share a shard's.

// A stripe counts the pushes of the producers whose stacks hash to it.
type stripe struct {
	pushes atomic.Uint32
	_      [60]byte
}

// golden is 2^64 divided by the golden ratio. The top bits of n*golden
// for n = 1, 2, 3, ... spread evenly, each value far from the one before
// (Fibonacci hashing).
const golden = 0x9E3779B97F4A7C15

// pick returns a number whose low bits (under e.mask) choose the shard for
// the calling producer's next push.
func (e *Engine[T]) pick() uint32 {
	var here byte
	h := uint32(uint64(uintptr(unsafe.Pointer(&here))) * golden >> 32)
	n := e.stripes[h&e.mask].pushes.Add(1)
	return h + uint32(uint64(n)*golden>>e.spread)
}
