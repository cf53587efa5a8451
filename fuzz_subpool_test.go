package crew_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

// The Subpool operations of FuzzPool (fuzz_test.go): the program's pool
// has one Subpool, made with it (its limit, 1 to 4, and its queue come
// from the header), and foGo2 with its argument's top bit set is an
// operation on the Subpool instead of Go:
//
//   - bits 0-2: the kind of the first task (the second is harmless);
//   - bits 3-4: the weight of the first task: 1, the limit, about half the
//     limit, or, for bits 3-4 = 3, 1+kind%limit, except for kind 0 (weight
//     0) and kind 7 (limit+1), invalid weights; the second task's weight
//     is 1, a light task behind it;
//   - bits 5-6: the forms: 0 Weighted(w).Go, then GoContext; 1 Submit,
//     then SubmitContext (the contexts end after 2ms); 2 TryGo, then
//     TrySubmit; 3 no task but a call on the Subpool chosen by bits 3-4:
//     Wait, Stats, Stop, or Shutdown with the deadline bits 0-2 choose
//     (as the pool's Shutdown's).
//
// Header byte 0's bits 3-4 give the limit less one; its bits 5-6 = 2
// bound the Subpool's queue (WithSubpoolQueue) to 1 to 4 tasks (header
// byte 3's bits 4-5, plus one), = 3 as well, WithSubpoolNonBlocking.
//
// The Cancel of foTaskWait chooses among the actor's Submit tasks, the
// Subpool's included. Programs without these operations behave as before
// them: no earlier operation had foGo2's top bit set (it was not read),
// and the Subpool takes no goroutine while it has no task.

// fuzzSub is the model of the program's Subpool.
type fuzzSub struct {
	sp          *crew.Subpool
	limit       int
	queue       int // WithSubpoolQueue; 0: unbounded
	nonBlocking bool

	used      atomic.Int64 // weight of its tasks running now
	peak      atomic.Int64 // the most used reached
	stopBegun atomic.Bool  // Subpool.Stop or Shutdown was called
	shutBegun atomic.Bool  // Subpool.Shutdown was called: tasks may be dropped
	accepted  atomic.Bool  // a task was accepted: steps of the Subpool are pool tasks

	mu           sync.Mutex
	tasks        []*fuzzTask
	shutdownErrs []*crew.ShutdownError
}

// decodeFuzzSub reads the Subpool's configuration from the header bytes
// h0 and h3.
func decodeFuzzSub(p *fuzzProgram, h0, h3 byte) {
	p.subLimit = 1 + int(h0>>3)&3
	if mode := (h0 >> 5) & 3; mode >= 2 {
		p.subQueue = 1 + int(h3>>4)&3
		p.subNonBlocking = mode == 3
	}
}

func newFuzzSub(p *crew.Pool, prog fuzzProgram) *fuzzSub {
	s := &fuzzSub{limit: prog.subLimit, queue: prog.subQueue, nonBlocking: prog.subNonBlocking}
	var opts []crew.SubpoolOption
	if s.queue > 0 {
		opts = append(opts, crew.WithSubpoolQueue(s.queue))
	}
	if s.nonBlocking {
		opts = append(opts, crew.WithSubpoolNonBlocking())
	}
	s.sp = crew.NewSubpool(p, s.limit, opts...)
	return s
}

func (s *fuzzSub) valid(w int) bool { return w >= 1 && w <= s.limit }

// weight returns the weight of an operation's first task (see above).
func (s *fuzzSub) weight(sel, kind int) int {
	switch {
	case sel == 0:
		return 1
	case sel == 1:
		return s.limit
	case sel == 2:
		return min(s.limit, 1+s.limit/2)
	case kind == 0:
		return 0
	case kind == 7:
		return s.limit + 1
	}
	return 1 + kind%s.limit
}

// enter is called by a task of the Subpool as it starts: the weights of
// the tasks running at once never exceed the limit. The model counts a
// task out as it returns, before the Subpool frees its slots.
func (s *fuzzSub) enter(m *fuzzModel, ft *fuzzTask) {
	u := s.used.Add(int64(ft.weight))
	raisePeak(&s.peak, u)
	if u > int64(s.limit) {
		m.errorf("Subpool tasks of weights %d running at once, limit %d", u, s.limit)
	}
}

