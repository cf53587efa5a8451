package crew_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

// The group operations of FuzzPool (fuzz_test.go): a Group, ResultGroup or
// MapErr on the fuzzed pool, given up to eight tasks of the fuzz task kinds
// and waited for by the actor that made it, while the other actors use the
// pool; and the checks of the groups' documented contracts.
//
// The argument of foGroup and foResults: bits 0-2 the kind of the even
// tasks (the odd ones are harmless, so that a failing kind fails several
// times with tasks in between), bits 3-5 the number of tasks less one, bit
// 6 WithLimit(1), bit 7 WithAllErrors (foGroup) or MapErr instead of a
// ResultGroup (foResults).

// fuzzGroup is the model of one group.
type fuzzGroup struct {
	m       *fuzzModel
	what    string // "Group", "ResultGroup" or "MapErr"
	limit   int    // WithLimit; 0: none
	all     bool   // WithAllErrors
	goChild func() // Group: Go of a child task, from inside a task

	waiter    atomic.Int64 // id of the goroutine in Wait: tasks it runs hold no worker
	running   atomic.Int64 // tasks of the group running
	closed    atomic.Bool  // Wait has returned
	failedRan atomic.Bool  // a task that fails has run
	exits     int          // goroutines in Wait ended by a task's Goexit
	unseen    int          // panics Wait did not report: the pool's panic handler gets them

	mu           sync.Mutex
	tasks        []*fuzzTask // accepted by Go, in that order
	refusedTasks []*fuzzTask
}

var fuzzBenignKinds = [...]int{fkNoop, fkYield, fkSleep, fkCtx}

func fuzzGroupSize(arg byte) int { return 1 + int(arg>>3)&7 }

// fuzzGroupKind returns the kind of task i of a group operation.
func fuzzGroupKind(arg byte, i int) int {
	if i%2 == 1 {
		return fuzzBenignKinds[(i/2)%len(fuzzBenignKinds)]
	}
	return int(arg & 7)
}

// fuzzKindErr returns the error a task of kind fails with, or nil.
func fuzzKindErr(kind int) error {
	switch kind {
	case fkError:
		return errFuzzTask
	case fkPanic:
		return errFuzzPanic
	case fkGoexit:
		return crew.ErrGoexit
	}
	return nil
}

// fuzzErrIs reports whether err is the error of a task that failed with
// want (from fuzzKindErr): a panic comes back as a *PanicError.
func fuzzErrIs(err, want error) bool {
	if want == errFuzzPanic {
		var pe *crew.PanicError
		return errors.As(err, &pe) && errors.Is(err, errFuzzPanic) && len(pe.Stack) > 0
	}
	return err == want
}

// fuzzUnjoin returns the errors joined in err.
func fuzzUnjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// fuzzGoid returns the id of the calling goroutine.
func fuzzGoid() int64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	var id int64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int64(c-'0')
	}
	return id
}

func (m *fuzzModel) newGroup(what string, arg byte, all bool) *fuzzGroup {
	g := &fuzzGroup{m: m, what: what, all: all}
	if arg&0x40 != 0 {
		g.limit = 1
	}
	m.mu.Lock()
	m.groups = append(m.groups, g)
	m.mu.Unlock()
	return g
}

func (g *fuzzGroup) options() []crew.GroupOption {
	var opts []crew.GroupOption
	if g.limit > 0 {
		opts = append(opts, crew.WithLimit(g.limit))
	}
	if g.all {
		opts = append(opts, crew.WithAllErrors())
	}
	return opts
}

func (g *fuzzGroup) task(kind, i int) *fuzzTask {
	return &fuzzTask{kind: kind, group: g, value: 1 + 10*i}
}

// settle records the outcome of Go and checks its error.
func (g *fuzzGroup) settle(ft *fuzzTask, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.m.grouped.Store(true)
		g.tasks = append(g.tasks, ft)
		return
	case err == crew.ErrStopped:
		if !g.m.stopBegun.Load() {
			g.m.errorf("%s.Go = ErrStopped before Stop or Shutdown", g.what)
		}
	default:
		// ErrGroupDone cannot be: Wait has not returned (a child's parent
		// is still running).
		g.m.errorf("%s.Go = unexpected error %v", g.what, err)
	}
	g.refusedTasks = append(g.refusedTasks, ft)
}

