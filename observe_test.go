package crew_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// spin keeps the processor busy for d: a task that takes a known time
// without sleeping.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func TestHooksReportWaitAndRunTimes(t *testing.T) {
	leak.Check(t)
	starts := make(chan crew.TaskEvent, 4)
	finishes := make(chan crew.TaskEvent, 4)
	p := crew.New(1, crew.WithName("timed"), crew.WithHooks(crew.Hooks{
		TaskStart:  func(e crew.TaskEvent) { starts <- e },
		TaskFinish: func(e crew.TaskEvent) { finishes <- e },
	}))
	defer p.Stop()

	// A holds the only worker while B waits in the queue.
	release, running := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(running); <-release })
	<-running
	<-starts // A's

	var bStart, bEnd time.Time
	beforeB := time.Now()
	p.Go(func() {
		bStart = time.Now()
		spin(2 * time.Millisecond)
		bEnd = time.Now()
	})
	afterB := time.Now()
	spin(3 * time.Millisecond) // B waits at least this long
	releaseAt := time.Now()
	close(release)
	p.Wait()
	done := time.Now()

	a := <-finishes
	b := <-finishes
	bs := <-starts
	if a.Pool != "timed" || b.Pool != "timed" || bs.Pool != "timed" {
		t.Errorf("Pool = %q, %q, %q; want timed", a.Pool, b.Pool, bs.Pool)
	}
	if a.Err != nil || b.Err != nil {
		t.Errorf("Err = %v, %v; want nil for Go tasks", a.Err, b.Err)
	}
	if bs.Wait != b.Wait || bs.Run != 0 {
		t.Errorf("TaskStart = %+v, TaskFinish = %+v: waits differ or start has a run time", bs, b)
	}
	// The pool stamps B after beforeB and before afterB, and starts it
	// after releaseAt and before bStart.
	if lo, hi := releaseAt.Sub(afterB), bStart.Sub(beforeB); b.Wait < lo || b.Wait > hi {
		t.Errorf("B waited %v, want within [%v, %v]", b.Wait, lo, hi)
	}
	if lo, hi := bEnd.Sub(bStart), done.Sub(releaseAt); b.Run < lo || b.Run > hi {
		t.Errorf("B ran %v, want within [%v, %v]", b.Run, lo, hi)
	}
}

func TestHooksReportErrorsPanicsAndGoexit(t *testing.T) {
	leak.Check(t)
	var mu sync.Mutex
	var log []string
	var finished []crew.TaskEvent
	var panics []crew.TaskEvent
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	p := crew.New(1,
		crew.WithPanicHandler(func(*crew.PanicError) { note("handler") }),
		crew.WithHooks(crew.Hooks{
			Panic: func(e crew.TaskEvent) {
				note("panic")
				mu.Lock()
				panics = append(panics, e)
				mu.Unlock()
			},
			TaskFinish: func(e crew.TaskEvent) {
				note("finish")
				mu.Lock()
				finished = append(finished, e)
				mu.Unlock()
			},
		}))
	defer p.Stop()

	errDisk := errors.New("disk full")
	if err := p.Submit(func(context.Context) error { return errDisk }).Wait(); err != errDisk {
		t.Fatalf("Submit: %v", err)
	}
	if err := p.Submit(func(context.Context) error { return nil }).Wait(); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	var pe *crew.PanicError
	if err := p.Submit(func(context.Context) error { panic("submit bug") }).Wait(); !errors.As(err, &pe) {
		t.Fatalf("Submit panic: %v", err)
	}
	p.Go(func() { panic("go bug") })
	p.Wait() // tasks in different shards may start out of order
	p.Go(runtime.Goexit)
	p.Wait()
	if err := p.Submit(func(context.Context) error { runtime.Goexit(); return nil }).Wait(); err != crew.ErrGoexit {
		t.Fatalf("Submit Goexit: %v", err)
	}
	p.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(finished) != 6 {
		t.Fatalf("TaskFinish fired %d times, want 6: %v", len(finished), log)
	}
	want := []string{"errDisk", "nil", "submit bug", "go bug", "goexit", "goexit"}
	for i, e := range finished {
		var got string
		switch err := e.Err; {
		case err == errDisk:
			got = "errDisk"
		case err == nil:
			got = "nil"
		case errors.Is(err, crew.ErrGoexit):
			got = "goexit"
		case errors.As(err, &pe):
			got = pe.Value.(string)
		default:
			got = err.Error()
		}
		if got != want[i] {
			t.Errorf("finish %d: Err = %v, want %s", i, e.Err, want[i])
		}
		if e.Run <= 0 || e.Wait <= 0 {
			t.Errorf("finish %d: Wait %v, Run %v; want positive", i, e.Wait, e.Run)
		}
	}
	if len(panics) != 2 || panics[0].Err != finished[2].Err || panics[1].Err != finished[3].Err {
		t.Fatalf("Panic hook got %+v; want the two *PanicErrors TaskFinish got", panics)
	}
	if pe := panics[1].Err.(*crew.PanicError); !strings.Contains(string(pe.Stack), "observe_test.go") {
		t.Errorf("panic stack does not show the panicking task:\n%s", pe.Stack)
	}
	// The Go task's panic: Panic hook, then the pool's handler, then
	// TaskFinish; the Submit task's panic goes to its Wait, not the handler.
	if got := strings.Join(log, " "); got != "finish finish panic finish panic handler finish finish finish" {
		t.Errorf("hook order: %s", got)
	}
	if s := p.Stats(); s.Panicked != 2 {
		t.Errorf("Stats().Panicked = %d, want 2", s.Panicked)
	}
}