func (s *fuzzSub) leave(ft *fuzzTask) { s.used.Add(-int64(ft.weight)) }

func (m *fuzzModel) newSubTask(kind, weight int, submit bool) *fuzzTask {
	ft := &fuzzTask{kind: kind, submit: submit, sub: true, weight: weight}
	m.sub.mu.Lock()
	m.sub.tasks = append(m.sub.tasks, ft)
	m.sub.mu.Unlock()
	return ft
}

// subOp runs a Subpool operation (see above) and adds the tasks it
// submits to mine. It reports false if a call did not return in time.
func (m *fuzzModel) subOp(mine *[]*fuzzTask, arg byte) bool {
	kind, sel, form := int(arg&7), int(arg>>3)&3, int(arg>>5)&3
	if form == 3 {
		return m.subControl(*mine, sel, kind)
	}
	first := m.newSubTask(kind, m.sub.weight(sel, kind), form == 1)
	second := m.newSubTask(fuzzBenignKinds[kind&3], 1, form != 0)
	switch form {
	case 0:
		m.subGo(first, "Go")
		m.subGo(second, "GoContext")
	case 1:
		m.subSubmit(first, "Submit")
		m.subSubmit(second, "SubmitContext")
	default:
		m.subGo(first, "TryGo")
		m.subSubmit(second, "TrySubmit")
	}
	*mine = append(*mine, first, second)
	return true
}

// subGo submits ft by the Go form call.
func (m *fuzzModel) subGo(ft *fuzzTask, call string) {
	v := m.sub.sp.Weighted(ft.weight)
	pctx := m.p.Context()
	fn := func() { m.body(ft, pctx) }
	var err error
	switch call {
	case "Go":
		err = v.Go(fn)
	case "TryGo":
		if !v.TryGo(fn) {
			m.subSettle(ft, false, nil, call)
			return
		}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		err = v.GoContext(ctx, fn)
		cancel()
	}
	m.subSettle(ft, err == nil, err, call)
}

// subSubmit submits ft by the Submit form call.
func (m *fuzzModel) subSubmit(ft *fuzzTask, call string) {
	v := m.sub.sp.Weighted(ft.weight)
	fn := func(ctx context.Context) error { return m.body(ft, ctx) }
	queued := true
	switch call {
	case "Submit":
		ft.task = v.Submit(fn)
	case "TrySubmit":
		ft.task, queued = v.TrySubmit(fn)
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		ft.task = v.SubmitContext(ctx, fn)
		cancel()
	}
	// A refused task is done before the call returns; a queued one may be
	// done already too, run or dropped, but not with a refusal's error.
	var err error
	select {
	case <-ft.task.Done():
		err = ft.task.Wait()
	default:
	}
	refused := err != nil && fuzzSubRefusal(err)
	if call == "TrySubmit" && queued == refused {
		m.errorf("Subpool TrySubmit reported %v, and its Task is done with %v", queued, err)
	}
	m.subSettle(ft, !refused, err, call)
}

// fuzzSubRefusal reports whether err, a Subpool Submit task's, says the
// task was not queued. A task that ran never returns these.
func fuzzSubRefusal(err error) bool {
	return err == crew.ErrStopped || err == crew.ErrQueueFull ||
		errors.Is(err, crew.ErrInvalid) || errors.Is(err, context.DeadlineExceeded)
}

// subSettle records whether a Subpool submission queued ft, and checks
// the error of a refusal (nil for a TryGo that reported false).
func (m *fuzzModel) subSettle(ft *fuzzTask, ok bool, err error, call string) {
	s := m.sub
	if ok {
		ft.accepted = true
		s.accepted.Store(true)
		if !s.valid(ft.weight) {
			m.errorf("Subpool.Weighted(%d).%s accepted a task, limit %d", ft.weight, call, s.limit)
		}
		return
	}
	ft.refused = true
	stopped := m.stopBegun.Load() || s.stopBegun.Load()
	switch {
	case !s.valid(ft.weight):
		if (err != nil || call != "TryGo") && !errors.Is(err, crew.ErrInvalid) {
			m.errorf("Subpool.Weighted(%d).%s = %v, want ErrInvalid (limit %d)", ft.weight, call, err, s.limit)
		}
	case err == nil: // TryGo said false
		if !stopped && s.queue == 0 {
			m.errorf("Subpool TryGo refused a task of weight %d on an unbounded Subpool that was not stopped", ft.weight)
		}
	case err == crew.ErrStopped:
		if !stopped {
			m.errorf("Subpool %s = ErrStopped before Stop or Shutdown", call)
		}
	case err == crew.ErrQueueFull:
		if s.queue == 0 || call != "TrySubmit" && !(s.nonBlocking && (call == "Go" || call == "Submit")) {
			m.errorf("Subpool %s = ErrQueueFull (queue %d, non-blocking %v)", call, s.queue, s.nonBlocking)
		}
	case errors.Is(err, context.DeadlineExceeded):
		if call != "GoContext" && call != "SubmitContext" {
			m.errorf("Subpool %s = %v", call, err)
		}
	default:
		m.errorf("Subpool.Weighted(%d).%s = unexpected error %v", ft.weight, call, err)
	}
}

