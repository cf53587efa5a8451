package crew_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// FuzzPool is a model-based test of Pool. The input is a program: a pool
// configuration and a list of operations (Go, Submit, TryGo, GoContext,
// Resize, Wait, Stats, Stop, Shutdown, Pause and Resume, Task.Wait,
// Task.Cancel, groups on the pool: a Group, WithLimit(1) or WithAllErrors
// or not, a ResultGroup and a MapErr, each given up to eight tasks and
// waited for, and a Subpool on the pool, limit 1 to 4, its queue bounded
// or not: weighted tasks by every Weighted submission form, of weights 1
// to the limit and invalid ones, and its Wait, Stats, Stop and Shutdown)
// split over up to four goroutines that run them at the same time. Tasks
// are tiny, yield, sleep, panic, call runtime.Goexit, return an error,
// wait on their context or submit a child (a group task: to its own
// group). Nothing in a program can block forever.
//
// The model checks, while the program runs and after the pool has stopped:
//
//   - every accepted task runs exactly once or is counted as dropped or
//     cancelled, and a refused task never runs; a Submit task's Wait
//     returns context.Canceled exactly when a Cancel call said it kept the
//     task from starting, and that task never runs;
//   - the number of tasks running never exceeds the highest worker limit set
//     so far (exactly the limit when the program never resizes);
//   - each call returns an error it is documented to return, and only in the
//     state where it may (ErrStopped only after Stop or Shutdown began,
//     ErrQueueFull only on a bounded queue, a false TryGo only on a
//     bounded or stopped pool);
//   - Wait returns, and when it does every task the caller had submitted
//     before it has finished (unless a Shutdown may have dropped it);
//   - Stop and Shutdown return with no worker left;
//   - the counters add up: Submitted = accepted = Completed + Dropped +
//     Cancelled, Completed = tasks that ran, Cancelled = tasks cancelled,
//     Panicked and Failed match the tasks, the
//     ShutdownErrors' Dropped add up to Stats', nothing is Running, Queued
//     or Idle after Stop;
//   - every group task accepted by Go runs exactly once or is skipped,
//     and only when the group was cancelled (an error, a panic, or the
//     pool stopping: ErrStopped); none starts after its Wait returned, nor,
//     WithLimit(1), after a task failed; Wait returns the first error (the
//     one of the task that failed, WithLimit(1)), or every error in
//     submission order WithAllErrors, or ErrStopped, and nil only when
//     nothing failed, was refused or skipped; a ResultGroup or MapErr
//     returns each result at its task's index; after Wait, Go returns
//     ErrGroupDone, Wait returns the same again and the context is done;
//     a group never runs more tasks at once than its limit, and its tasks
//     on the pool's workers count toward the pool's limit (those that Wait
//     runs on its own goroutine do not);
//   - the counters add up with the group tasks too: the steps that run
//     them are pool tasks (Submitted, Completed, Dropped), their panics
//     count in Panicked;
//   - the weights of the Subpool's tasks running at once never add up to
//     more than its limit, and its tasks count toward the pool's limit;
//     a task of an invalid weight is refused with ErrInvalid (TryGo:
//     false) and never runs, even after the pool stopped; the other
//     refusals are documented ones, in the state where they may be, as
//     for the pool's calls (ErrStopped only after the Subpool's or the
//     pool's Stop or Shutdown began, ErrQueueFull only on its bounded
//     queue);
//   - every task the Subpool accepted runs exactly once or is counted in
//     its Stats as dropped or cancelled (a Subpool Submit task completes
//     with context.Canceled exactly when Cancel said it kept it from
//     starting); its Wait, Stop and Shutdown return, when every task the
//     caller had queued on it before has finished (unless it may have been
//     dropped); after its Stop or Shutdown, and after the pool stopped,
//     nothing is Unfinished, Waiting, Running or InUse; the
//     ShutdownErrors' Dropped are among Stats' Dropped; its tasks'
//     panics and failures count in the pool's Panicked and Failed, and
//     its steps, like a group's, in Submitted, Completed and Dropped;
//   - no goroutine survives (leak.Check).
//
// decodeFuzzProgram says how the bytes encode a program; the group
// operations are described in fuzz_group_test.go, the Subpool's in
// fuzz_subpool_test.go.
//
// The seed corpus is in testdata/fuzz/FuzzPool; `go test` runs it. To
// search for new failures: go test -run '^$' -fuzz FuzzPool -fuzztime 20s .
// Set CREW_FUZZ_STRICT=1 to also require Stats().Running <= the limit.
func FuzzPool(f *testing.F) {
	f.Add([]byte("\x03\x00\x00\x00\x00\x27\x10\x27\x07\x00\x09\x80"))
	// Cancels of queued and running Submit tasks racing a Shutdown whose
	// deadline has passed, and racing the final Stop.
	f.Add([]byte("\x00\x00\x00\x05\x02\x3a\x02\x3e\x0a\x80\x1c\x01\x0a\x85\x19\x82\x0a\x8b\x0a\x8f"))
	f.Add([]byte("\x01\x00\x00\x01\x02\x3e\x0a\x81\x12\x3a\x1a\x83\x0a\x84\x1a\x86"))
	// Subpool tasks of every weight, invalid ones among them, Go, Submit
	// and TryGo, a Cancel, a pause, the Subpool's Wait, Stats and Stop,
	// then submissions to the stopped Subpool.
	f.Add([]byte("\x13\x00\x00\x01\x01\x8a\x11\xa1\x01\x96\x11\xb8\x01\xdf\x1a\x81\x01\xab\x11\xe0\x01\xe8\x0c\x83\x11\x8d\x01\xf0\x11\x81"))
	// A Subpool with a bounded non-blocking queue on a pool with a bounded
	// queue: heavy and light tasks, a Cancel, the Subpool's Shutdown whose
	// deadline has passed, then the pool's Shutdown.
	f.Add([]byte("\x79\x09\x00\x1a\x01\x8a\x11\x86\x21\xb1\x01\xac\x11\xc7\x2a\x80\x01\xf8\x11\x8a\x21\xe0\x19\x81"))
	f.Fuzz(func(t *testing.T, data []byte) {
		leak.Check(t)
		prog := decodeFuzzProgram(data)
		m := runFuzzProgram(t, prog)
		if testing.Verbose() {
			t.Logf("%s: ops=%d accepted=%d ran=%d dropped=%d cancelled=%d groups=%d group tasks accepted=%d ran=%d Subpool tasks accepted=%d ran=%d",
				prog, m.ops.Load(), m.acceptedN, m.ranN, m.droppedN, m.cancelledN, len(m.groups), m.groupAcceptedN, m.groupRanN, m.subAcceptedN, m.subRanN)
		}
		if path := os.Getenv("CREW_FUZZ_COUNT_FILE"); path != "" {
			appendFuzzCount(path, m.ops.Load(), m.acceptedN)
		}
	})
}

