package crew_test

import (
	"context"
	"testing"

	"github.com/gocrew/crew"
)

// BenchmarkGroupGo measures a group of b.N tiny tasks on a warm pool: Go
// for each, then Wait. ns/op and allocs/op are per task. (The comparison
// with errgroup and conc is BenchmarkGroup in the bench module.)
func BenchmarkGroupGo(b *testing.B) {
	for _, limit := range []int{0, 4} {
		name := "unlimited"
		var opts []crew.GroupOption
		if limit > 0 {
			name = "limit=4"
			opts = append(opts, crew.WithLimit(limit))
		}
		b.Run(name, func(b *testing.B) {
			p := crew.New(1000)
			defer p.Stop()
			task := func(context.Context) error { return nil }
			b.ReportAllocs()
			b.ResetTimer()
			g := p.Group(context.Background(), opts...)
			for range b.N {
				g.Go(task)
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkDo measures one Future: Do, then Wait.
func BenchmarkDo(b *testing.B) {
	p := crew.New(4)
	defer p.Stop()
	f := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		crew.Submit(p, f).Wait()
	}
}

// BenchmarkMap measures Map over 1,000 elements: ns/op per call of Map.
func BenchmarkMap(b *testing.B) {
	p := crew.New(1000)
	defer p.Stop()
	items := make([]int, 1000)
	double := func(_ context.Context, v int) int { return 2 * v }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := crew.Map(context.Background(), p, items, double); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream measures a stream of b.N tiny tasks with callbacks: ns/op
// and allocs/op are per task.
func BenchmarkStream(b *testing.B) {
	p := crew.New(1000)
	defer p.Stop()
	var sum int
	task := func(context.Context) func() { return func() { sum++ } }
	b.ReportAllocs()
	b.ResetTimer()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(256))
	for range b.N {
		s.Go(task)
	}
	if err := s.Wait(); err != nil {
		b.Fatal(err)
	}
}
