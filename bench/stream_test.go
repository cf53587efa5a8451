package main

import (
	"context"
	"slices"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/bench/workload"
	"github.com/sourcegraph/conc/stream"
)

// streamItems and streamWorkers shape BenchmarkOrderedResults: 10,000
// tiny tasks (workload.RandFloat) on 8 workers, results consumed in input
// order.
const (
	streamItems   = 10_000
	streamWorkers = 8
)

// BenchmarkOrderedResults measures computing 10,000 tiny results
// concurrently and consuming them in input order: crew's MapErrStream
// (an iterator over a bounded window, the loop body as consumer), crew's
// Stream (a callback per task, one at a time, in order), crew's MapErrSeq
// (every result into a slice first) and conc's stream (the closest peer
// feature: a callback per task, in order). ns/op is per 10,000 results.
func BenchmarkOrderedResults(b *testing.B) {
	ctx := context.Background()
	items := make([]int, streamItems)
	for i := range items {
		items[i] = i
	}
	work := func(_ context.Context, i int) (float64, error) { workload.RandFloat(); return float64(i), nil }
	var sink float64
	b.Run("crew-mapstream", func(b *testing.B) {
		p := crew.New(streamWorkers)
		defer p.Stop()
		for b.Loop() {
			for r, err := range crew.MapErrStream(ctx, p, slices.Values(items), work) {
				if err != nil {
					b.Fatal(err)
				}
				sink += r
			}
		}
	})
	b.Run("crew-stream", func(b *testing.B) {
		p := crew.New(streamWorkers)
		defer p.Stop()
		for b.Loop() {
			s := crew.NewStream(ctx, p)
			for _, i := range items {
				s.Go(func(ctx context.Context) func() {
					r, _ := work(ctx, i)
					return func() { sink += r }
				})
			}
			if err := s.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("crew-mapseq", func(b *testing.B) {
		p := crew.New(streamWorkers)
		defer p.Stop()
		for b.Loop() {
			out, err := crew.MapErrSeq(ctx, p, slices.Values(items), work)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range out {
				sink += r
			}
		}
	})
	b.Run("conc-stream", func(b *testing.B) {
		for b.Loop() {
			s := stream.New().WithMaxGoroutines(streamWorkers)
			for _, i := range items {
				s.Go(func() stream.Callback {
					r, _ := work(ctx, i)
					return func() { sink += r }
				})
			}
			s.Wait()
		}
	})
	_ = sink
}