// Task kinds.
const (
	fkNoop = iota
	fkYield
	fkSleep
	fkPanic
	fkGoexit
	fkError
	fkCtx
	fkNested
	fkKinds
)

var fuzzKindNames = [fkKinds]string{"noop", "yield", "sleep", "panic", "goexit", "error", "ctx", "nested"}

// Operation codes (the low 4 bits of an operation's first byte).
const (
	foGo  = iota
	foGo2 // Go, or (argument's top bit) an operation on the program's Subpool (fuzz_subpool_test.go)
	foSubmit
	foTryGo
	foGoContext
	foResize
	foWait
	foStats
	foStopOrStats     // Stop if the argument's top bit is set, else Stats
	foShutdownOrWait  // Shutdown if the argument's top bit is set, else Wait
	foTaskWait        // Wait on the actor's last Submit task, or (argument's top bit) Cancel one of its Submit tasks
	foNested          // Go of tasks that submit a child
	foYield           // let the other actors run, or (argument's top bit) pause the pool for a while
	foGroup           // a Group of tasks on the pool, then its Wait (fuzz_group_test.go)
	foResults         // a ResultGroup or MapErr on the pool (fuzz_group_test.go)
	foGoContextCancel // GoContext with a context that ends soon
)

var (
	errFuzzTask   = errors.New("fuzz: task error")
	errFuzzPanic  = errors.New("fuzz: task panic")
	fuzzIdleTimes = [4]time.Duration{time.Millisecond, 10 * time.Millisecond, crew.DefaultIdleTimeout, crew.DefaultIdleTimeout}
)

type fuzzOp struct{ code, arg byte }

type fuzzProgram struct {
	max         int
	queue       int // < 0: unbounded
	nonBlocking bool
	min         int
	idle        time.Duration
	final       byte // 0: Stop, 1: Shutdown(expired), 2: Shutdown(1ms), 3: Shutdown(none)
	actors      [][]fuzzOp

	subLimit       int // the Subpool's
	subQueue       int // WithSubpoolQueue; 0: unbounded
	subNonBlocking bool
}