// enter is called by a task of the group as it starts; it reports whether
// the task runs on one of the pool's workers, not on the goroutine in Wait.
func (g *fuzzGroup) enter(ft *fuzzTask) (onWorker bool) {
	m := g.m
	if g.closed.Load() {
		m.errorf("a %s task of a %s started after Wait returned", fuzzKindNames[ft.kind], g.what)
	}
	if g.limit == 1 && !g.all && g.failedRan.Load() {
		m.errorf("a %s task of a %s WithLimit(1) started after a task failed", fuzzKindNames[ft.kind], g.what)
	}
	if r := g.running.Add(1); g.limit > 0 && r > int64(g.limit) {
		m.errorf("%d tasks of a %s WithLimit(%d) running at once", r, g.what, g.limit)
	}
	return fuzzGoid() != g.waiter.Load()
}

func (g *fuzzGroup) leave(ft *fuzzTask) {
	if fuzzKindErr(ft.kind) != nil {
		g.failedRan.Store(true)
	}
	g.running.Add(-1)
}

// wait runs wait, a call of the group's Wait, on a new goroutine, again
// on another while a task that Wait ran on its goroutine ends it with
// runtime.Goexit (if retry). It reports whether Wait returned in time.
func (g *fuzzGroup) wait(retry bool, wait func()) bool {
	m := g.m
	for {
		returned := false
		if !m.mustReturn(10*time.Second, g.what+".Wait", func() {
			g.waiter.Store(fuzzGoid())
			wait()
			returned = true
			g.closed.Store(true)
			if n := g.running.Load(); n != 0 {
				m.errorf("%s.Wait returned while %d of its tasks ran", g.what, n)
			}
		}) {
			return false
		}
		if returned {
			return true
		}
		g.exits++
		g.mu.Lock()
		n := len(g.tasks)
		g.mu.Unlock()
		if !retry || g.exits > n {
			m.errorf("%s.Wait: its goroutine exited %d times", g.what, g.exits)
			return false
		}
	}
}

// verify checks what Wait returned, err, against the tasks.
func (g *fuzzGroup) verify(err error) {
	m := g.m
	stopped := m.stopBegun.Load()
	g.mu.Lock()
	tasks, refused := g.tasks, g.refusedTasks
	g.mu.Unlock()
	var failed []error // of the tasks that ran, in submission order
	skipped, goexits, panics := 0, 0, 0
	for _, ft := range tasks {
		switch runs := ft.runs.Load(); {
		case runs == 0:
			skipped++
		case !ft.finished.Load():
			m.errorf("a %s task of a %s had not finished when Wait returned", fuzzKindNames[ft.kind], g.what)
		default:
			if e := fuzzKindErr(ft.kind); e != nil {
				failed = append(failed, e)
			}
			switch ft.kind {
			case fkGoexit:
				goexits++
			case fkPanic:
				panics++
			}
		}
	}
	if !g.all {
		g.unseen = panics
		if pe := (*crew.PanicError)(nil); errors.As(err, &pe) {
			g.unseen--
		}
	}
	for _, ft := range refused {
		if ft.runs.Load() != 0 {
			m.errorf("a %s task refused by %s.Go ran", fuzzKindNames[ft.kind], g.what)
		}
	}
	if g.exits > goexits {
		m.errorf("%s.Wait's goroutine exited %d times, %d tasks called Goexit", g.what, g.exits, goexits)
	}
	if skipped > 0 && !stopped && (g.all || len(failed) == 0) {
		m.errorf("%s (all errors: %v) skipped %d of %d tasks, but none failed and the pool was not stopped", g.what, g.all, skipped, len(tasks))
	}
	if g.all {
		g.verifyAll(err, failed, len(refused), skipped, stopped)
		return
	}
	switch {
	case err == nil:
		if len(failed)+len(refused)+skipped > 0 {
			m.errorf("%s.Wait = nil; %d tasks failed, %d were refused, %d skipped", g.what, len(failed), len(refused), skipped)
		}
	case err == crew.ErrStopped:
		if !stopped {
			m.errorf("%s.Wait = ErrStopped before Stop or Shutdown", g.what)
		}
	case !slices.ContainsFunc(failed, func(want error) bool { return fuzzErrIs(err, want) }):
		m.errorf("%s.Wait = %v; no task that ran failed with it (failed: %v)", g.what, err, failed)
	}
	// WithLimit(1) the first task to fail is the only one (enter), and
	// its error is the first: the group cannot have failed with
	// ErrStopped before, unless Go was refused.
	if g.limit == 1 && len(failed) == 1 && len(refused) == 0 && !fuzzErrIs(err, failed[0]) {
		m.errorf("%s WithLimit(1).Wait = %v, want the error of the task that failed, %v", g.what, err, failed[0])
	}
}