// subControl runs a call on the Subpool (see above).
func (m *fuzzModel) subControl(mine []*fuzzTask, sel, kind int) bool {
	s := m.sub
	switch sel {
	case 0:
		if !m.mustReturn(10*time.Second, "Subpool.Wait", s.sp.Wait) {
			return false
		}
		m.subSettled(mine, "Subpool.Wait")
	case 1:
		m.checkLiveSubStats()
	case 2:
		s.stopBegun.Store(true)
		if !m.mustReturn(10*time.Second, "Subpool.Stop", s.sp.Stop) {
			return false
		}
		m.subSettled(mine, "Subpool.Stop")
		m.subIdle("Subpool.Stop")
	default:
		return m.subShutdown(mine, kind)
	}
	return true
}

// subShutdown calls the Subpool's Shutdown with the deadline that arg
// chooses, as shutdown does the pool's.
func (m *fuzzModel) subShutdown(mine []*fuzzTask, arg int) bool {
	s := m.sub
	s.stopBegun.Store(true)
	s.shutBegun.Store(true)
	ctx := context.Background()
	if d := fuzzShutdownWaits[arg%len(fuzzShutdownWaits)]; d != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(d, 0))
		defer cancel()
	}
	var err error
	if !m.mustReturn(10*time.Second, "Subpool.Shutdown", func() { err = s.sp.Shutdown(ctx) }) {
		return false
	}
	m.subSettled(mine, "Subpool.Shutdown")
	m.subIdle("Subpool.Shutdown")
	if err == nil {
		return true
	}
	var se *crew.ShutdownError
	if !errors.As(err, &se) || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		m.errorf("Subpool.Shutdown = %v with its context's error %v, want nil or a *ShutdownError with it", err, ctx.Err())
		return true
	}
	s.mu.Lock()
	s.shutdownErrs = append(s.shutdownErrs, se)
	s.mu.Unlock()
	return true
}

// subSettled checks, after the Subpool's Wait, Stop or Shutdown (what)
// has returned, that every Subpool task the actor had queued before has
// finished, or, if the Subpool or its pool may have dropped it, is done.
func (m *fuzzModel) subSettled(mine []*fuzzTask, what string) {
	drops := m.stopBegun.Load() || m.sub.shutBegun.Load()
	for _, ft := range mine {
		switch {
		case !ft.sub || !ft.accepted:
		case ft.submit:
			select {
			case <-ft.task.Done():
			default:
				m.errorf("%s returned before a %s Subpool Submit task queued before it was done", what, fuzzKindNames[ft.kind])
			}
		case !drops && !ft.finished.Load():
			m.errorf("%s returned before a %s Subpool task queued before it had finished (runs=%d)", what, fuzzKindNames[ft.kind], ft.runs.Load())
		}
	}
}

// subIdle checks the Subpool's Stats once its Stop or Shutdown (what) has
// returned: it takes no new task, so nothing is left.
func (m *fuzzModel) subIdle(what string) {
	st := m.sub.sp.Stats()
	if st.Unfinished != 0 || st.Waiting != 0 || st.Running != 0 || st.InUse != 0 {
		m.errorf("Subpool Stats after %s returned: %+v", what, st)
	}
}