func (p fuzzProgram) String() string {
	n := 0
	for _, a := range p.actors {
		n += len(a)
	}
	return fmt.Sprintf("max=%d queue=%d nonblocking=%v min=%d idle=%v actors=%d ops=%d final=%d subpool=%d/queue=%d/nonblocking=%v",
		p.max, p.queue, p.nonBlocking, p.min, p.idle, len(p.actors), n, p.final, p.subLimit, p.subQueue, p.subNonBlocking)
}

const fuzzMaxOps = 64

// decodeFuzzProgram turns any byte string into a valid program: 4 header
// bytes, then two bytes per operation (actor<<4 | code, argument). Missing
// bytes read as zero. The header's high bits that the pool does not use
// configure the Subpool (decodeFuzzSub).
func decodeFuzzProgram(data []byte) fuzzProgram {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	h0, h1, h2, h3 := at(0), at(1), at(2), at(3)
	p := fuzzProgram{max: 1 + int(h0%8), queue: -1}
	switch h1 % 4 {
	case 1:
		p.queue = int(h1>>2) % 9
	case 2:
		p.queue = int(h1>>2) % 9
		p.nonBlocking = true
	}
	if h2&0x80 != 0 {
		p.min = int(h2) % (p.max + 1)
	}
	p.idle = fuzzIdleTimes[(h2>>4)&3]
	p.final = (h3 >> 2) & 3
	decodeFuzzSub(&p, h0, h3)
	p.actors = make([][]fuzzOp, 1+int(h3%4))
	for i := 4; i+1 < len(data) && i < 4+2*fuzzMaxOps; i += 2 {
		a := int(data[i]>>4) % len(p.actors)
		p.actors[a] = append(p.actors[a], fuzzOp{code: data[i] & 15, arg: data[i+1]})
	}
	return p
}

type fuzzTask struct {
	kind      int
	submit    bool       // made by Submit: task is its handle
	task      *crew.Task // Submit only
	accepted  bool       // non-Submit only: the call accepted it
	refused   bool       // non-Submit only
	group     *fuzzGroup // a group task, run by a group's step or Wait
	sub       bool       // a task of the Subpool (then accepted and refused serve Submit too)
	weight    int        // sub only: its weight, valid or not
	value     int        // what a ResultGroup or MapErr task returns
	runs      atomic.Int32
	finished  atomic.Bool
	cancelled atomic.Bool // Submit only: a Cancel call reported that it kept the task from starting
}

type fuzzModel struct {
	t    *testing.T
	prog fuzzProgram
	p    *crew.Pool
	sub  *fuzzSub

	limitHigh atomic.Int64 // highest limit set or being set
	resized   atomic.Bool
	running   atomic.Int64
	peak      atomic.Int64
	stopBegun atomic.Bool // Stop or Shutdown was called
	dropBegun atomic.Bool // Shutdown was called: tasks may be dropped
	handled   atomic.Int64
	ops       atomic.Int64

	mu           sync.Mutex
	tasks        []*fuzzTask // of the pool's own calls, not of groups
	groups       []*fuzzGroup
	shutdownErrs []*crew.ShutdownError

	// grouped: a group may have submitted steps, pool tasks that the
	// model does not see one by one.
	grouped atomic.Bool

	hasSubmit bool // the program calls Submit

	logMu sync.Mutex
	ended bool // guarded by logMu: the test has ended

	acceptedN, ranN, droppedN, cancelledN int // filled by check
	groupAcceptedN, groupRanN             int
	subAcceptedN, subRanN                 int
}

// errorf reports a failure. Goroutines of a program that hung may still
// run after the test has ended, when t must no longer be used.
func (m *fuzzModel) errorf(format string, args ...any) {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if !m.ended {
		m.t.Errorf(format, args...)
	}
}

func (m *fuzzModel) newTask(kind int, submit bool) *fuzzTask {
	ft := &fuzzTask{kind: kind, submit: submit}
	m.mu.Lock()
	m.tasks = append(m.tasks, ft)
	m.mu.Unlock()
	return ft
}

