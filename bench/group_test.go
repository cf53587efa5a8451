package main

import (
	"context"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/bench/workload"
	"github.com/sourcegraph/conc/pool"
	"golang.org/x/sync/errgroup"
)

// groupTasks is the size of one group in BenchmarkGroup.
const groupTasks = 100_000

// groupLimit bounds the workers of crew's pool, errgroup's SetLimit and
// conc's WithMaxGoroutines.
const groupLimit = 1000

// groupTask is the tiny task every subject runs: one random draw
// (workload.RandFloat, the matrix's "rand" task).
func groupTask(context.Context) error {
	workload.RandFloat()
	return nil
}

// BenchmarkGroup measures one group of 100,000 tiny tasks per iteration:
// make the group, Go every task, Wait. crew's pool is made once, outside
// the timer, since reusing warm workers across groups is the point of
// running groups on a pool (crew-newpool makes and stops it inside the
// loop; crew-go runs the same tasks with the pool's plain Go and Wait,
// the cost a group task is measured against). errgroup runs a goroutine
// per task under SetLimit; conc's ContextPool, limited and cancelled on the first error like errgroup's
// WithContext, hands each task to a goroutine over a channel. Names:
// BenchmarkGroup/<subject>; ns/op and allocs/op are per group of 100,000
// tasks.
func BenchmarkGroup(b *testing.B) {
	ctx := context.Background()
	b.Run("crew", func(b *testing.B) {
		p := crew.New(groupLimit)
		defer p.Stop()
		b.ReportAllocs()
		for b.Loop() {
			g := p.Group(ctx)
			for range groupTasks {
				g.Go(groupTask)
			}
			mustGroup(g.Wait())
		}
		// The workers the pool started for the group's steps.
		b.ReportMetric(float64(p.Stats().Workers), "workers")
	})
	b.Run("crew-go", func(b *testing.B) {
		p := crew.New(groupLimit)
		defer p.Stop()
		task := func() { _ = groupTask(ctx) }
		b.ReportAllocs()
		for b.Loop() {
			for range groupTasks {
				p.Go(task)
			}
			p.Wait()
		}
	})
	b.Run("crew-newpool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := crew.New(groupLimit)
			g := p.Group(ctx)
			for range groupTasks {
				g.Go(groupTask)
			}
			mustGroup(g.Wait())
			p.Stop()
		}
	})
	b.Run("crew-foreach", func(b *testing.B) {
		p := crew.New(groupLimit)
		defer p.Stop()
		items := make([]int, groupTasks)
		b.ReportAllocs()
		for b.Loop() {
			mustGroup(crew.ForEach(ctx, p, items, func(ctx context.Context, _ int) error { return groupTask(ctx) }))
		}
	})
	b.Run("errgroup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(groupLimit)
			for range groupTasks {
				g.Go(func() error { return groupTask(gctx) })
			}
			mustGroup(g.Wait())
		}
	})
	b.Run("conc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := pool.New().WithMaxGoroutines(groupLimit).WithContext(ctx).WithCancelOnError()
			for range groupTasks {
				p.Go(groupTask)
			}
			mustGroup(p.Wait())
		}
	})
}

// smallTasks and smallLimit shape the fan-out most errgroup users write: a
// handful of calls per request, under a small limit.
const (
	smallTasks = 4
	smallLimit = 8
)

// BenchmarkSmallGroup measures the fan-out of one request: a group of four
// tiny tasks per iteration. In "shared", crew's groups run on one pool of
// eight made outside the timer, as a service would keep one, and errgroup
// limits each group to eight; in "job", crew makes a pool of eight, runs the
// group and stops the pool inside the loop, which is the whole fixed cost of
// a pool made per request; "pool/crew" is that pool alone, four Go calls
// and Stop, without a group. errgroup and conc have no pool: they do the
// same work in both. Names: BenchmarkSmallGroup/<shared|job|pool>/<subject>; ns/op,
// B/op and allocs/op are per group of four tasks. Run it with -cpu 2,8,64
// (one -cpu value per process) to see how a pool's fixed cost varies
// with GOMAXPROCS.
func BenchmarkSmallGroup(b *testing.B) {
	ctx := context.Background()
	fan := func(g *crew.Group) {
		for range smallTasks {
			if err := g.Go(groupTask); err != nil {
				panic(err)
			}
		}
	}
	b.Run("shared/crew", func(b *testing.B) {
		p := crew.New(smallLimit)
		defer p.Stop()
		b.ReportAllocs()
		for b.Loop() {
			g := p.Group(ctx)
			fan(g)
			mustGroup(g.Wait())
		}
	})
	b.Run("job/crew", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := crew.New(smallLimit)
			g := p.Group(ctx)
			fan(g)
			mustGroup(g.Wait())
			p.Stop()
		}
	})
	b.Run("pool/crew", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := crew.New(smallLimit)
			for range smallTasks {
				if err := p.Go(func() { groupTask(ctx) }); err != nil {
					panic(err)
				}
			}
			p.Stop()
		}
	})
	for _, mode := range []string{"shared", "job"} {
		b.Run(mode+"/errgroup", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				g, gctx := errgroup.WithContext(ctx)
				g.SetLimit(smallLimit)
				for range smallTasks {
					g.Go(func() error { return groupTask(gctx) })
				}
				mustGroup(g.Wait())
			}
		})
		b.Run(mode+"/conc", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := pool.New().WithMaxGoroutines(smallLimit).WithContext(ctx).WithCancelOnError()
				for range smallTasks {
					p.Go(groupTask)
				}
				mustGroup(p.Wait())
			}
		})
	}
}

func mustGroup(err error) {
	if err != nil {
		panic(err)
	}
}