// verifyAll checks Wait's error WithAllErrors: the errors of the tasks
// that failed in submission order, then ErrStopped for each Go refused and
// for the group's cancellation by the pool's stop.
func (g *fuzzGroup) verifyAll(err error, failed []error, refused, skipped int, stopped bool) {
	m := g.m
	errs := fuzzUnjoin(err)
	if len(errs) < len(failed) {
		m.errorf("%s WithAllErrors.Wait = %v, want the %d errors %v first", g.what, err, len(failed), failed)
		return
	}
	for i, want := range failed {
		if !fuzzErrIs(errs[i], want) {
			m.errorf("%s WithAllErrors.Wait = %v, want the errors %v first, in submission order", g.what, err, failed)
			return
		}
	}
	rest := errs[len(failed):]
	for _, e := range rest {
		if e != crew.ErrStopped {
			m.errorf("%s WithAllErrors.Wait = %v: unexpected %v after the tasks' errors %v", g.what, err, e, failed)
			return
		}
	}
	switch {
	case len(rest) < refused:
		m.errorf("%s WithAllErrors.Wait = %v, with %d Go refused", g.what, err, refused)
	case skipped > 0 && len(rest) == 0:
		m.errorf("%s WithAllErrors.Wait = %v: %d tasks skipped, no cause", g.what, err, skipped)
	case len(rest) > 0 && !stopped:
		m.errorf("%s WithAllErrors.Wait = %v before Stop or Shutdown", g.what, err)
	}
}

// verifyValues checks the results of a ResultGroup or MapErr: the value
// of each task at its index, zero for a task that did not return.
func (g *fuzzGroup) verifyValues(vals []int) {
	g.mu.Lock()
	tasks := g.tasks
	g.mu.Unlock()
	if len(vals) != len(tasks) {
		g.m.errorf("%s returned %d results for %d tasks", g.what, len(vals), len(tasks))
		return
	}
	for i, ft := range tasks {
		want := 0
		if ft.runs.Load() == 1 && ft.kind != fkPanic && ft.kind != fkGoexit {
			want = ft.value
		}
		if vals[i] != want {
			g.m.errorf("%s: result %d is %d, want %d (a %s task, runs=%d)", g.what, i, vals[i], want, fuzzKindNames[ft.kind], ft.runs.Load())
		}
	}
}

// after checks a group whose Wait returned err: Go is refused with
// ErrGroupDone, Wait (again) returns err at once, the context is done.
func (g *fuzzGroup) after(goFn func(func(context.Context) error) error, again func() error, ctx context.Context, err error) bool {
	m := g.m
	late := func(context.Context) error {
		m.errorf("a task that %s.Go accepted after Wait returned ran", g.what)
		return nil
	}
	if e := goFn(late); e != crew.ErrGroupDone {
		m.errorf("%s.Go after Wait = %v, want ErrGroupDone", g.what, e)
	}
	var e error
	if !m.mustReturn(10*time.Second, g.what+".Wait again", func() { e = again() }) {
		return false
	}
	if e != err {
		m.errorf("%s.Wait again = %v, first %v", g.what, e, err)
	}
	if ctx.Err() == nil {
		m.errorf("%s.Context() is not done after Wait", g.what)
	}
	return true
}