// body is what every task runs.
func (m *fuzzModel) body(ft *fuzzTask, ctx context.Context) error {
	if n := ft.runs.Add(1); n != 1 {
		m.errorf("a %s task ran %d times", fuzzKindNames[ft.kind], n)
	}
	onWorker := true
	if ft.sub {
		m.sub.enter(m, ft)
		defer m.sub.leave(ft)
	}
	if g := ft.group; g != nil {
		onWorker = g.enter(ft)
		defer g.leave(ft)
	}
	if onWorker {
		r := m.running.Add(1)
		raisePeak(&m.peak, r)
		if lim := m.limitHigh.Load(); r > lim {
			m.errorf("%d tasks running at once on workers; the limit was never above %d", r, lim)
		}
		defer m.running.Add(-1)
	}
	defer ft.finished.Store(true)
	switch ft.kind {
	case fkYield:
		for range 3 {
			runtime.Gosched()
		}
	case fkSleep:
		time.Sleep(50 * time.Microsecond)
	case fkPanic:
		panic(errFuzzPanic)
	case fkGoexit:
		runtime.Goexit()
	case fkError:
		return errFuzzTask
	case fkCtx:
		timer := time.NewTimer(time.Millisecond)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	case fkNested:
		if ft.group != nil {
			ft.group.goChild()
			break
		}
		// A child submitted from inside a task; TryGo never waits, so
		// it cannot deadlock a bounded pool.
		child := m.newTask(fkNoop, false)
		pctx := m.p.Context()
		m.settle(child, m.p.TryGo(func() { m.body(child, pctx) }), nil, "nested TryGo")
	}
	return nil
}

// settle records the outcome of a non-Submit submission and checks err.
func (m *fuzzModel) settle(ft *fuzzTask, ok bool, err error, call string) {
	if ok {
		ft.accepted = true
		return
	}
	ft.refused = true
	switch {
	case err == nil: // TryGo said false
		if !m.stopBegun.Load() && m.prog.queue < 0 {
			m.errorf("%s refused a task on an unbounded pool that was not stopped", call)
		}
	case err == crew.ErrStopped:
		if !m.stopBegun.Load() {
			m.errorf("%s = ErrStopped before Stop or Shutdown", call)
		}
	case err == crew.ErrQueueFull:
		if m.prog.queue < 0 {
			m.errorf("%s = ErrQueueFull on an unbounded pool", call)
		}
		if !m.prog.nonBlocking || call != "Go" {
			// GoContext waits for room even WithNonBlocking; TryGo
			// reports false, not an error.
			m.errorf("%s = ErrQueueFull (non-blocking pool: %v)", call, m.prog.nonBlocking)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if call != "GoContext" {
			m.errorf("%s = %v", call, err)
		}
	default:
		m.errorf("%s = unexpected error %v", call, err)
	}
}

func runFuzzProgram(t *testing.T, prog fuzzProgram) *fuzzModel {
	m := &fuzzModel{t: t, prog: prog}
	t.Cleanup(func() {
		m.logMu.Lock()
		m.ended = true
		m.logMu.Unlock()
	})
	for _, ops := range prog.actors {
		for _, op := range ops {
			m.hasSubmit = m.hasSubmit || op.code == foSubmit
		}
	}
	m.limitHigh.Store(int64(prog.max))
	opts := []crew.Option{
		crew.WithIdleTimeout(prog.idle),
		crew.WithMinWorkers(prog.min),
		crew.WithPanicHandler(func(pe *crew.PanicError) {
			if !errors.Is(pe, errFuzzPanic) || len(pe.Stack) == 0 {
				m.errorf("panic handler got %v", pe.Value)
			}
			m.handled.Add(1)
		}),
	}
	if prog.queue >= 0 {
		opts = append(opts, crew.WithQueueSize(prog.queue))
	}
	if prog.nonBlocking {
		opts = append(opts, crew.WithNonBlocking())
	}
	m.p = crew.New(prog.max, opts...)
	m.sub = newFuzzSub(m.p, prog)
	if w := m.p.Stats().Workers; w != prog.min {
		t.Errorf("New started %d workers, want the minimum %d", w, prog.min)
	}

	finished := mustReturn(t, 20*time.Second, "the program", func() {
		var wg sync.WaitGroup
		for _, ops := range prog.actors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.actor(ops)
			}()
		}
		wg.Wait()
		m.finalStop()
	})
	if !finished {
		t.Fatalf("%s: stats when it hung: %+v", prog, m.p.Stats()) // goroutines leak
	}
	m.check()
	return m
}

// mustReturn fails the test with the pool's stats and a goroutine dump if
// f does not return within d.
func (m *fuzzModel) mustReturn(d time.Duration, what string, f func()) bool {
	if returnsWithin(d, f) {
		return true
	}
	m.errorf("%s: %s did not return within %v; stats %+v; goroutines:\n\n%s", m.prog, what, d, m.p.Stats(), leak.Dump())
	return false
}