// A Submit task or a Future that returns a *PanicError it did not recover
// itself (a child's, from Wait) does not fire the Panic hook: only the
// task that panicked does. Going by the error's type would fire the hook
// twice for one panic while Stats().Panicked says 1.
func TestHooksPanicOnlyForATaskThatPanicked(t *testing.T) {
	leak.Check(t)
	var panics atomic.Int64
	p := crew.New(2, crew.WithHooks(crew.Hooks{Panic: func(crew.TaskEvent) { panics.Add(1) }}))
	defer p.Stop()
	child := p.Submit(func(context.Context) error { panic("child") })
	parent := p.Submit(func(context.Context) error { return child.Wait() })
	var pe *crew.PanicError
	if err := parent.Wait(); !errors.As(err, &pe) {
		t.Fatalf("parent.Wait = %v, want the child's panic", err)
	}
	fut := crew.Submit(p, func(context.Context) (int, error) { panic("future") })
	outer := crew.Submit(p, func(context.Context) (int, error) { return fut.Wait() })
	if _, err := outer.Wait(); !errors.As(err, &pe) {
		t.Fatalf("outer.Wait = %v, want the future's panic", err)
	}
	p.Wait()
	if n, s := panics.Load(), p.Stats(); n != 2 || s.Panicked != 2 {
		t.Fatalf("two tasks panicked; the Panic hook was called %d times, Stats().Panicked = %d", n, s.Panicked)
	}
}