// checkLiveSubStats checks what the Subpool's Stats must satisfy even
// while tasks run.
func (m *fuzzModel) checkLiveSubStats() {
	s := m.sub
	st := s.sp.Stats()
	switch {
	case st.Limit != s.limit:
		m.errorf("SubpoolStats.Limit = %d, want %d", st.Limit, s.limit)
	case st.Running < 0 || st.Running > s.limit:
		m.errorf("SubpoolStats.Running = %d, limit %d", st.Running, s.limit)
	case st.InUse < 0 || st.InUse > s.limit:
		m.errorf("SubpoolStats.InUse = %d, limit %d", st.InUse, s.limit)
	case st.Unfinished < 0 || st.Waiting < 0:
		m.errorf("SubpoolStats: negative count in %+v", st)
	}
}

// checkSub checks the Subpool's tasks and counters after the pool has
// stopped, and returns what its tasks add to the pool's counters: the
// tasks that panicked, those of them that the panic handler got (Go
// tasks), and the Submit tasks that failed.
func (m *fuzzModel) checkSub() (rc fuzzRunCounts, failed int) {
	t, s := m.t, m.sub
	var accepted, cancelled, droppedSubmit int
	for _, ft := range s.tasks {
		runs := int(ft.runs.Load())
		switch {
		case ft.refused:
			if runs != 0 {
				t.Errorf("a %s Subpool task of weight %d refused by its submission ran", fuzzKindNames[ft.kind], ft.weight)
			}
			continue
		case !ft.accepted:
			t.Errorf("a Subpool task was neither accepted nor refused")
			continue
		}
		accepted++
		if ft.submit {
			err, done := m.doneErr(ft, "Subpool ")
			if !done {
				continue
			}
			switch err {
			case context.Canceled, crew.ErrDropped:
				if err == crew.ErrDropped {
					droppedSubmit++
				} else {
					cancelled++
				}
				if runs != 0 {
					t.Errorf("a %s Subpool Submit task ran and completed with %v", fuzzKindNames[ft.kind], err)
				}
				continue
			}
			if m.checkRanErr(ft, err, "Subpool Submit") {
				failed++
			}
		}
		rc.count(t, ft, "Subpool ")
	}
	ran := rc.ran
	m.subAcceptedN, m.subRanN = accepted, ran

	// Refused after the end: a valid weight with ErrStopped, an invalid
	// one with ErrInvalid.
	never := func() { m.errorf("a task the stopped Subpool accepted ran") }
	if err := s.sp.Weighted(s.limit).Go(never); err != crew.ErrStopped {
		t.Errorf("Subpool.Weighted(%d).Go after the pool stopped = %v, want ErrStopped", s.limit, err)
	}
	if err := s.sp.Weighted(s.limit + 1).Go(never); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Subpool.Weighted(%d).Go after the pool stopped = %v, want ErrInvalid (limit %d)", s.limit+1, err, s.limit)
	}

	st := s.sp.Stats()
	if lost := accepted - ran - int(st.Dropped) - int(st.Cancelled); lost != 0 {
		t.Errorf("the Subpool accepted %d tasks, %d ran, %d were dropped and %d cancelled: %d lost (or run twice)", accepted, ran, st.Dropped, st.Cancelled, lost)
	}
	if st.Cancelled != uint64(cancelled) {
		t.Errorf("%d Subpool Submit tasks were cancelled, SubpoolStats.Cancelled = %d", cancelled, st.Cancelled)
	}
	if droppedSubmit > int(st.Dropped) {
		t.Errorf("%d Subpool Submit tasks report ErrDropped, SubpoolStats.Dropped = %d", droppedSubmit, st.Dropped)
	}
	shutdownDropped := 0
	for _, se := range s.shutdownErrs {
		shutdownDropped += se.Dropped
	}
	if shutdownDropped > int(st.Dropped) {
		t.Errorf("Subpool ShutdownErrors say %d dropped in all, SubpoolStats.Dropped = %d", shutdownDropped, st.Dropped)
	}
	if st.Unfinished != 0 || st.Waiting != 0 || st.Running != 0 || st.InUse != 0 || st.Limit != s.limit {
		t.Errorf("SubpoolStats after the pool stopped: %+v (limit %d)", st, s.limit)
	}
	if u := s.used.Load(); u != 0 {
		t.Errorf("Subpool tasks of weights %d still running after the pool stopped", u)
	}
	return rc, failed
}