func (m *fuzzModel) actor(ops []fuzzOp) {
	p := m.p
	var mine []*fuzzTask // this actor's tasks, for Wait's check
	var lastSubmit *fuzzTask
	for _, op := range ops {
		m.ops.Add(1)
		kind := int(op.arg & 7)
		count := 1 + int(op.arg>>3)&7
		switch op.code {
		case foGo, foGo2, foNested:
			if op.code == foGo2 && op.arg&0x80 != 0 {
				if !m.subOp(&mine, op.arg) {
					return
				}
				continue
			}
			if op.code == foNested {
				kind = fkNested
			}
			for range count {
				ft := m.newTask(kind, false)
				pctx := p.Context()
				err := p.Go(func() { m.body(ft, pctx) })
				m.settle(ft, err == nil, err, "Go")
				mine = append(mine, ft)
			}
		case foSubmit:
			for range count {
				ft := m.newTask(kind, true)
				stopped := m.stopBegun.Load()
				ft.task = p.Submit(func(ctx context.Context) error { return m.body(ft, ctx) })
				select {
				case <-ft.task.Done():
					if err := ft.task.Wait(); err == crew.ErrStopped && !stopped && !m.stopBegun.Load() {
						m.errorf("Submit = ErrStopped before Stop or Shutdown")
					}
				default:
				}
				mine = append(mine, ft)
				lastSubmit = ft
			}
		case foTryGo:
			for range count {
				ft := m.newTask(kind, false)
				pctx := p.Context()
				ok := p.TryGo(func() { m.body(ft, pctx) })
				m.settle(ft, ok, nil, "TryGo")
				mine = append(mine, ft)
			}
		case foGoContext, foGoContextCancel:
			var ctx context.Context
			var cancel context.CancelFunc
			switch mode := (op.arg >> 6) & 3; {
			case op.code == foGoContext && mode < 2:
				ctx, cancel = context.WithCancel(context.Background())
			case mode == 0:
				ctx, cancel = context.WithCancel(context.Background())
				cancel() // already cancelled
			case mode == 1:
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Microsecond)
			default:
				ctx, cancel = context.WithTimeout(context.Background(), 2*time.Millisecond)
			}
			for range 1 + int(op.arg>>3)&7 {
				ft := m.newTask(kind, false)
				pctx := p.Context()
				pre := ctx.Err()
				err := p.GoContext(ctx, func() { m.body(ft, pctx) })
				if pre != nil && err != pre {
					m.errorf("GoContext with a done context = %v, want %v", err, pre)
				}
				m.settle(ft, err == nil, err, "GoContext")
				mine = append(mine, ft)
			}
			cancel()
		case foResize:
			n := 1 + int(op.arg%8)
			raisePeak(&m.limitHigh, int64(n))
			m.resized.Store(true)
			if err := p.Resize(n); err != nil && !(err == crew.ErrStopped && m.stopBegun.Load()) {
				m.errorf("Resize(%d) = %v", n, err)
			}
		case foWait, foShutdownOrWait:
			if op.code == foShutdownOrWait && op.arg&0x80 != 0 {
				if m.hasSubmit && !submitRacesShutdown() {
					// Submit must not race Shutdown (see
					// submitRacesShutdown): Stop instead.
					m.stopBegun.Store(true)
					m.mustReturn(10*time.Second, "Stop", p.Stop)
					continue
				}
				m.shutdown(op.arg)
				continue
			}
			dropsPossible := m.dropBegun.Load()
			if !m.mustReturn(10*time.Second, "Wait", p.Wait) {
				return
			}
			if dropsPossible || m.dropBegun.Load() {
				continue
			}
			for _, ft := range mine {
				switch {
				case ft.sub: // Subpool.Wait's (subSettled)
				case ft.submit:
					select {
					case <-ft.task.Done():
					default:
						m.errorf("Wait returned before a %s Submit task submitted before it was done", fuzzKindNames[ft.kind])
					}
				case ft.accepted && !ft.finished.Load():
					m.errorf("Wait returned before a %s task submitted before it had finished (runs=%d)", fuzzKindNames[ft.kind], ft.runs.Load())
				}
			}
		case foStats, foStopOrStats:
			if op.code == foStopOrStats && op.arg&0x80 != 0 {
				m.stopBegun.Store(true)
				if !m.mustReturn(10*time.Second, "Stop", p.Stop) {
					return
				}
				if s := p.Stats(); s.Workers != 0 {
					m.errorf("Stop returned with %d workers", s.Workers)
				}
				continue
			}
			m.checkLiveStats()
		case foTaskWait:
			if op.arg&0x80 != 0 {
				m.cancelOp(mine, op.arg)
				continue
			}
			if lastSubmit != nil {
				if !m.mustReturn(10*time.Second, "Task.Wait", func() { lastSubmit.task.Wait() }) {
					return
				}
			}
		case foGroup:
			if !m.groupOp(op.arg) {
				return
			}
		case foResults:
			if !m.resultsOp(op.arg) {
				return
			}
		case foYield:
			switch {
			case op.arg&0x80 != 0:
				// A pause window: tasks queue and none starts, then the
				// pool goes on. Others' Waits wait for its end; a Stop
				// in it resumes, a Shutdown drops the queue (ErrPaused).
				p.Pause()
				time.Sleep(time.Duration(op.arg&0x7) * 50 * time.Microsecond)
				p.Resume()
			case op.arg&1 == 0:
				runtime.Gosched()
			default:
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
}

// cancelOp cancels one of the actor's Submit tasks, chosen by arg, and
// records whether the call kept it from starting.
func (m *fuzzModel) cancelOp(mine []*fuzzTask, arg byte) {
	var submitted []*fuzzTask
	for _, ft := range mine {
		if ft.submit {
			submitted = append(submitted, ft)
		}
	}
	if len(submitted) == 0 {
		return
	}
	ft := submitted[int(arg&0x7f)%len(submitted)]
	wasDone := false
	select {
	case <-ft.task.Done():
		wasDone = true
	default:
	}
	if ft.task.Cancel() {
		if wasDone {
			m.errorf("Cancel of a task that was done = true")
		}
		if ft.cancelled.Swap(true) {
			m.errorf("Cancel = true twice for one task")
		}
		select {
		case <-ft.task.Done():
		default:
			m.errorf("Cancel = true, and the task is not done")
		}
	}
}

var fuzzShutdownWaits = [5]time.Duration{-1, 50 * time.Microsecond, time.Millisecond, 20 * time.Millisecond, 0}

// shutdown calls Shutdown with a deadline chosen by arg (0: already
// expired; 0 in fuzzShutdownWaits: no deadline).
func (m *fuzzModel) shutdown(arg byte) {
	m.stopBegun.Store(true)
	m.dropBegun.Store(true)
	ctx := context.Background()
	if d := fuzzShutdownWaits[int(arg)%len(fuzzShutdownWaits)]; d != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(d, 0))
		defer cancel()
	}
	var err error
	if !m.mustReturn(10*time.Second, "Shutdown", func() { err = m.p.Shutdown(ctx) }) {
		return
	}
	if s := m.p.Stats(); s.Workers != 0 {
		m.errorf("Shutdown returned with %d workers", s.Workers)
	}
	if err == nil {
		return
	}
	var se *crew.ShutdownError
	switch {
	case !errors.As(err, &se):
		m.errorf("Shutdown = %v, want nil or a *ShutdownError", err)
	case !errors.Is(err, crew.ErrPaused) && (ctx.Err() == nil || !errors.Is(err, ctx.Err())):
		m.errorf("Shutdown = %v with its context's error %v, and not ErrPaused", err, ctx.Err())
	default:
		m.mu.Lock()
		m.shutdownErrs = append(m.shutdownErrs, se)
		m.mu.Unlock()
	}
}

