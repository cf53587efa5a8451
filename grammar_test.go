package crew_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// Every type that accepts work offers the same three forms: the plain
// call, a Try form and a Context form, named X, TryX and XContext; no
// exported method anywhere ends in "Ctx".
func TestAPIGrammar(t *testing.T) {
	families := map[string]struct {
		typ   reflect.Type
		verbs []string
	}{
		"Pool":          {reflect.TypeFor[*crew.Pool](), []string{"Go", "Submit"}},
		"FuncPool":      {reflect.TypeFor[*crew.FuncPool[int]](), []string{"Invoke"}},
		"Keyed":         {reflect.TypeFor[*crew.Keyed[string]](), []string{"Go", "Submit"}},
		"Priority":      {reflect.TypeFor[*crew.Priority](), []string{"Go", "Submit"}},
		"RateLimited":   {reflect.TypeFor[*crew.RateLimited](), []string{"Go", "Submit"}},
		"Subpool":       {reflect.TypeFor[*crew.Subpool](), []string{"Go", "Submit"}},
		"Retrying":      {reflect.TypeFor[*crew.Retrying](), []string{"Go", "Submit"}},
		"Weighted":      {reflect.TypeFor[crew.Weighted](), []string{"Go", "Submit"}},
		"Stream":        {reflect.TypeFor[*crew.Stream](), []string{"Go"}},
		"Group":         {reflect.TypeFor[*crew.Group](), nil},
		"ResultGroup":   {reflect.TypeFor[*crew.ResultGroup[int]](), nil},
		"Task":          {reflect.TypeFor[*crew.Task](), nil},
		"Future":        {reflect.TypeFor[*crew.Future[int]](), nil},
		"Histogram":     {reflect.TypeFor[*crew.Histogram](), nil},
		"Latency":       {reflect.TypeFor[*crew.Latency](), nil},
		"Executor(any)": {reflect.TypeFor[crew.Executor](), nil},
	}
	for name, f := range families {
		for _, verb := range f.verbs {
			for _, m := range []string{verb, "Try" + verb, verb + "Context"} {
				if _, ok := f.typ.MethodByName(m); !ok {
					t.Errorf("%s has no %s", name, m)
				}
			}
		}
		for i := range f.typ.NumMethod() {
			if m := f.typ.Method(i).Name; strings.HasSuffix(m, "Ctx") {
				t.Errorf("%s.%s: the Context form is named XContext", name, m)
			}
		}
	}
	for _, m := range []string{"TryGo"} {
		for _, typ := range []reflect.Type{reflect.TypeFor[*crew.Group](), reflect.TypeFor[*crew.ResultGroup[int]]()} {
			if _, ok := typ.MethodByName(m); !ok {
				t.Errorf("%v has no %s", typ, m)
			}
		}
	}
}

// full returns a pool of one worker and no queue whose worker is busy
// until the test ends: every submission finds no room.
func full(t *testing.T, opts ...crew.Option) *crew.Pool {
	t.Helper()
	p := crew.New(1, append([]crew.Option{crew.WithQueueSize(0)}, opts...)...)
	release := gate(t, p)
	t.Cleanup(func() { release(); p.Stop() })
	return p
}