func TestHooksReportDrops(t *testing.T) {
	leak.Check(t)
	var mu sync.Mutex
	drops := map[error]int{}
	dropped := make(chan struct{}, 1)
	p := crew.New(1, crew.WithQueueSize(1), crew.WithName("drops"), crew.WithHooks(crew.Hooks{
		Drop: func(e crew.TaskEvent) {
			if e.Pool != "drops" {
				t.Errorf("Drop: Pool = %q", e.Pool)
			}
			mu.Lock()
			drops[e.Err]++
			mu.Unlock()
			if e.Err == crew.ErrDropped {
				dropped <- struct{}{}
			}
		},
	}))
	release, running := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(running); <-release })
	<-running
	p.Go(func() {})         // fills the queue
	if p.TryGo(func() {}) { // refused: full
		t.Fatal("TryGo succeeded on a full queue")
	}
	if p.TryGo(nil) {
		t.Fatal("TryGo(nil) succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.GoContext(ctx, func() {}); err != context.Canceled { // not a drop
		t.Fatalf("GoContext: %v", err)
	}

	// Shutdown with an expired context drops the queued task, then waits
	// for the running one.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	shut := make(chan error)
	go func() { shut <- p.Shutdown(ctx) }()
	<-dropped
	var se *crew.ShutdownError
	close(release)
	if err := <-shut; !errors.As(err, &se) || se.Dropped != 1 {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := p.Go(func() {}); err != crew.ErrStopped {
		t.Fatalf("Go after Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[error]int{crew.ErrQueueFull: 1, crew.ErrDropped: 1, crew.ErrStopped: 1}
	if len(drops) != len(want) {
		t.Fatalf("drops = %v, want %v", drops, want)
	}
	for err, n := range want {
		if drops[err] != n {
			t.Errorf("drops[%v] = %d, want %d", err, drops[err], n)
		}
	}
}

func TestHooksReportWorkers(t *testing.T) {
	leak.Check(t)
	var started, retired atomic.Int64
	var lifetimes sync.Map
	p := crew.New(4, crew.WithName("workers"), crew.WithHooks(crew.Hooks{
		WorkerStart: func(e crew.WorkerEvent) {
			if e.Pool != "workers" || e.Lifetime != 0 {
				t.Errorf("WorkerStart(%+v)", e)
			}
			started.Add(1)
		},
		WorkerRetire: func(e crew.WorkerEvent) {
			lifetimes.Store(retired.Add(1), e.Lifetime)
		},
		TaskStart: func(crew.TaskEvent) {
			if started.Load() == 0 {
				t.Error("a task started before any WorkerStart")
			}
		},
	}))
	// Four tasks that wait for each other need four workers.
	var wg sync.WaitGroup
	wg.Add(4)
	for range 4 {
		p.Go(func() { wg.Done(); wg.Wait() })
	}
	wg.Wait()
	p.Go(runtime.Goexit) // ends its worker; a replacement may start
	p.Stop()
	if s, r := started.Load(), retired.Load(); s < 4 || s != r {
		t.Fatalf("started %d workers and retired %d; want at least 4 and equal", s, r)
	}
	lifetimes.Range(func(_, v any) bool {
		if v.(time.Duration) <= 0 {
			t.Errorf("a worker retired with lifetime %v", v)
		}
		return true
	})
}

func TestPoolLatencyHistograms(t *testing.T) {
	leak.Check(t)
	if _, ok := crew.New(1).Latency(); ok {
		t.Fatal("Latency() ok on a pool built without WithLatency")
	}
	p := crew.New(2, crew.WithLatency())
	const tasks = 200
	const work = 200 * time.Microsecond
	for i := range tasks {
		if i%2 == 0 {
			p.Go(func() { spin(work) })
		} else {
			p.Submit(func(context.Context) error { spin(work); return nil })
		}
	}
	p.Stop()
	l, ok := p.Latency()
	if !ok {
		t.Fatal("Latency() not ok WithLatency")
	}
	if l.Wait.Count != tasks || l.Run.Count != tasks {
		t.Fatalf("counts: wait %d, run %d; want %d", l.Wait.Count, l.Run.Count, tasks)
	}
	// Every task ran at least work; the error bound allows the histogram
	// to read 3.125% low.
	if p0 := l.Run.Quantile(0); float64(p0) < float64(work)*(1-crew.HistogramRelativeError) {
		t.Errorf("fastest run %v, want at least %v", p0, work)
	}
	if l.Run.Max < l.Run.Quantile(0.99) || l.Run.Quantile(0.99) < l.Run.Quantile(0.5) {
		t.Errorf("run quantiles out of order: %v", l.Run)
	}
	// 200 tasks of 200µs on two workers: most wait behind others.
	if l.Wait.Quantile(0.9) < work {
		t.Errorf("p90 wait %v, want at least %v with a backlog", l.Wait.Quantile(0.9), work)
	}
	if l.Run.Sum < tasks*work {
		t.Errorf("run sum %v, want at least %v", l.Run.Sum, tasks*work)
	}
}

func TestLatencyTrackTimesAGroup(t *testing.T) {
	leak.Check(t)
	p := crew.New(4)
	defer p.Stop()
	var lat crew.Latency
	g := p.Group(context.Background(), crew.WithLimit(1))
	// The first task waits until all ten are submitted, so that the
	// submitting loop, if it is descheduled, cannot shorten the waits.
	submitted := make(chan struct{})
	for range 10 {
		g.Go(lat.Track(func(context.Context) error {
			<-submitted
			spin(100 * time.Microsecond)
			return nil
		}))
	}
	close(submitted)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	fn := make(chan struct{})
	p.Go(lat.TrackFunc(func() { close(fn) }))
	<-fn
	p.Wait()
	s := lat.Snapshot()
	if s.Wait.Count != 11 || s.Run.Count != 11 {
		t.Fatalf("tracked %d waits and %d runs, want 11", s.Wait.Count, s.Run.Count)
	}
	// With a limit of 1, the tenth task waited for the nine before it.
	if s.Wait.Max < 9*100*time.Microsecond {
		t.Errorf("max wait %v, want at least 900µs", s.Wait.Max)
	}
}

// logRecords decodes the JSON lines a slog.JSONHandler wrote.
func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

func TestLoggerLogsPanicsRefusalsAndSummaries(t *testing.T) {
	leak.Check(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	var handled atomic.Int64
	p := crew.New(1, crew.WithName("logged"), crew.WithQueueSize(0), crew.WithLatency(),
		crew.WithLogger(slog.New(h)),
		crew.WithPanicHandler(func(*crew.PanicError) { handled.Add(1) }))
	release, running := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(running); <-release })
	<-running
	p.TryGo(func() {}) // refused: no room
	close(release)
	p.Go(func() { panic("logged bug") })
	p.Stop()
	p.Stop() // one summary only

	mu.Lock()
	recs := logRecords(t, &buf)
	mu.Unlock()
	if len(recs) != 3 {
		t.Fatalf("%d log records, want 3:\n%s", len(recs), buf.String())
	}
	for _, r := range recs {
		if r["pool"] != "logged" {
			t.Errorf("record without pool=logged: %v", r)
		}
	}
	if r := recs[0]; r["level"] != "DEBUG" || r["msg"] != "crew: task refused" || r["err"] != crew.ErrQueueFull.Error() {
		t.Errorf("refusal record: %v", r)
	}
	if r := recs[1]; r["level"] != "ERROR" || r["panic"] != "logged bug" || !strings.Contains(r["stack"].(string), "observe_test.go") {
		t.Errorf("panic record: %v", r)
	}
	if handled.Load() != 1 {
		t.Errorf("the panic handler ran %d times, want 1", handled.Load())
	}
	r := recs[2]
	if r["level"] != "INFO" || r["msg"] != "crew: pool stopped" || r["submitted"] != 2.0 || r["completed"] != 2.0 || r["panicked"] != 1.0 {
		t.Errorf("summary record: %v", r)
	}
	lat, _ := r["latency"].(map[string]any)
	run, _ := lat["run"].(map[string]any)
	if run["count"] != 2.0 {
		t.Errorf("summary latency: %v", r["latency"])
	}
}

func TestLoggerWarnsWhenShutdownDrops(t *testing.T) {
	leak.Check(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	dropped := make(chan struct{}, 3)
	p := crew.New(1, crew.WithLogger(slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))),
		crew.WithHooks(crew.Hooks{Drop: func(crew.TaskEvent) { dropped <- struct{}{} }}))
	release, running := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(running); <-release })
	<-running
	for range 3 {
		p.Go(func() {})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	shut := make(chan error)
	go func() { shut <- p.Shutdown(ctx) }()
	for range 3 {
		<-dropped
	}
	close(release)
	if err := <-shut; err == nil {
		t.Fatal("Shutdown with a cancelled context returned nil")
	}
	mu.Lock()
	recs := logRecords(t, &buf)
	mu.Unlock()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), buf.String())
	}
	if r := recs[0]; r["level"] != "WARN" || r["dropped"] != 3.0 || r["completed"] != 1.0 {
		t.Errorf("summary: %v", r)
	}
}