func (m *fuzzModel) finalStop() {
	switch m.prog.final {
	case 0:
		m.stopBegun.Store(true)
		m.p.Stop()
	case 1:
		m.shutdown(0)
	case 2:
		m.shutdown(2)
	default:
		m.shutdown(4)
	}
	if s := m.p.Stats(); s.Workers != 0 {
		m.errorf("the pool has %d workers after it stopped", s.Workers)
	}
}

// checkLiveStats checks what Stats must satisfy even while tasks run.
func (m *fuzzModel) checkLiveStats() {
	s := m.p.Stats()
	lim := m.limitHigh.Load()
	if s.Submitted < s.Completed+s.Dropped+s.Cancelled {
		m.errorf("Stats: Submitted %d < Completed %d + Dropped %d + Cancelled %d", s.Submitted, s.Completed, s.Dropped, s.Cancelled)
	}
	if s.MaxWorkers < 1 || int64(s.MaxWorkers) > lim {
		m.errorf("Stats: MaxWorkers %d, limits were 1..%d", s.MaxWorkers, lim)
	}
	if int64(s.Workers) > lim {
		m.errorf("Stats: %d workers, the limit was never above %d", s.Workers, lim)
	}
	if s.Running < 0 || s.Queued < 0 || s.Idle < 0 {
		m.errorf("Stats: negative count in %+v", s)
	}
	if os.Getenv("CREW_FUZZ_STRICT") == "1" && int64(s.Running) > lim {
		m.errorf("Stats: Running %d, the limit was never above %d", s.Running, lim)
	}
	m.checkLiveSubStats()
}