// The forms of a family on a full pool: Try refuses at once, Context gives
// up with the context's error, the plain call waits for room (or, on a
// non-blocking pool, fails with ErrQueueFull), and a nil context is
// invalid.
func TestFormsOnAFullPool(t *testing.T) {
	type forms struct {
		try   func(p *crew.Pool) bool
		ctx   func(ctx context.Context, p *crew.Pool) error
		plain func(p *crew.Pool) error
	}
	nop := func() {}
	nopCtx := func(context.Context) error { return nil }
	taskErr := func(task *crew.Task, ok bool) bool { return ok }
	families := map[string]func(p *crew.Pool) forms{
		"Pool.Go": func(*crew.Pool) forms {
			return forms{
				try:   func(p *crew.Pool) bool { return p.TryGo(nop) },
				ctx:   func(ctx context.Context, p *crew.Pool) error { return p.GoContext(ctx, nop) },
				plain: func(p *crew.Pool) error { return p.Go(nop) },
			}
		},
		"Pool.Submit": func(*crew.Pool) forms {
			return forms{
				try:   func(p *crew.Pool) bool { return taskErr(p.TrySubmit(nopCtx)) },
				ctx:   func(ctx context.Context, p *crew.Pool) error { return p.SubmitContext(ctx, nopCtx).Wait() },
				plain: func(p *crew.Pool) error { return p.Submit(nopCtx).Wait() },
			}
		},
		"Keyed": func(p *crew.Pool) forms {
			k := crew.NewKeyed[int](p)
			return forms{
				try:   func(*crew.Pool) bool { return k.TryGo(1, nop) },
				ctx:   func(ctx context.Context, _ *crew.Pool) error { return k.GoContext(ctx, 2, nop) },
				plain: func(*crew.Pool) error { return k.Submit(3, nopCtx).Wait() },
			}
		},
		"Keyed.Submit": func(p *crew.Pool) forms {
			k := crew.NewKeyed[int](p)
			return forms{
				try:   func(*crew.Pool) bool { return taskErr(k.TrySubmit(1, nopCtx)) },
				ctx:   func(ctx context.Context, _ *crew.Pool) error { return k.SubmitContext(ctx, 2, nopCtx).Wait() },
				plain: func(*crew.Pool) error { return k.Go(3, nop) },
			}
		},
		"Priority": func(p *crew.Pool) forms {
			q := crew.NewPriority(p)
			return forms{
				try:   func(*crew.Pool) bool { return q.TryGo(1, nop) },
				ctx:   func(ctx context.Context, _ *crew.Pool) error { return q.GoContext(ctx, 2, nop) },
				plain: func(*crew.Pool) error { return q.Submit(3, nopCtx).Wait() },
			}
		},
		"Priority.Submit": func(p *crew.Pool) forms {
			q := crew.NewPriority(p)
			return forms{
				try:   func(*crew.Pool) bool { return taskErr(q.TrySubmit(1, nopCtx)) },
				ctx:   func(ctx context.Context, _ *crew.Pool) error { return q.SubmitContext(ctx, 2, nopCtx).Wait() },
				plain: func(*crew.Pool) error { return q.Go(3, nop) },
			}
		},
	}
	for name, build := range families {
		t.Run(name, func(t *testing.T) {
			leak.Check(t)
			// Blocking: Try refuses, Context gives up, the plain call waits.
			p := crew.New(1, crew.WithQueueSize(0))
			defer p.Stop()
			f := build(p)
			release := gate(t, p)
			if f.try(p) {
				t.Fatal("the Try form accepted a task on a full pool")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if err := f.ctx(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the Context form = %v, want DeadlineExceeded", err)
			}
			if err := f.ctx(nil, p); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // testing nil
				t.Fatalf("the Context form with a nil context = %v, want ErrInvalid", err)
			}
			plain := make(chan error, 1)
			go func() { plain <- f.plain(p) }()
			select {
			case err := <-plain:
				t.Fatalf("the plain form returned %v on a full pool instead of waiting", err)
			case <-time.After(10 * time.Millisecond):
			}
			release()
			if err := recvWithin(t, plain, "the plain form after room came"); err != nil {
				t.Fatalf("the plain form = %v once room came", err)
			}
			// Non-blocking: the plain call fails fast, Context still waits.
			nb := full(t, crew.WithNonBlocking())
			g := build(nb)
			if err := g.plain(nb); !errors.Is(err, crew.ErrQueueFull) {
				t.Fatalf("the plain form on a full non-blocking pool = %v, want ErrQueueFull", err)
			}
			short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel2()
			if err := g.ctx(short, nb); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the Context form on a non-blocking pool = %v, want DeadlineExceeded", err)
			}
		})
	}
}

