package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew"
	"github.com/panjf2000/ants/v2"
)

// BenchmarkFuncPool compares typed function pools on a warm pool: crew's
// NewFunc with Invoke, ants' NewPoolWithFuncGeneric with Invoke (default
// options: blocking, no queue) and, for reference, crew's Pool.Go with a
// closure. Every subject runs the same function on an int (an atomic add,
// and a channel close after the b.N-th); b.N values are split across the
// producers, and the timer stops when the last one has run. ns/op and
// allocs/op are per value. Pool creation and teardown are outside the
// timer. Names: BenchmarkFuncPool/workers=<n>/producers=<n>/<subject>.
func BenchmarkFuncPool(b *testing.B) {
	for _, workers := range []int{8, 1000} {
		for _, producers := range []int{1, 8} {
			prefix := fmt.Sprintf("workers=%d/producers=%d/", workers, producers)
			b.Run(prefix+"crew-NewFunc", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.NewFunc(workers, func(_ context.Context, v int) error { c.add(v); return nil })
				defer p.Stop()
				produce(b, producers, c, func() { must(p.Invoke(1)) })
			})
			b.Run(prefix+"ants-PoolWithFuncGeneric", func(b *testing.B) {
				c := newCounter(b.N)
				p, err := ants.NewPoolWithFuncGeneric(workers, func(v int) { c.add(v) })
				must(err)
				defer p.Release()
				produce(b, producers, c, func() { must(p.Invoke(1)) })
			})
			b.Run(prefix+"crew-Pool.Go", func(b *testing.B) {
				c := newCounter(b.N)
				p := crew.New(workers)
				defer p.Stop()
				v := 1
				task := func() { c.add(v) }
				produce(b, producers, c, func() { must(p.Go(task)) })
			})
		}
	}
}

// counter counts processed values and closes done at the total.
type counter struct {
	n     atomic.Int64
	total int64
	done  chan struct{}
}

func newCounter(total int) *counter {
	return &counter{total: int64(total), done: make(chan struct{})}
}

func (c *counter) add(v int) {
	if c.n.Add(int64(v)) == c.total {
		close(c.done)
	}
}

// produce runs submit b.N times, split across producers goroutines, and
// waits until c has counted them all; only that is timed.
func produce(b *testing.B, producers int, c *counter, submit func()) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := range producers {
		n := b.N / producers
		if i < b.N%producers {
			n++
		}
		go func() {
			for range n {
				submit()
			}
		}()
	}
	<-c.done
	b.StopTimer()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