// check runs after the pool has stopped and every actor has returned.
func (m *fuzzModel) check() {
	t, p := m.t, m.p
	var accepted, droppedSubmit, cancelled, failed int
	var rc fuzzRunCounts
	for _, ft := range m.tasks {
		runs := int(ft.runs.Load())
		isAccepted := ft.accepted
		if ft.submit {
			err, done := m.doneErr(ft, "")
			if !done {
				continue
			}
			switch {
			case err == context.Canceled:
				isAccepted = true
				cancelled++
				if runs != 0 {
					t.Errorf("a %s Submit task both ran and was cancelled", fuzzKindNames[ft.kind])
				}
			case err == crew.ErrStopped, err == crew.ErrQueueFull:
				if runs != 0 {
					t.Errorf("a Submit task refused with %v ran", err)
				}
				if err == crew.ErrQueueFull && !m.prog.nonBlocking {
					t.Errorf("Submit = ErrQueueFull on a blocking pool")
				}
			case err == crew.ErrDropped:
				isAccepted = true
				droppedSubmit++
				if runs != 0 {
					t.Errorf("a %s Submit task both ran and was dropped", fuzzKindNames[ft.kind])
				}
				if !m.dropBegun.Load() {
					t.Errorf("a Submit task was dropped without Shutdown")
				}
			default:
				isAccepted = true
				if m.checkRanErr(ft, err, "Submit") {
					failed++
				}
			}
		} else if ft.refused && runs != 0 {
			t.Errorf("a refused %s task ran", fuzzKindNames[ft.kind])
		} else if !ft.accepted && !ft.refused {
			t.Errorf("a task was neither accepted nor refused")
		}
		if !isAccepted {
			continue
		}
		accepted++
		rc.count(t, ft, "")
	}
	groupPanics, unseenPanics := m.checkGroups()
	sub, subFailed := m.checkSub()
	ran := rc.ran
	panicked, goPanics := rc.panicked+sub.panicked, rc.goPanics+sub.goPanics
	failed += subFailed
	s := p.Stats()
	m.acceptedN, m.ranN, m.droppedN, m.cancelledN = accepted, ran, int(s.Dropped), cancelled
	// A group or a Subpool runs its tasks in steps, pool tasks that the
	// model does not count: with groups or Subpool tasks, Submitted,
	// Completed and Dropped also count the steps, and only bound what the
	// model counts. (The Subpool's tasks are counted in its own Stats:
	// checkSub.)
	grouped := m.grouped.Load() || m.sub.accepted.Load()
	if lost := accepted - ran - int(s.Dropped) - cancelled; lost > 0 || lost < 0 && !grouped {
		t.Errorf("accepted %d tasks, %d ran, %d were dropped and %d cancelled: %d lost (or run twice)", accepted, ran, s.Dropped, cancelled, lost)
	}
	if s.Cancelled != uint64(cancelled) {
		t.Errorf("%d Submit tasks were cancelled, Stats.Cancelled = %d", cancelled, s.Cancelled)
	}
	if droppedSubmit > int(s.Dropped) {
		t.Errorf("%d Submit tasks report ErrDropped, Stats.Dropped = %d", droppedSubmit, s.Dropped)
	}
	if s.Dropped != 0 && !m.dropBegun.Load() {
		t.Errorf("Stats.Dropped = %d without Shutdown", s.Dropped)
	}
	// Only a Shutdown whose context ends drops tasks, and each reports the
	// tasks it dropped itself (a concurrent one may find none left).
	shutdownDropped := 0
	for _, se := range m.shutdownErrs {
		shutdownDropped += se.Dropped
	}
	if shutdownDropped != int(s.Dropped) {
		t.Errorf("ShutdownErrors say %d dropped in all, Stats.Dropped = %d", shutdownDropped, s.Dropped)
	}
	switch {
	case s.Submitted < uint64(accepted), s.Submitted != uint64(accepted) && !grouped:
		t.Errorf("Stats.Submitted = %d, %d tasks were accepted (groups or Subpool tasks: %v)", s.Submitted, accepted, grouped)
	case s.Completed < uint64(ran), s.Completed != uint64(ran) && !grouped:
		t.Errorf("Stats.Completed = %d, %d tasks ran (groups or Subpool tasks: %v)", s.Completed, ran, grouped)
	case s.Submitted != s.Completed+s.Dropped+s.Cancelled:
		t.Errorf("Stats: Submitted %d != Completed %d + Dropped %d + Cancelled %d", s.Submitted, s.Completed, s.Dropped, s.Cancelled)
	case s.Panicked != uint64(panicked+groupPanics):
		t.Errorf("Stats.Panicked = %d, %d tasks (%d of the Subpool) and %d group tasks panicked", s.Panicked, panicked, sub.panicked, groupPanics)
	case s.Failed != uint64(failed):
		t.Errorf("Stats.Failed = %d, %d Submit tasks (%d of the Subpool) failed", s.Failed, failed, subFailed)
	case m.handled.Load() != int64(goPanics+unseenPanics):
		t.Errorf("the panic handler got %d panics, %d Go tasks (%d of the Subpool) panicked, %d group tasks' panics went unreported", m.handled.Load(), goPanics, sub.goPanics, unseenPanics)
	case s.Workers != 0 || s.Idle != 0 || s.Running != 0 || s.Queued != 0:
		t.Errorf("Stats after the pool stopped: %+v", s)
	}
	if p.Context().Err() == nil {
		t.Errorf("the pool's context is not cancelled after it stopped")
	}
	if !m.resized.Load() && m.peak.Load() > int64(m.prog.max) {
		t.Errorf("%d tasks ran at once with a limit of %d", m.peak.Load(), m.prog.max)
	}
}

