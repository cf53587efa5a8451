package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pkgz "github.com/go-pkgz/pool"
	"github.com/go-pkgz/pool/middleware"
	"github.com/gocrew/crew"
	"golang.org/x/sync/errgroup"
)

// retryItems, retryWorkers and retryDelay shape BenchmarkRetry: 2,000
// items on 8 workers, each item failing its first call and succeeding
// after a 200µs delay.
const (
	retryItems   = 2000
	retryWorkers = 8
	retryDelay   = 200 * time.Microsecond
)

var errTransient = errors.New("transient")

// flaky returns a task body that fails the first call of each item, for
// one iteration's items.
func flaky() func(int) error {
	seen := make([]atomic.Bool, retryItems)
	return func(i int) error {
		if !seen[i].Swap(true) {
			return errTransient
		}
		return nil
	}
}

// BenchmarkRetry measures a job of 2,000 items, every one of which fails
// once and succeeds when called again after a 200µs delay (a transient
// error), on 8 workers: crew's WithRetry (a group) and NewRetrying (Submit
// tasks) put a waiting item aside on a timer, freeing its worker; crew-do calls Retry.Do inside each task,
// waiting on the worker; go-pkgz/pool's Retry middleware (the closest peer
// feature) and errgroup with a retry loop in each goroutine wait on the
// worker too. crew-nofail runs the same job with no failure, for the
// policy's cost on the success path (compare BenchmarkRetry/crew-none,
// the job without the option). ns/op is per job.
func BenchmarkRetry(b *testing.B) {
	ctx := context.Background()
	items := make([]int, retryItems)
	for i := range items {
		items[i] = i
	}
	policy := crew.Retry{Attempts: 3, Delay: retryDelay, MaxDelay: 4 * retryDelay}
	b.Run("crew", func(b *testing.B) {
		p := crew.New(retryWorkers)
		defer p.Stop()
		for b.Loop() {
			call := flaky()
			if err := crew.ForEach(ctx, p, items, func(_ context.Context, i int) error { return call(i) }, crew.WithRetry(policy)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("crew-retrying", func(b *testing.B) {
		p := crew.New(retryWorkers)
		defer p.Stop()
		r := crew.NewRetrying(p, policy)
		tasks := make([]*crew.Task, len(items))
		for b.Loop() {
			call := flaky()
			for _, i := range items {
				tasks[i] = r.Submit(func(context.Context) error { return call(i) })
			}
			for _, t := range tasks {
				if err := t.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("crew-do", func(b *testing.B) {
		p := crew.New(retryWorkers)
		defer p.Stop()
		for b.Loop() {
			call := flaky()
			if err := crew.ForEach(ctx, p, items, func(ctx context.Context, i int) error {
				return policy.Do(ctx, func(context.Context) error { return call(i) })
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-pkgz", func(b *testing.B) {
		for b.Loop() {
			call := flaky()
			g := pkgz.New[int](retryWorkers, pkgz.WorkerFunc[int](func(_ context.Context, i int) error { return call(i) })).
				Use(middleware.Retry[int](policy.Attempts, retryDelay))
			if err := g.Go(ctx); err != nil {
				b.Fatal(err)
			}
			for _, i := range items {
				g.Submit(i)
			}
			if err := g.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("errgroup", func(b *testing.B) {
		for b.Loop() {
			call := flaky()
			var g errgroup.Group
			g.SetLimit(retryWorkers)
			for _, i := range items {
				g.Go(func() error {
					return policy.Do(ctx, func(context.Context) error { return call(i) })
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	nofail := func(context.Context, int) error { return nil }
	b.Run("crew-nofail", func(b *testing.B) {
		p := crew.New(retryWorkers)
		defer p.Stop()
		for b.Loop() {
			if err := crew.ForEach(ctx, p, items, nofail, crew.WithRetry(policy)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("crew-none", func(b *testing.B) {
		p := crew.New(retryWorkers)
		defer p.Stop()
		for b.Loop() {
			if err := crew.ForEach(ctx, p, items, nofail); err != nil {
				b.Fatal(err)
			}
		}
	})
}