// A Stop or Shutdown from inside a task only closes the pool: the summary
// waits for the Stop that stops it, and counts every task.
func TestLoggerSummaryWaitsForTheRealStop(t *testing.T) {
	leak.Check(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	p := crew.New(1, crew.WithLogger(slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))))
	stopped, queued := make(chan error, 1), make(chan struct{})
	p.Go(func() { <-queued; p.Stop(); stopped <- p.Shutdown(context.Background()) })
	if err := p.Go(func() {}); err != nil { // queued: the closed pool still runs it
		t.Fatal(err)
	}
	close(queued)
	if err := recv(t, stopped, "the inner Stop and Shutdown"); !errors.Is(err, crew.ErrInsideTask) {
		t.Fatalf("Shutdown from inside a task = %v, want ErrInsideTask", err)
	}
	p.Stop()
	mu.Lock()
	recs := logRecords(t, &buf)
	mu.Unlock()
	if len(recs) != 1 || recs[0]["completed"] != 2.0 || recs[0]["submitted"] != 2.0 {
		t.Fatalf("records %v, want one summary of 2 tasks completed", recs)
	}
}

// A Stop racing a Shutdown that drops tasks logs the summary as a
// warning, not at Info as for a clean stop, although the summary is
// logged once and the Stop, with less left to do, logs it first.
func TestLoggerSummaryOfStopRacingADroppingShutdownWarns(t *testing.T) {
	leak.Check(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := crew.New(1, crew.WithLogger(slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))))
	running := make(chan struct{})
	p.Go(func() { close(running); <-p.Context().Done() })
	<-running
	for range 100 {
		p.Go(func() {})
	}
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	waitUntil(t, trapDeadline, "Stop to close the pool", func() bool { return !p.TryGo(func() {}) })
	var se *crew.ShutdownError
	if !errors.As(p.Shutdown(ctx), &se) || se.Dropped == 0 {
		t.Fatalf("Shutdown dropped nothing")
	}
	recv(t, stopped, "Stop")
	mu.Lock()
	recs := logRecords(t, &buf)
	mu.Unlock()
	if len(recs) != 1 || recs[0]["level"] != "WARN" {
		t.Fatalf("records %v, want one summary at WARN for the %d dropped tasks", recs, se.Dropped)
	}
}

