package crew

import (
	"context"
	"math/bits"
)

// A ResultGroup is a [Group] whose tasks return a value: [ResultGroup.Wait]
// returns the values in submission order, the i-th accepted task's result
// at index i, whatever order the tasks finish in. Errors, cancellation,
// panics, limits and timeouts work as in Group, with the same options.
//
// Each task writes its own slot, so collecting results takes no lock and no
// channel. The slots grow in chunks that never move while tasks write them;
// Wait copies them into one slice (unless they fit the first chunk), about
// one pass over the results. A ResultGroup must be made with
// [NewResultGroup] and is safe for concurrent use; like a Group's, a zero
// or nil ResultGroup's methods return an error.
type ResultGroup[T any] struct {
	c   core[func(context.Context) (T, error)]
	out slots[T]
}

// NewResultGroup returns a group of tasks that run on p and return values of
// type T. Its context is derived from ctx as [NewGroup]'s is. It panics
// with an error wrapping [ErrInvalid] if ctx is nil or an option is nil or
// invalid.
func NewResultGroup[T any](ctx context.Context, p *Pool, opts ...GroupOption) *ResultGroup[T] {
	g := new(ResultGroup[T])
	g.c.exec = g.exec
	g.c.grow = g.out.grow
	g.c.unset = g.out.unset
	g.c.mustInit(ctx, p, opts, nil)
	return g
}

func (g *ResultGroup[T]) exec(ctx context.Context, seq int, task func(context.Context) (T, error)) error {
	v, err := task(ctx)
	*g.out.at(seq) = v
	return err
}

// Go submits task as [Group.Go] does. An accepted task (Go returned nil)
// takes the next slot of the results; a refused one takes none.
func (g *ResultGroup[T]) Go(task func(ctx context.Context) (T, error)) error {
	return g.core().accept(task, task == nil, false)
}

// TryGo submits task as [Group.TryGo] does: only if the group's limit lets
// it start at once. An accepted task takes the next slot of the results.
func (g *ResultGroup[T]) TryGo(task func(ctx context.Context) (T, error)) bool {
	return g.core().accept(task, task == nil, true) == nil
}

// SetLimit changes the group's limit at any time; see [Group.SetLimit].
func (g *ResultGroup[T]) SetLimit(n int) error { return g.core().setLimit(n) }

// Wait blocks like [Group.Wait] and returns the results in submission
// order, one per accepted task, with the error Group.Wait would return. A
// task's slot holds what it returned, even with an error; the zero value
// if it panicked or was skipped. Later calls return the same slice.
func (g *ResultGroup[T]) Wait() ([]T, error) {
	if g == nil {
		return nil, errZeroGroup
	}
	err := g.c.wait()
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	return g.out.collect(g.c.seq), err
}

// Context returns the group's context, as [Group.Context] does.
func (g *ResultGroup[T]) Context() context.Context { return g.core().context() }

// Done returns a channel that is closed once the group has ended, as
// [Group.Done] says; [ResultGroup.Wait] then returns the results at once.
func (g *ResultGroup[T]) Done() <-chan struct{} { return g.core().doneChan() }

// core returns g's core, nil for a nil ResultGroup.
func (g *ResultGroup[T]) core() *core[func(context.Context) (T, error)] {
	if g == nil {
		return nil
	}
	return &g.c
}

// slots holds results by index in chunks that never move: chunk 0 has
// size first, chunk k > 0 has size first<<(k-1) and starts at index
// first<<(k-1). A task writes its slot while Go adds chunks: grow runs under
// the group's lock before the task is queued, so the chunk a task writes
// exists, and different chunks are different memory.
type slots[T any] struct {
	first  int
	chunks [48][]T
	all    []T // collect's result, once made
}

const firstSlots = 64

func (s *slots[T]) locate(i int) (k, j int) {
	if i < s.first {
		return 0, i
	}
	k = bits.Len(uint(i / s.first))
	return k, i - s.first<<(k-1)
}

func (s *slots[T]) grow(i int) {
	if s.first == 0 {
		s.first = firstSlots
	}
	k, _ := s.locate(i)
	if s.chunks[k] == nil {
		size := s.first
		if k > 0 {
			size = s.first << (k - 1)
		}
		s.chunks[k] = make([]T, size)
	}
}

// unset clears result i.
func (s *slots[T]) unset(i int) {
	var zero T
	*s.at(i) = zero
}

func (s *slots[T]) at(i int) *T {
	k, j := s.locate(i)
	return &s.chunks[k][j]
}

// collect returns the first n results as one slice. Call it when no task
// runs any more.
func (s *slots[T]) collect(n int) []T {
	if s.all != nil || n == 0 {
		return s.all
	}
	if n <= s.first {
		s.all = s.chunks[0][:n:n]
		return s.all
	}
	s.all = make([]T, 0, n)
	for _, c := range s.chunks {
		if len(s.all) == n || c == nil {
			break
		}
		s.all = append(s.all, c[:min(len(c), n-len(s.all))]...)
	}
	return s.all
}