// groupOp runs a foGroup operation.
func (m *fuzzModel) groupOp(arg byte) bool {
	g := m.newGroup("Group", arg, arg&0x80 != 0)
	grp := m.p.Group(context.Background(), g.options()...)
	g.goChild = func() {
		child := g.task(fkNoop, 0)
		g.settle(child, grp.Go(func(ctx context.Context) error { return m.body(child, ctx) }))
	}
	for i := range fuzzGroupSize(arg) {
		ft := g.task(fuzzGroupKind(arg, i), i)
		g.settle(ft, grp.Go(func(ctx context.Context) error { return m.body(ft, ctx) }))
	}
	var err error
	if !g.wait(true, func() { err = grp.Wait() }) {
		return false
	}
	g.verify(err)
	return g.after(grp.Go, grp.Wait, grp.Context(), err)
}

// resultsOp runs a foResults operation: a ResultGroup, or MapErr. Their
// tasks submit no child; MapErr's do not call Goexit, which would end the
// actor inside MapErr with no Wait to call again.
func (m *fuzzModel) resultsOp(arg byte) bool {
	mapErr := arg&0x80 != 0
	what := "ResultGroup"
	if mapErr {
		what = "MapErr"
	}
	g := m.newGroup(what, arg, false)
	tasks := make([]*fuzzTask, fuzzGroupSize(arg))
	for i := range tasks {
		kind := fuzzGroupKind(arg, i)
		switch {
		case kind == fkNested:
			kind = fkNoop
		case kind == fkGoexit && mapErr:
			kind = fkError
		}
		tasks[i] = g.task(kind, i)
	}
	run := func(ctx context.Context, ft *fuzzTask) (int, error) {
		err := m.body(ft, ctx)
		return ft.value, err
	}
	if mapErr {
		// MapErr takes all the items or, the pool stopped, none: count
		// them all accepted, those not run skipped.
		g.tasks = tasks
		m.grouped.Store(true)
		var out []int
		var err error
		if !g.wait(false, func() {
			out, err = crew.MapErr(context.Background(), m.p, tasks, run, g.options()...)
		}) {
			return false
		}
		g.verify(err)
		g.verifyValues(out)
		return true
	}
	rg := crew.NewResultGroup[int](context.Background(), m.p, g.options()...)
	for _, ft := range tasks {
		g.settle(ft, rg.Go(func(ctx context.Context) (int, error) { return run(ctx, ft) }))
	}
	var vals []int
	var err error
	if !g.wait(true, func() { vals, err = rg.Wait() }) {
		return false
	}
	g.verify(err)
	g.verifyValues(vals)
	goFn := func(f func(context.Context) error) error {
		return rg.Go(func(ctx context.Context) (int, error) { return 0, f(ctx) })
	}
	again := func() error {
		v, e := rg.Wait()
		if len(v) != len(vals) || len(v) > 0 && &v[0] != &vals[0] {
			m.errorf("ResultGroup.Wait again returned another slice")
		}
		return e
	}
	return g.after(goFn, again, rg.Context(), err)
}

// checkGroups checks every group once the pool has stopped and returns the
// number of group tasks that panicked (Stats.Panicked counts them) and of
// those panics that Wait did not report (the panic handler got them).
func (m *fuzzModel) checkGroups() (panics, unseen int) {
	for _, g := range m.groups {
		if !g.closed.Load() {
			m.t.Errorf("a %s's Wait did not return", g.what)
		}
		g.mu.Lock()
		m.groupAcceptedN += len(g.tasks)
		for _, ft := range g.tasks {
			if ft.runs.Load() == 1 {
				m.groupRanN++
				if ft.kind == fkPanic {
					panics++
				}
			}
		}
		unseen += g.unseen
		g.mu.Unlock()
	}
	return panics, unseen
}