func TestWithLoggerNilPanics(t *testing.T) {
	leak.Check(t)
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, crew.ErrInvalid) {
			t.Fatalf("recovered %v, want an error wrapping ErrInvalid", err)
		}
	}()
	crew.New(1, crew.WithLogger(nil))
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// An observed pool still runs groups, with their steps timed.
func TestObservedPoolRunsGroups(t *testing.T) {
	leak.Check(t)
	var finished atomic.Int64
	p := crew.New(4, crew.WithLatency(), crew.WithHooks(crew.Hooks{
		TaskFinish: func(crew.TaskEvent) { finished.Add(1) },
	}))
	defer p.Stop()
	out, err := crew.MapErr(context.Background(), p, []int{1, 2, 3, 4, 5}, func(_ context.Context, x int) (int, error) {
		return x * x, nil
	})
	if err != nil || len(out) != 5 || out[4] != 25 {
		t.Fatalf("Map = %v, %v", out, err)
	}
	p.Wait()
	if finished.Load() == 0 {
		t.Error("no step of the group was reported")
	}
	l, _ := p.Latency()
	if l.Run.Count != uint64(finished.Load()) {
		t.Errorf("histogram counted %d runs, hooks %d", l.Run.Count, finished.Load())
	}
}

// WithNonBlocking, Go reports ErrQueueFull to the Drop hook as well as to
// its caller.
func TestHooksReportNonBlockingRefusals(t *testing.T) {
	leak.Check(t)
	var refused atomic.Int64
	p := crew.New(1, crew.WithQueueSize(0), crew.WithNonBlocking(), crew.WithHooks(crew.Hooks{
		Drop: func(e crew.TaskEvent) {
			if e.Err == crew.ErrQueueFull {
				refused.Add(1)
			}
		},
	}))
	defer p.Stop()
	release, running := make(chan struct{}), make(chan struct{})
	if err := p.Go(func() { close(running); <-release }); err != nil {
		t.Fatal(err)
	}
	<-running
	if err := p.Go(func() {}); err != crew.ErrQueueFull {
		t.Fatalf("Go on a full non-blocking pool: %v", err)
	}
	if err := p.Submit(func(context.Context) error { return nil }).Wait(); err != crew.ErrQueueFull {
		t.Fatalf("Submit on a full non-blocking pool: %v", err)
	}
	close(release)
	if refused.Load() != 2 {
		t.Fatalf("Drop saw %d refusals, want 2", refused.Load())
	}
}