// A function pool's forms follow the same rules.
func TestFuncPoolFormsOnAFullPool(t *testing.T) {
	leak.Check(t)
	hold := make(chan struct{})
	p := crew.NewFunc(1, func(_ context.Context, v int) error {
		if v == 0 {
			<-hold
		}
		return nil
	}, crew.WithQueueSize(0))
	defer p.Stop()
	if err := p.Invoke(0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first value to run", func() bool { return p.Stats().Running == 1 })
	if p.TryInvoke(1) {
		t.Fatal("TryInvoke accepted a value on a full pool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.InvokeContext(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InvokeContext = %v, want DeadlineExceeded", err)
	}
	close(hold)
	if err := p.InvokeContext(context.Background(), 1); err != nil {
		t.Fatalf("InvokeContext once room came = %v", err)
	}
}

// A RateLimited never waits: its queue is unbounded. Its Try and Context
// forms accept like Go, refuse once the pool stops, and check ctx.
func TestRateLimitedForms(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	r := crew.NewRateLimited(p, crew.Rate{Limit: 1000, Per: time.Second, Burst: 10})
	ran := make(chan struct{}, 4)
	task := func() { ran <- struct{}{} }
	if !r.TryGo(task) || r.GoContext(context.Background(), task) != nil {
		t.Fatal("a RateLimited refused a task on an idle pool")
	}
	if tk, ok := r.TrySubmit(func(context.Context) error { ran <- struct{}{}; return nil }); !ok || tk.Wait() != nil {
		t.Fatal("TrySubmit refused or failed")
	}
	if err := r.SubmitContext(context.Background(), func(context.Context) error { ran <- struct{}{}; return nil }).Wait(); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.GoContext(ended, task); err != context.Canceled {
		t.Fatalf("GoContext with an ended context = %v", err)
	}
	r.Wait()
	if len(ran) != 4 {
		t.Fatalf("%d tasks ran, want 4", len(ran))
	}
	p.Stop()
	if r.TryGo(task) {
		t.Fatal("TryGo accepted a task after Stop")
	}
	if tk, ok := r.TrySubmit(func(context.Context) error { return nil }); ok || tk.Wait() != crew.ErrStopped {
		t.Fatalf("TrySubmit after Stop = %v, %v", ok, tk.Wait())
	}
}

// A refused TrySubmit returns a Task already done with the reason.
func TestTrySubmitRefusedTaskIsDone(t *testing.T) {
	leak.Check(t)
	p := full(t)
	task, ok := p.TrySubmit(func(context.Context) error { return nil })
	if ok {
		t.Fatal("TrySubmit accepted a task on a full pool")
	}
	select {
	case <-task.Done():
	default:
		t.Fatal("the refused Task is not done")
	}
	if err := task.Wait(); !errors.Is(err, crew.ErrQueueFull) {
		t.Fatalf("refused Task = %v, want ErrQueueFull", err)
	}
	if task, ok := p.TrySubmit(nil); ok || task.Wait() != crew.ErrNilTask {
		t.Fatalf("TrySubmit(nil) = %v, %v", ok, task.Wait())
	}
}

// Done is closed once the pool will start nothing more: at the end of
// Stop, or as soon as Shutdown's deadline has dropped the queue, while a
// task still runs.
func TestPoolDone(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	release := gate(t, p)
	p.Go(func() {})
	select {
	case <-p.Done():
		t.Fatal("Done is closed on a running pool")
	default:
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(expired) }()
	recvWithin(t, p.Done(), "Done after Shutdown's deadline")
	release()
	var se *crew.ShutdownError
	if err := recvWithin(t, shut, "Shutdown"); !errors.As(err, &se) || se.Dropped != 1 {
		t.Fatalf("Shutdown = %v, want one task dropped", err)
	}

	q := crew.New(1)
	q.Go(func() {})
	q.Stop()
	recvWithin(t, q.Done(), "Done after Stop")
	var zero crew.Pool
	recvWithin(t, zero.Done(), "a zero Pool's Done")
}

// WithErrorHandler on a Pool receives the errors of its Submit tasks, and
// of the Submit tasks of its layers, before their Wait returns.
func TestPoolErrorHandler(t *testing.T) {
	leak.Check(t)
	got := make(chan error, 4)
	p := crew.New(2, crew.WithErrorHandler(func(err error) { got <- err }))
	defer p.Stop()
	boom := errors.New("boom")
	if err := p.Submit(func(context.Context) error { return boom }).Wait(); err != boom {
		t.Fatalf("Wait = %v", err)
	}
	if err := recvWithin(t, got, "the handler"); err != boom {
		t.Fatalf("handler got %v", err)
	}
	k := crew.NewKeyed[int](p)
	k.Submit(1, func(context.Context) error { return boom }).Wait()
	if err := recvWithin(t, got, "the handler"); err != boom {
		t.Fatalf("handler got %v from a Keyed task", err)
	}
	p.Submit(func(context.Context) error { return nil }).Wait()
	p.Go(func() {})
	p.Wait()
	if len(got) != 0 || p.Stats().Failed != 2 {
		t.Fatalf("handler got %d more, Failed = %d; want none and 2", len(got), p.Stats().Failed)
	}
}

// Every constructor reports a nil option and an invalid value the same
// way, when it is given them: a panic with an error wrapping ErrInvalid.
// The options themselves never panic.
func TestOptionsReportedByTheirConstructor(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	ctx := context.Background()
	fn := func(context.Context, int) error { return nil }
	state := func(context.Context) (int, error) { return 0, nil }
	sfn := func(context.Context, int, int) error { return nil }
	bad := map[string]func(){
		"New nil":                func() { crew.New(1, nil) },
		"New invalid":            func() { crew.New(1, crew.WithQueueSize(-1)) },
		"NewFunc nil":            func() { crew.NewFunc(1, fn, nil) },
		"NewFunc invalid":        func() { crew.NewFunc(1, fn, crew.WithIdleTimeout(0)) },
		"NewFuncWithState nil":   func() { crew.NewFuncWithState(1, state, nil, sfn, nil) },
		"NewFuncWithState bad":   func() { crew.NewFuncWithState(1, state, nil, sfn, crew.WithPanicHandler(nil)) },
		"NewGroup nil":           func() { crew.NewGroup(ctx, p, nil) },
		"NewGroup invalid":       func() { crew.NewGroup(ctx, p, crew.WithLimit(0)) },
		"NewResultGroup invalid": func() { crew.NewResultGroup[int](ctx, p, crew.WithTaskTimeout(-1)) },
		"NewStream invalid":      func() { crew.NewStream(ctx, p, crew.WithLimit(-2)) },
		"NewStream WithRetry":    func() { crew.NewStream(ctx, p, crew.WithRetry(crew.Retry{Attempts: 2})) },
		"NewKeyed nil":           func() { crew.NewKeyed[int](p, nil) },
		"NewKeyed invalid":       func() { crew.NewKeyed[int](p, crew.WithKeyRate(crew.Rate{})) },
		"NewKeyed limit 0":       func() { crew.NewKeyed[int](p, crew.WithKeyLimit(0)) },
		"NewPriority nil":        func() { crew.NewPriority(p, nil) },
		"NewPriority invalid":    func() { crew.NewPriority(p, crew.WithAging(-time.Second)) },
		"NewRateLimited invalid": func() { crew.NewRateLimited(p, crew.Rate{Limit: -1, Per: time.Second}) },
		"NewRateLimited nil":     func() { crew.NewRateLimited(nil, crew.Rate{Limit: 1, Per: time.Second}) },
		"NewRetrying invalid":    func() { crew.NewRetrying(p, crew.Retry{}) },
		"NewRetrying nil":        func() { crew.NewRetrying(nil, crew.Retry{Attempts: 1}) },
	}
	for name, f := range bad {
		if err, panicked := recoverErr(f); !panicked || !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: panic %v, want an error wrapping ErrInvalid", name, err)
		}
	}
	for name, f := range map[string]func(){
		"WithQueueSize(-1)":     func() { crew.WithQueueSize(-1) },
		"WithPanicHandler(nil)": func() { crew.WithPanicHandler(nil) },
		"WithLimit(0)":          func() { crew.WithLimit(0) },
		"WithTaskTimeout(0)":    func() { crew.WithTaskTimeout(0) },
		"WithAging(-1)":         func() { crew.WithAging(-1) },
		"WithKeyRate(Rate{})":   func() { crew.WithKeyRate(crew.Rate{}) },
		"WithKeyLimit(0)":       func() { crew.WithKeyLimit(0) },
	} {
		if err, panicked := recoverErr(f); panicked {
			t.Errorf("%s panicked when called: %v", name, err)
		}
	}
}