// doneErr returns the error of ft, a Submit task (of the Subpool: what is
// "Subpool "), after the pool has stopped, and reports whether it is done,
// as it must be. It completed with context.Canceled exactly when a Cancel
// call said it kept it from starting.
func (m *fuzzModel) doneErr(ft *fuzzTask, what string) (err error, done bool) {
	select {
	case <-ft.task.Done():
		err = ft.task.Wait()
	default:
		m.t.Errorf("a %s %sSubmit task is not done after the pool stopped (runs=%d)", fuzzKindNames[ft.kind], what, ft.runs.Load())
		return nil, false
	}
	if (err == context.Canceled) != ft.cancelled.Load() {
		m.t.Errorf("a %s %sSubmit task completed with %v; Cancel kept it from starting: %v", fuzzKindNames[ft.kind], what, err, ft.cancelled.Load())
	}
	return err, true
}

// fuzzRunCounts counts the accepted tasks that ran, those of them that
// panicked, and of those the Go tasks (the panic handler got them).
type fuzzRunCounts struct{ ran, panicked, goPanics int }

// count counts ft, an accepted task (of the Subpool: what is "Subpool "),
// if it ran.
func (c *fuzzRunCounts) count(t *testing.T, ft *fuzzTask, what string) {
	if ft.runs.Load() != 1 {
		return
	}
	c.ran++
	if !ft.finished.Load() {
		t.Errorf("a %s %stask that ran did not finish", fuzzKindNames[ft.kind], what)
	}
	if ft.kind == fkPanic {
		c.panicked++
		if !ft.submit {
			c.goPanics++
		}
	}
}

// checkRanErr checks err, what a Submit task (call names the form) that
// was neither refused, dropped nor cancelled completed with, against its
// kind, and reports whether the task failed.
func (m *fuzzModel) checkRanErr(ft *fuzzTask, err error, call string) (failed bool) {
	t := m.t
	if runs := ft.runs.Load(); runs != 1 {
		t.Errorf("a %s %s task completed with %v but ran %d times", fuzzKindNames[ft.kind], call, err, runs)
	}
	var want error
	switch ft.kind {
	case fkPanic:
		var pe *crew.PanicError
		if !errors.As(err, &pe) || !errors.Is(err, errFuzzPanic) {
			t.Errorf("a panicking %s task completed with %v", call, err)
		}
		want = err
	case fkGoexit:
		want = crew.ErrGoexit
	case fkError:
		want = errFuzzTask
	}
	if err != want {
		t.Errorf("a %s %s task completed with %v, want %v", fuzzKindNames[ft.kind], call, err, want)
	}
	return want != nil
}

var fuzzCountMu sync.Mutex

// appendFuzzCount appends one line "ops tasks" to path, so that the
// operations of a fuzzing run (spread over several processes) can be
// counted.
func appendFuzzCount(path string, ops int64, tasks int) {
	fuzzCountMu.Lock()
	defer fuzzCountMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%d %d\n", ops, tasks)
	f.Close()
}