// A plain pool's Go allocates nothing; an observed one allocates the
// closure that carries the submission time, and nothing else.
func TestObservabilityAllocations(t *testing.T) {
	leak.Check(t)
	if raceDetectorOn {
		t.Skip("the race detector allocates")
	}
	for _, c := range []struct {
		name string
		opts []crew.Option
		max  float64
	}{
		{"plain", nil, 0},
		{"named", []crew.Option{crew.WithName("allocs")}, 0},
		{"latency", []crew.Option{crew.WithLatency()}, 1},
	} {
		p := crew.New(1, c.opts...)
		task := func() {}
		p.Go(task) // start the worker and its histogram
		p.Wait()
		allocs := testing.AllocsPerRun(1000, func() { p.Go(task) })
		p.Stop()
		if allocs > c.max {
			t.Errorf("%s: %v allocations per Go, want at most %v", c.name, allocs, c.max)
		}
	}
}

// A panic in TaskStart is handled like a panic in its task: a Submit task's
// Wait returns it, and a Go task's goes to the pool's panic handler; each
// is counted once and reported to TaskFinish.
func TestHooksTaskStartPanicIsTheTasks(t *testing.T) {
	leak.Check(t)
	handled := make(chan *crew.PanicError, 1)
	var ran, finished atomic.Int64
	p := crew.New(1,
		crew.WithPanicHandler(func(pe *crew.PanicError) { handled <- pe }),
		crew.WithHooks(crew.Hooks{
			TaskStart:  func(crew.TaskEvent) { panic("hook") },
			TaskFinish: func(crew.TaskEvent) { finished.Add(1) },
		}))
	defer p.Stop()
	task := p.Submit(func(context.Context) error { ran.Add(1); return nil })
	var pe *crew.PanicError
	recv(t, task.Done(), "the Submit task")
	if err := task.Wait(); !errors.As(err, &pe) || pe.Value != "hook" {
		t.Fatalf("Submit task's Wait = %v, want the hook's panic", err)
	}
	p.Go(func() { ran.Add(1) })
	if pe := recv(t, handled, "the panic handler"); pe.Value != "hook" {
		t.Fatalf("panic handler got %v, want the hook's panic", pe.Value)
	}
	p.Wait()
	s := p.Stats()
	if ran.Load() != 0 || finished.Load() != 2 || s.Panicked != 2 || s.Failed != 1 || s.Completed != 2 {
		t.Fatalf("ran %d, finished %d, %+v; want 0 ran, 2 finished, 2 panicked, 1 failed, 2 completed",
			ran.Load(), finished.Load(), s)
	}
}

// A Submit task whose TaskStart panics completes with that panic even if
// the Panic hook panics too, and TaskFinish sees it. The task must be
// completed before the Panic hook runs, not after it returns: otherwise
// its Wait would hang, and TaskFinish would see a nil error.
func TestHooksPanickingPanicHookStillEndsTheTask(t *testing.T) {
	leak.Check(t)
	var handled atomic.Int64
	var finishErr atomic.Value
	p := crew.New(1, quietPanics(&handled), crew.WithHooks(crew.Hooks{
		TaskStart:  func(crew.TaskEvent) { panic("start") },
		Panic:      func(crew.TaskEvent) { panic("panic hook") },
		TaskFinish: func(e crew.TaskEvent) { finishErr.Store(e.Err) },
	}))
	defer p.Stop()
	task := p.Submit(func(context.Context) error { return nil })
	recv(t, task.Done(), "the Submit task")
	var pe *crew.PanicError
	if err := task.Wait(); !errors.As(err, &pe) || pe.Value != "start" {
		t.Fatalf("Wait = %v, want TaskStart's panic", err)
	}
	p.Wait()
	if err, _ := finishErr.Load().(error); !errors.As(err, &pe) || pe.Value != "start" {
		t.Fatalf("TaskFinish saw %v, want TaskStart's panic", err)
	}
	if handled.Load() != 1 {
		t.Fatalf("the panic handler saw %d panics, want the Panic hook's one", handled.Load())
	}
}