// Group.TryGo and ResultGroup.TryGo have errgroup's semantics: a task is
// accepted only if the group's limit lets it start at once.
func TestGroupTryGo(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	release := make(chan struct{})
	block := func(ctx context.Context) error { <-release; return nil }
	g := crew.NewGroup(context.Background(), p, crew.WithLimit(2))
	if !g.TryGo(block) || !g.TryGo(block) {
		t.Fatal("TryGo refused a task within the limit")
	}
	if g.TryGo(block) {
		t.Fatal("TryGo accepted a task beyond the limit")
	}
	close(release)
	eventually(t, "room in the limit", func() bool { return g.TryGo(func(context.Context) error { return nil }) })
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if g.TryGo(block) {
		t.Fatal("TryGo accepted a task after Wait")
	}

	rg := crew.NewResultGroup[int](context.Background(), p) // no limit: TryGo is Go
	for i := range 10 {
		if !rg.TryGo(func(context.Context) (int, error) { return i, nil }) {
			t.Fatal("TryGo refused a task without a limit")
		}
	}
	if out, err := rg.Wait(); len(out) != 10 || out[9] != 9 || err != nil {
		t.Fatalf("Wait = %v, %v; want ten results", out, err)
	}
	nilGroup := crew.NewGroup(context.Background(), p)
	if nilGroup.TryGo(nil) {
		t.Fatal("TryGo(nil) = true")
	}
	if err := nilGroup.Wait(); err != crew.ErrNilTask {
		t.Fatalf("Wait after TryGo(nil) = %v, want ErrNilTask", err)
	}
}

