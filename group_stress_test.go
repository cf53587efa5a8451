package crew_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// TestGroupRandomized runs groups with random options, producers, errors,
// panics, nested Go, cancellations and waiters, and checks the invariants:
// Wait returns; every accepted task ran or was skipped, exactly once; no
// refused task ran; the limit held; an error cancelled the group; results
// sit at their submission index.
func TestGroupRandomized(t *testing.T) {
	leak.Check(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	rounds := 60
	if testing.Short() {
		rounds = 20
	}
	for round := range rounds {
		workers := 1 + rng.IntN(6)
		var popts []crew.Option
		if rng.IntN(3) == 0 {
			popts = append(popts, crew.WithQueueSize(rng.IntN(4)))
			if rng.IntN(2) == 0 {
				popts = append(popts, crew.WithNonBlocking())
			}
		}
		p := crew.New(workers, popts...)
		limit := 0
		var gopts []crew.GroupOption
		if rng.IntN(2) == 0 {
			limit = 1 + rng.IntN(4)
			gopts = append(gopts, crew.WithLimit(limit))
		}
		all := rng.IntN(3) == 0
		if all {
			gopts = append(gopts, crew.WithAllErrors())
		}
		ctx, cancel := context.WithCancel(context.Background())
		g := crew.NewResultGroup[int](ctx, p, gopts...)

		var (
			accepted, ran, late atomic.Int64
			cur, peak           atomic.Int64
			failAt              = -1
			cancelAt            = -1
			finished            atomic.Bool
		)
		n := 1 + rng.IntN(300)
		if rng.IntN(3) == 0 {
			failAt = rng.IntN(n)
		}
		if rng.IntN(5) == 0 {
			cancelAt = rng.IntN(n)
		}
		producers := 1 + rng.IntN(3)
		var wg sync.WaitGroup
		var next atomic.Int64
		var task func(id int, nested bool) func(ctx context.Context) (int, error)
		task = func(id int, nested bool) func(ctx context.Context) (int, error) {
			return func(ctx context.Context) (int, error) {
				if finished.Load() {
					late.Add(1)
				}
				ran.Add(1)
				c := cur.Add(1)
				defer cur.Add(-1)
				for {
					p := peak.Load()
					if c <= p || peak.CompareAndSwap(p, c) {
						break
					}
				}
				res := id + 1
				if nested {
					res = -1
				}
				switch {
				case id == failAt && id%2 == 0 && !nested:
					return res, errors.New("fail")
				case id == failAt && !nested:
					panic("fail")
				case id%17 == 0 && !nested:
					if g.Go(task(id, true)) == nil {
						accepted.Add(1)
					}
				case id%5 == 0:
					runtime.Gosched()
				}
				return res, nil
			}
		}
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					id := int(next.Add(1) - 1)
					if id >= n {
						return
					}
					if id == cancelAt {
						cancel()
					}
					if g.Go(task(id, false)) == nil {
						accepted.Add(1)
					}
				}
			}()
		}
		waiters := 1 + rng.IntN(2)
		type out struct {
			res []int
			err error
		}
		outs := make(chan out, waiters)
		for range waiters {
			go func() {
				wg.Wait() // Wait after the producers, as callers do
				res, err := g.Wait()
				outs <- out{res, err}
			}()
		}
		var first out
		for i := range waiters {
			o := recv(t, outs, "ResultGroup.Wait")
			if i == 0 {
				first = o
			} else if o.err != first.err && (o.err == nil || first.err == nil || o.err.Error() != first.err.Error()) {
				t.Fatalf("round %d: waiters disagree: %v vs %v", round, o.err, first.err)
			}
		}
		finished.Store(true)
		cancel()
		if late.Load() > 0 {
			t.Fatalf("round %d: %d tasks ran after Wait returned", round, late.Load())
		}
		if int64(len(first.res)) != accepted.Load() {
			t.Fatalf("round %d: %d results for %d accepted tasks", round, len(first.res), accepted.Load())
		}
		if ran.Load() > accepted.Load() {
			t.Fatalf("round %d: %d tasks ran, only %d accepted", round, ran.Load(), accepted.Load())
		}
		if limit > 0 && peak.Load() > int64(limit) {
			t.Fatalf("round %d: peak %d above limit %d", round, peak.Load(), limit)
		}
		if failAt >= 0 && ran.Load() > 0 && first.err == nil && failAt < int(accepted.Load()) {
			// The failing task may have been skipped by a cancellation,
			// but then Wait reports the cancellation.
			t.Fatalf("round %d: Wait = nil although task %d fails", round, failAt)
		}
		if failAt < 0 && cancelAt < 0 && (first.err != nil || ran.Load() != accepted.Load()) {
			t.Fatalf("round %d: Wait = %v, ran %d of %d, without failures", round, first.err, ran.Load(), accepted.Load())
		}
		if producers == 1 {
			// Results sit in submission order: the producer's tasks
			// (values id+1; nested ones -1, skipped ones 0) increase.
			last := 0
			for i, v := range first.res {
				if v > 0 {
					if v <= last {
						t.Fatalf("round %d: res[%d] = %d after %d: not in submission order", round, i, v, last)
					}
					last = v
				}
			}
		}
		within(t, groupDeadline, "Stop", p.Stop)
	}
}