// A Go task's panic reaches the panic handler even if the Panic hook
// panics too, which Hooks forbids: the hook's panic must not skip the
// handler's call for the task's panic, leaving it only the hook's panic.
func TestHooksPanickingPanicHookDoesNotSwallowTheTasksPanic(t *testing.T) {
	leak.Check(t)
	handler, handled := sentPanics(2)
	p := crew.New(1, handler,
		crew.WithHooks(crew.Hooks{Panic: func(crew.TaskEvent) { panic("panic hook") }}))
	p.Go(func() { panic("task") })
	within(t, schedDeadline, "Pool.Stop", p.Stop)
	if got := drained(handled); len(got) != 2 || got[0] != "task" || got[1] != "panic hook" {
		t.Fatalf("the panic handler got %v, want the task's panic, then the hook's", got)
	}
}

// runtime.Goexit in TaskStart (t.FailNow in a test's hook) ends a Submit
// task with ErrGoexit, as a Goexit in the task would, rather than leaving
// the task's Wait to hang.
func TestHooksTaskStartGoexitEndsTheTask(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithHooks(crew.Hooks{
		TaskStart: func(crew.TaskEvent) { runtime.Goexit() },
	}))
	defer p.Stop()
	task := p.Submit(func(context.Context) error { return nil })
	recv(t, task.Done(), "the Submit task")
	if err := task.Wait(); err != crew.ErrGoexit {
		t.Fatalf("Wait = %v, want ErrGoexit", err)
	}
	p.Wait()
	if s := p.Stats(); s.Failed != 1 || s.Completed != 1 {
		t.Fatalf("stats %+v, want 1 failed of 1 completed", s)
	}
}

// On an observed pool, a panic handler that calls runtime.Goexit does not
// cost the task its TaskFinish and its run time: neither is skipped.
func TestHooksSurviveAPanicHandlerThatGoexits(t *testing.T) {
	leak.Check(t)
	var finished atomic.Int64
	p := crew.New(1, crew.WithLatency(),
		crew.WithPanicHandler(func(*crew.PanicError) { runtime.Goexit() }),
		crew.WithHooks(crew.Hooks{TaskFinish: func(crew.TaskEvent) { finished.Add(1) }}))
	p.Go(func() { panic("boom") })
	within(t, 5*time.Second, "Stop after a panic handler's Goexit", p.Stop)
	l, _ := p.Latency()
	if finished.Load() != 1 || l.Run.Count != 1 || l.Wait.Count != 1 {
		t.Fatalf("TaskFinish ran %d times, Latency.Run.Count %d, Wait.Count %d; want 1 each",
			finished.Load(), l.Run.Count, l.Wait.Count)
	}
}

// A Go from inside a task that the full queue refuses, because every
// worker is such a task, is a drop like any refusal: Drop sees it.
func TestHooksReportRefusalsFromInsideATask(t *testing.T) {
	leak.Check(t)
	drops := make(chan error, 4)
	p := crew.New(1, crew.WithQueueSize(1), crew.WithHooks(crew.Hooks{
		Drop: func(e crew.TaskEvent) { drops <- e.Err },
	}))
	defer p.Stop()
	refused := make(chan error, 1)
	p.Go(func() {
		p.Go(func() {})            // fills the queue
		refused <- p.Go(func() {}) // the only worker is this task
	})
	if err := recv(t, refused, "the refused Go"); !errors.Is(err, crew.ErrQueueFull) {
		t.Fatalf("Go from inside the only task on a full queue = %v, want ErrQueueFull", err)
	}
	if err := recv(t, drops, "the Drop hook"); !errors.Is(err, crew.ErrQueueFull) {
		t.Fatalf("Drop got %v, want ErrQueueFull", err)
	}
}