// Stream's forms wait for room in its window: TryGo never does, GoContext
// until its context ends.
func TestStreamForms(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	defer p.Stop()
	s := crew.NewStream(context.Background(), p, crew.WithLimit(1))
	release := make(chan struct{})
	var got []int
	if err := s.Go(func(context.Context) func() { <-release; return func() { got = append(got, 1) } }); err != nil {
		t.Fatal(err)
	}
	if s.TryGo(func(context.Context) func() { return nil }) {
		t.Fatal("TryGo accepted a task with the window full")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.GoContext(ctx, func(context.Context) func() { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GoContext with the window full = %v, want DeadlineExceeded", err)
	}
	if err := s.GoContext(nil, func(context.Context) func() { return nil }); !errors.Is(err, crew.ErrInvalid) { //nolint:staticcheck // testing nil
		t.Fatalf("GoContext(nil) = %v, want ErrInvalid", err)
	}
	close(release)
	if err := s.GoContext(context.Background(), func(context.Context) func() { return func() { got = append(got, 2) } }); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("Wait = %v, callbacks %v; want nil and [1 2]", err, got)
	}
}

// A RateLimited on a RateLimited runs its tasks at both rates, and its
// tasks still waiting for a token when the pool stops are dropped.
func TestRateLimitedOnRateLimited(t *testing.T) {
	leak.Check(t)
	p := crew.New(2)
	outer := crew.NewRateLimited(p, crew.Rate{Limit: 1000, Per: time.Second, Burst: 10})
	inner := crew.NewRateLimited(outer, crew.Rate{Limit: 1, Per: time.Hour})
	first := inner.Submit(func(context.Context) error { return nil })
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	second := inner.Submit(func(context.Context) error { return nil }) // its token is an hour away
	k := crew.NewKeyed[int](inner)
	third := k.Submit(1, func(context.Context) error { return nil })
	p.Stop()
	for i, task := range []*crew.Task{second, third} {
		if err := task.Wait(); err != crew.ErrDropped {
			t.Fatalf("task %d waiting for a token at Stop = %v, want ErrDropped", i, err)
		}
	}
	if s := inner.Stats(); s.Dropped != 2 || s.Unfinished != 0 {
		t.Fatalf("inner stats %+v, want 2 dropped, none unfinished", s)
	}
	if s := k.Stats(); s.Dropped != 1 || s.Unfinished != 0 {
		t.Fatalf("Keyed stats %+v, want 1 dropped, none unfinished", s)
	}
}