// In an observed pool, every Submit task that Shutdown drops reaches the
// Drop hook and no other, also one that a worker was taking from the
// queue as Shutdown drained it: the Drop hook's calls, the ShutdownError,
// Stats and the Tasks reporting ErrDropped agree, whether the pool wraps
// its tasks to time them (WithLatency) or not (a Drop hook alone). Such a
// task must not go to TaskStart and TaskFinish instead (with a data race
// on its error), nor, unwrapped, to no hook.
func TestObservedShutdownDropsReachTheDropHook(t *testing.T) {
	leak.Check(t)
	for _, timed := range []bool{true, false} {
		t.Run(fmt.Sprintf("timed=%v", timed), func(t *testing.T) { shutdownDropsReachTheDropHook(t, timed) })
	}
}

func shutdownDropsReachTheDropHook(t *testing.T, timed bool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for deadline, trial := time.Now().Add(2*time.Second), 0; time.Now().Before(deadline); trial++ {
		var drops, finishedDropped atomic.Int64
		hooks := crew.Hooks{Drop: func(ev crew.TaskEvent) {
			if ev.Err == crew.ErrDropped {
				drops.Add(1)
			}
		}}
		opts := []crew.Option{crew.WithHooks(hooks)}
		if timed {
			hooks.TaskFinish = func(ev crew.TaskEvent) {
				if ev.Err == crew.ErrDropped {
					finishedDropped.Add(1)
				}
			}
			opts = []crew.Option{crew.WithHooks(hooks), crew.WithLatency()}
		}
		p := crew.New(8, opts...)
		tasks := make([]*crew.Task, 0, 500)
		for range cap(tasks) {
			tasks = append(tasks, p.Submit(func(context.Context) error { return nil }))
		}
		var se *crew.ShutdownError
		if !errors.As(p.Shutdown(ctx), &se) {
			continue // every task ran first
		}
		n := 0
		for _, task := range tasks {
			if task.Wait() == crew.ErrDropped {
				n++
			}
		}
		if s := p.Stats(); drops.Load() != int64(n) || se.Dropped != n || s.Dropped != uint64(n) || finishedDropped.Load() != 0 {
			t.Fatalf("trial %d: %d Tasks report ErrDropped; ShutdownError.Dropped %d, Stats.Dropped %d, Drop hook %d calls, TaskFinish with ErrDropped %d",
				trial, n, se.Dropped, s.Dropped, drops.Load(), finishedDropped.Load())
		}
	}
}

// A Drop hook that panics while Shutdown drains the queue (which Hooks
// forbids) reaches Shutdown's caller only once the drop is complete: every
// drained task counted, the dropped Tasks done, no task running. A later
// Stop then stops the pool: drained tasks left uncounted would make every
// later Stop wait for them for ever.
func TestDropHookPanickingInShutdownLeavesThePoolStoppable(t *testing.T) {
	leak.Check(t)
	const queued = 5
	var calls atomic.Int64
	p := crew.New(1, crew.WithHooks(crew.Hooks{Drop: func(crew.TaskEvent) {
		calls.Add(1)
		panic("drop hook")
	}}))
	started := make(chan struct{})
	if err := p.Go(func() { close(started); <-p.Context().Done() }); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, "the blocking task to start")
	tasks := make([]*crew.Task, queued)
	for i := range tasks {
		tasks[i] = p.Submit(func(context.Context) error { return nil })
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var recovered any
	within(t, schedDeadline, "Shutdown with a panicking Drop hook", func() {
		defer func() { recovered = recover() }()
		p.Shutdown(ctx)
	})
	if recovered != "drop hook" {
		t.Fatalf("Shutdown's caller recovered %v, want the Drop hook's panic", recovered)
	}
	if calls.Load() != 1 {
		t.Errorf("the Drop hook ran %d times; the panic of the first should end the calls", calls.Load())
	}
	within(t, schedDeadline, "the dropped Tasks' Wait", func() {
		for i, task := range tasks {
			if err := task.Wait(); err != crew.ErrDropped {
				t.Errorf("task %d: Wait = %v, want ErrDropped", i, err)
			}
		}
	})
	within(t, schedDeadline, "Stop after the panicking Shutdown", p.Stop)
	if s := p.Stats(); s.Dropped != queued || s.Completed != 1 || s.Running != 0 {
		t.Errorf("Stats after Stop: %+v, want %d dropped, 1 completed", s, queued)
	}
}
