package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

var errBoom = errors.New("boom")

func TestSizeTrigger(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	b := New(rec.flush, WithMaxItems(5), WithMaxWait(time.Hour))
	for i := range 12 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range [][]int{seq(0, 5), seq(5, 10)} {
		if got := rec.next(t); !slices.Equal(got, want) {
			t.Fatalf("batch %v, want %v", got, want)
		}
	}
	rec.none(t) // the last two items wait for a full batch, the timer or Close
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.next(t); !slices.Equal(got, seq(10, 12)) {
		t.Fatalf("last batch %v, want [10 11]", got)
	}
	s := b.Stats()
	if s.Added != 12 || s.Batches != 3 || s.Flushed != 12 || s.Pending != 0 || s.Latency.Count != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestIntervalTrigger(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	const wait = 20 * time.Millisecond
	b := New(rec.flush, WithMaxItems(1000), WithMaxWait(wait))
	defer b.Close(ctx)
	for round := range 2 { // the timer is armed again for the second batch
		start := time.Now()
		for i := range 3 {
			if err := b.Add(ctx, round*3+i); err != nil {
				t.Fatal(err)
			}
		}
		got := rec.next(t)
		if elapsed := time.Since(start); elapsed < wait {
			t.Errorf("batch flushed after %v, before the %v max wait", elapsed, wait)
		}
		if want := seq(round*3, round*3+3); !slices.Equal(got, want) {
			t.Fatalf("batch %v, want %v", got, want)
		}
	}
}

func TestByteTrigger(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[string]()
	b := New(rec.flush, WithMaxBytes(10, func(s string) int { return len(s) }), WithMaxWait(time.Hour))
	for _, s := range []string{"aaaa", "bbbb", "cc", "ddddddd", "eee", "fffffff", "gggg", "hhhhhhhhhhhhhhh", "i"} {
		if err := b.Add(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	want := [][]string{
		{"aaaa", "bbbb", "cc"}, // exactly 10 bytes
		{"ddddddd", "eee"},     // exactly 10 bytes
		{"fffffff"},            // "gggg" would make it 11
		{"gggg"},               // the next item is too big to join
		{"hhhhhhhhhhhhhhh"},    // larger than the bound: alone
	}
	for _, w := range want {
		if got := rec.next(t); !slices.Equal(got, w) {
			t.Fatalf("batch %q, want %q", got, w)
		}
	}
	rec.none(t)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.next(t); !slices.Equal(got, []string{"i"}) {
		t.Fatalf("last batch %q, want [i]", got)
	}
}

func TestConcurrentAdd(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	const producers, each = 8, 2000
	var mu sync.Mutex
	seen := make([]int, producers*each)
	var maxLen atomic.Int64
	flush := func(_ context.Context, items []int) error {
		if n := int64(len(items)); n > maxLen.Load() {
			maxLen.Store(n)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, it := range items {
			seen[it]++
		}
		return nil
	}
	b := New(flush, WithMaxItems(50), WithMaxConcurrentFlushes(3), WithMaxWait(time.Millisecond))
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				item := p*each + i
				if i%2 == 0 {
					if err := b.Add(ctx, item); err != nil {
						t.Error(err)
					}
				} else if !b.TryAdd(item) { // at the default bound
					if err := b.Add(ctx, item); err != nil {
						t.Error(err)
					}
				}
				if i%500 == 0 {
					if err := b.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for item, n := range seen {
		if n != 1 {
			t.Fatalf("item %d flushed %d times", item, n)
		}
	}
	if n := maxLen.Load(); n > 50 {
		t.Errorf("a batch had %d items, more than 50", n)
	}
	s := b.Stats()
	if s.Added != producers*each || s.Flushed != producers*each || s.Pending != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMaxConcurrentFlushes(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxItems(1), WithMaxConcurrentFlushes(3))
	for i := range 10 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // three flushes run at once...
		rec.waitStarted(t)
	}
	if n := len(rec.started); n != 0 { // ...and no more
		t.Fatalf("%d more flushes started beyond the limit of 3", n)
	}
	if s := b.Stats(); s.InFlight != 3 || s.Pending != 10 {
		t.Fatalf("stats %+v", s)
	}
	release()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.all)
	if !slices.Equal(rec.all, seq(0, 10)) {
		t.Fatalf("flushed %v", rec.all)
	}
}

func TestCloseFlushesEverything(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	b := New(rec.flush, WithMaxItems(100), WithMaxWait(time.Hour), WithMaxConcurrentFlushes(2))
	for i := range 250 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.all)
	if !slices.Equal(rec.all, seq(0, 250)) {
		t.Fatalf("flushed %d items, want 0..249", len(rec.all))
	}
	if err := b.Add(ctx, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	if b.TryAdd(1) {
		t.Error("TryAdd after Close accepted the item")
	}
	if err := b.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
	if err := b.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if s := b.Stats(); s.Added != 250 || s.Flushed != 250 || s.Batches != 3 || s.Rejected != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCloseEmpty(t *testing.T) {
	leak.Check(t)
	b := New(func(context.Context, []int) error { return nil })
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRetryThenHandOver(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	var calls atomic.Int32
	flush := func(context.Context, []int) error {
		calls.Add(1)
		return errBoom
	}
	h, handedCh := handler[int]()
	b := New(flush, WithRetry(crew.Retry{Attempts: 3, Delay: time.Millisecond, MaxDelay: 2 * time.Millisecond}), WithErrorHandler(h))
	for i := range 4 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(ctx); !errors.Is(err, errBoom) {
		t.Fatalf("Flush: %v, want an error wrapping errBoom", err)
	}
	got := receive(t, handedCh)
	if !slices.Equal(got.items, seq(0, 4)) || !errors.Is(got.err, errBoom) {
		t.Fatalf("handed %v, %v; want [0 1 2 3], errBoom", got.items, got.err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("flush called %d times, want 3", n)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if s.Retries != 2 || s.FailedBatches != 1 || s.Failed != 4 || s.Batches != 0 || s.Latency.Count != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRetrySucceeds(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	var calls atomic.Int32
	flush := func(context.Context, []int) error {
		if calls.Add(1) <= 2 {
			return errBoom
		}
		return nil
	}
	h, handedCh := handler[int]()
	b := New(flush, WithRetry(crew.Retry{Attempts: 5, Delay: 0, MaxDelay: 0}), WithErrorHandler(h))
	b.Add(ctx, 1)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(handedCh) != 0 {
		t.Fatalf("error handler called: %v", <-handedCh)
	}
	if s := b.Stats(); s.Retries != 2 || s.Batches != 1 || s.Flushed != 1 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestFailureDuringClose(t *testing.T) {
	leak.Check(t)
	h, handedCh := handler[int]()
	b := New(func(context.Context, []int) error { return errBoom }, WithErrorHandler(h))
	b.Add(context.Background(), 7)
	if err := b.Close(context.Background()); !errors.Is(err, errBoom) {
		t.Fatalf("Close: %v, want an error wrapping errBoom", err)
	}
	if got := receive(t, handedCh); !slices.Equal(got.items, []int{7}) {
		t.Fatalf("handed %v, want [7]", got.items)
	}
}

func TestPanicInFlush(t *testing.T) {
	leak.Check(t)
	h, handedCh := handler[int]()
	b := New(func(context.Context, []int) error { panic(errBoom) }, WithErrorHandler(h))
	b.Add(context.Background(), 1)
	b.Close(context.Background())
	got := receive(t, handedCh)
	var pe *crew.PanicError
	if !errors.As(got.err, &pe) || !errors.Is(got.err, errBoom) || len(pe.Stack) == 0 {
		t.Fatalf("handed error %v, want a *crew.PanicError wrapping errBoom", got.err)
	}
}

func TestPanicInErrorHandler(t *testing.T) {
	leak.Check(t)
	var logged bytes.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	b := New(func(context.Context, []int) error { return errBoom },
		WithErrorHandler(func(context.Context, []int, error) { panic("handler") }))
	b.Add(context.Background(), 1)
	if err := b.Close(context.Background()); !errors.Is(err, errBoom) {
		t.Fatalf("Close: %v", err)
	}
	if !strings.Contains(logged.String(), "error handler panicked") {
		t.Errorf("panic not logged: %q", logged.String())
	}
	if s := b.Stats(); s.Failed != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBlockWhenFull(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxItems(2), WithMaxWait(time.Hour), WithMaxPending(4, Block))
	for i := range 4 {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := b.Add(short, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add when full: %v, want DeadlineExceeded", err)
	}
	if b.TryAdd(4) {
		t.Fatal("TryAdd accepted an item beyond the bound")
	}
	done := make(chan error)
	go func() { done <- b.Add(ctx, 4) }()
	select {
	case err := <-done:
		t.Fatalf("Add returned %v while full", err)
	default:
	}
	release()
	if err := receive(t, done); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.all)
	if !slices.Equal(rec.all, seq(0, 5)) {
		t.Fatalf("flushed %v", rec.all)
	}
	if s := b.Stats(); s.Rejected != 1 || s.Added != 5 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCloseWakesBlockedAdd(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	defer release()
	b := New(rec.flush, WithMaxItems(1), WithMaxPending(1, Block))
	b.Add(ctx, 0)
	done := make(chan error)
	go func() { done <- b.Add(ctx, 1) }()
	closed := make(chan error)
	go func() { closed <- b.Close(ctx) }()
	if err := receive(t, done); !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Add: %v, want ErrClosed", err)
	}
	release()
	if err := receive(t, closed); err != nil {
		t.Fatal(err)
	}
}

func TestFailWhenFull(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxItems(2), WithMaxPending(2, Fail))
	b.Add(ctx, 0)
	b.Add(ctx, 1)
	if err := b.Add(ctx, 2); !errors.Is(err, ErrFull) {
		t.Fatalf("Add when full: %v, want ErrFull", err)
	}
	release()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.Rejected != 1 || s.Flushed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDropOldest(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	h, handedCh := handler[int]()
	b := New(rec.flush, WithMaxItems(2), WithMaxWait(time.Hour), WithMaxPending(3, DropOldest), WithErrorHandler(h))
	b.Add(ctx, 0)
	b.Add(ctx, 1) // seals [0 1]
	rec.waitStarted(t)
	for i := 2; i < 5; i++ { // 2 is buffered, 3 replaces it, 4 replaces 3
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{2, 3} {
		got := receive(t, handedCh)
		if !slices.Equal(got.items, []int{want}) || !errors.Is(got.err, ErrDropped) {
			t.Fatalf("handed %v, %v; want [%d], ErrDropped", got.items, got.err, want)
		}
	}
	release()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.all, []int{0, 1, 4}) {
		t.Fatalf("flushed %v, want [0 1 4]", rec.all)
	}
	if s := b.Stats(); s.Dropped != 2 || s.Added != 5 || s.Flushed != 3 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDropOldestFromSealedBatch(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	h, handedCh := handler[int]()
	b := New(rec.flush, WithMaxItems(2), WithMaxWait(time.Hour), WithMaxPending(4, DropOldest), WithErrorHandler(h))
	for i := range 4 { // [0 1] is being flushed, [2 3] waits for it
		b.Add(ctx, i)
	}
	rec.waitStarted(t)
	b.Add(ctx, 4) // drops 2
	b.Add(ctx, 5) // drops 3, seals [4 5]
	b.Add(ctx, 6) // drops 4 from the next sealed batch
	for _, want := range []int{2, 3, 4} {
		if got := receive(t, handedCh); !slices.Equal(got.items, []int{want}) {
			t.Fatalf("handed %v, want [%d]", got.items, want)
		}
	}
	release()
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.all, []int{0, 1, 5, 6}) {
		t.Fatalf("flushed %v, want [0 1 5 6]", rec.all)
	}
}

func TestDropOldestNothingToDrop(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxItems(2), WithMaxPending(2, DropOldest))
	b.Add(ctx, 0)
	b.Add(ctx, 1)
	rec.waitStarted(t)
	if b.TryAdd(2) {
		t.Fatal("TryAdd dropped an item being flushed")
	}
	release()
	if err := b.Add(ctx, 2); err != nil { // waits for the flush
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.all, []int{0, 1, 2}) {
		t.Fatalf("flushed %v", rec.all)
	}
}

func TestFlushWaits(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxWait(time.Hour))
	if err := b.Flush(ctx); err != nil { // nothing to flush
		t.Fatal(err)
	}
	b.Add(ctx, 1)
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := b.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush: %v, want DeadlineExceeded", err)
	}
	release()
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.all, []int{1}) || b.Stats().Pending != 0 {
		t.Fatalf("flushed %v, stats %+v", rec.all, b.Stats())
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCloseGivesUp(t *testing.T) {
	leak.Check(t)
	rec := newRecorder[int]()
	rec.hold() // flushes end only when their context is canceled
	h, handedCh := handler[int]()
	b := New(rec.flush, WithMaxItems(1), WithErrorHandler(h), WithRetry(crew.Retry{Attempts: 5, Delay: time.Millisecond, MaxDelay: time.Millisecond}))
	for i := range 3 {
		b.Add(context.Background(), i)
	}
	rec.waitStarted(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want DeadlineExceeded", err)
	}
	var got []int
	for range 3 {
		h := receive(t, handedCh)
		if !errors.Is(h.err, context.Canceled) && !(errors.Is(h.err, ErrClosed) && errors.Is(h.err, context.DeadlineExceeded)) {
			t.Errorf("handed %v with %v", h.items, h.err)
		}
		got = append(got, h.items...)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("handed %v, want [0 1 2]", got)
	}
	deadline := time.Now().Add(waitFor)
	for b.Stats().Pending != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", b.Stats())
		}
		time.Sleep(time.Millisecond) // polling, bounded by the deadline
	}
}

func TestSharedPool(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(4)
	defer p.Stop()
	rec := newRecorder[int]()
	b := New(rec.flush, WithPool(p), WithMaxConcurrentFlushes(2), WithMaxItems(3))
	for i := range 10 {
		b.Add(ctx, i)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rec.all) != 10 {
		t.Fatalf("flushed %v", rec.all)
	}
	ran := make(chan struct{})
	if err := p.Go(func() { close(ran) }); err != nil { // Close left the pool running
		t.Fatal(err)
	}
	receive(t, ran)
}

func TestStoppedPool(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(1)
	p.Stop()
	rec := newRecorder[int]()
	b := New(rec.flush, WithPool(p), WithMaxItems(2))
	for i := range 5 {
		b.Add(ctx, i)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.all)
	if !slices.Equal(rec.all, seq(0, 5)) {
		t.Fatalf("flushed %v", rec.all)
	}
}

// Close that gives up on a long backlog hands every batch to the error
// handler in a loop, in time linear in the backlog: recursing once per
// batch would overflow a stack of 8 MB with 50,000 batches, and a search
// per batch would make it quadratic. Run in a child process with the
// smaller stack.
func TestCloseAbandonsALongBacklog(t *testing.T) {
	if os.Getenv("BATCH_ABANDON_CHILD") == "1" {
		abandonChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCloseAbandonsALongBacklog$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "BATCH_ABANDON_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child abandoning 50,000 batches on an 8 MB stack: %v\n%.2000s", err, out)
	}
}

func abandonChild(t *testing.T) {
	leak.Check(t)
	debug.SetMaxStack(8 << 20)
	const n = 50000
	started := make(chan struct{}, 1)
	var handed atomic.Int64
	b := New(func(ctx context.Context, _ []int) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}, WithMaxItems(1), WithMaxPending(math.MaxInt, Block), WithMaxWait(time.Hour),
		WithErrorHandler(func(context.Context, []int, error) { handed.Add(1) }))
	ctx := context.Background()
	for i := range n {
		b.Add(ctx, i)
	}
	receive(t, started)
	gaveUp, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Close(gaveUp); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	// The batch being flushed goes to the handler later, as its flush
	// returns; the others have gone by now.
	if h := handed.Load(); h < n-1 {
		t.Fatalf("%d batches handed to the error handler, want at least %d", h, n-1)
	}
}

// Flush and Close on a stopped shared pool still give up when their ctx
// ends, rather than running the flusher on their own goroutine and waiting
// for it whatever ctx. The flush function here ends only when Close
// cancels its context.
func TestStoppedPoolFlushAndCloseGiveUp(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	p.Stop()
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	b := New(func(ctx context.Context, _ []int) error {
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return nil
		}
	}, WithPool(p), WithMaxItems(10), WithMaxWait(time.Hour))
	if err := b.Add(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(ctx) }()
	receive(t, entered)
	cancel()
	if err := receive(t, flushed); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush = %v, want context.Canceled", err)
	}
	release <- struct{}{} // the first flush returns; the second waits for its context
	if err := b.Add(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	receive(t, entered)
	cancel()
	if err := receive(t, closed); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
}

// When Shutdown's deadline drops a flusher queued on a shared pool, the
// Batcher learns of it and flushes the batch itself, so Flush and Close
// return.
func TestSharedPoolShutdownDropsAFlusher(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(1)
	blocking := make(chan struct{})
	p.Go(func() { close(blocking); <-p.Context().Done() }) // until Shutdown gives up
	receive(t, blocking)
	rec := newRecorder[int]()
	b := New(rec.flush, WithPool(p), WithMaxItems(1))
	if err := b.Add(ctx, 7); err != nil { // seals: a flusher waits in p's queue
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	var se *crew.ShutdownError
	if err := p.Shutdown(short); !errors.As(err, &se) || se.Dropped != 1 {
		t.Fatalf("Shutdown = %v, want a *ShutdownError with the flusher dropped", err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(ctx) }()
	if err := receive(t, flushed); err != nil {
		t.Fatal(err)
	}
	if got := rec.next(t); !slices.Equal(got, []int{7}) {
		t.Fatalf("flushed %v, want [7]", got)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	if err := receive(t, closed); err != nil {
		t.Fatal(err)
	}
}

func TestManyBatchersLeaveNoGoroutine(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	for i := range 20 {
		b := New(func(context.Context, []int) error { return nil },
			WithMaxItems(7), WithMaxWait(time.Millisecond), WithMaxConcurrentFlushes(1+i%3))
		for j := range 30 {
			b.Add(ctx, j)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAddDoesNotAllocatePerItem(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	b := New(func(context.Context, []int) error { return nil }, WithMaxItems(64), WithMaxWait(time.Hour))
	defer b.Close(ctx)
	for i := range 64 * 100 { // warm up the recycled slices
		b.Add(ctx, i)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 64 { // one batch per run
			b.Add(ctx, i)
		}
	})
	// Sealing a batch may allocate (starting a flush, a fresh slice when
	// the flusher lags); the items themselves must not.
	if allocs > 8 {
		t.Fatalf("%v allocations per 64 items", allocs)
	}
}

func TestInvalidConfig(t *testing.T) {
	leak.Check(t)
	flush := func(context.Context, []int) error { return nil }
	cases := []struct {
		name  string
		flush func(context.Context, []int) error
		opt   Option
	}{
		{"nil flush", nil, nil},
		{"max items", flush, WithMaxItems(0)},
		{"max bytes", flush, WithMaxBytes(-1, func(int) int { return 1 })},
		{"nil size", flush, WithMaxBytes[int](10, nil)},
		{"size type", flush, WithMaxBytes(10, func(s string) int { return len(s) })},
		{"max wait", flush, WithMaxWait(0)},
		{"flushes", flush, WithMaxConcurrentFlushes(0)},
		{"nil pool", flush, WithPool(nil)},
		{"max pending", flush, WithMaxPending(0, Block)},
		{"policy", flush, WithMaxPending(1, FullPolicy(7))},
		{"attempts", flush, WithRetry(crew.Retry{Attempts: 0, Delay: 0, MaxDelay: 0})},
		{"delays", flush, WithRetry(crew.Retry{Attempts: 2, Delay: time.Second, MaxDelay: time.Millisecond})},
		{"nil handler", flush, WithErrorHandler[int](nil)},
		{"handler type", flush, WithErrorHandler(func(context.Context, []string, error) {})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, crew.ErrInvalid) {
					t.Fatalf("New panicked with %v, want crew.ErrInvalid", err)
				}
				t.Log(err)
			}()
			New(c.flush, c.opt)
			t.Fatal("New did not panic")
		})
	}
}

func TestFullPolicyString(t *testing.T) {
	leak.Check(t)
	got := fmt.Sprint(Block, Fail, DropOldest, FullPolicy(9))
	if want := "Block Fail DropOldest FullPolicy(9)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func BenchmarkAdd(b *testing.B) {
	ctx := context.Background()
	bt := New(func(context.Context, []int) error { return nil }, WithMaxItems(100))
	defer bt.Close(ctx)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bt.Add(ctx, i)
	}
}

func BenchmarkAddParallel(b *testing.B) {
	ctx := context.Background()
	bt := New(func(context.Context, []int) error { return nil }, WithMaxItems(100), WithMaxConcurrentFlushes(2))
	defer bt.Close(ctx)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			bt.Add(ctx, i)
		}
	})
}

func TestDefaultErrorHandlerLogs(t *testing.T) {
	leak.Check(t)
	var logged bytes.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	ctx := context.Background()
	started, release := make(chan struct{}, 3), make(chan struct{})
	b := New(func(_ context.Context, items []int) error {
		started <- struct{}{}
		<-release
		if items[0] == 0 {
			return errBoom
		}
		return nil
	}, WithMaxItems(1), WithMaxPending(2, DropOldest))
	b.Add(ctx, 0) // will fail
	receive(t, started)
	b.Add(ctx, 1) // waits for a flusher
	b.Add(ctx, 2) // drops 1: not logged
	close(release)
	// Close reports the failure only if it was still waiting for that
	// flush; the log line must appear either way.
	if err := b.Close(ctx); err != nil && !errors.Is(err, errBoom) {
		t.Fatalf("Close: %v, want nil or an error wrapping errBoom", err)
	}
	if got := logged.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "1 items not flushed: boom") {
		t.Fatalf("logged %q, want one line about the failed flush", got)
	}
}

func TestTimerFiringForAnOlderBatch(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	b := New(rec.flush, WithMaxWait(time.Hour))
	b.onTimer() // nothing buffered: nothing to do
	b.Add(ctx, 1)
	b.onTimer() // a late call for an earlier batch: the open one is young
	rec.none(t)
	if s := b.Stats(); s.Pending != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.all, []int{1}) {
		t.Fatalf("flushed %v", rec.all)
	}
}

func TestDefaultMaxPending(t *testing.T) {
	leak.Check(t)
	if got := defaultMaxPending(100, 1); got != 800 {
		t.Errorf("defaultMaxPending(100, 1) = %d, want 800", got)
	}
	if got := defaultMaxPending(math.MaxInt/2, 3); got != math.MaxInt {
		t.Errorf("defaultMaxPending overflowed to %d", got)
	}
}

// A flush function that calls runtime.Goexit (t.FailNow in a test's flush)
// ends its flusher, not the Batcher: the batch goes to the error handler
// with crew.ErrGoexit, Flush reports it, and later batches flush.
func TestGoexitInFlush(t *testing.T) {
	leak.Check(t)
	h, handedCh := handler[int]()
	rec := newRecorder[int]()
	var calls atomic.Int32
	b := New(func(ctx context.Context, items []int) error {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		return rec.flush(ctx, items)
	}, WithErrorHandler(h), WithMaxWait(time.Hour))
	ctx := context.Background()
	b.Add(ctx, 1)
	if err := b.Flush(ctx); !errors.Is(err, crew.ErrGoexit) {
		t.Fatalf("Flush = %v, want an error wrapping crew.ErrGoexit", err)
	}
	if got := receive(t, handedCh); !slices.Equal(got.items, []int{1}) || !errors.Is(got.err, crew.ErrGoexit) {
		t.Fatalf("handed %v with %v, want [1] with crew.ErrGoexit", got.items, got.err)
	}
	b.Add(ctx, 2)
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if got := rec.next(t); !slices.Equal(got, []int{2}) {
		t.Fatalf("flushed %v after the Goexit, want [2]", got)
	}
}

// A flush call that ends in runtime.Goexit is timed as long as it ran,
// not as the call before it: Latency must not record the previous
// attempt's duration again (here the 20 ms of the first call).
func TestGoexitInFlushIsTimed(t *testing.T) {
	leak.Check(t)
	const first = 20 * time.Millisecond
	h, handedCh := handler[int]()
	var calls atomic.Int32
	b := New(func(context.Context, []int) error {
		if calls.Add(1) == 1 {
			time.Sleep(first) // the call's duration, not a wait for anything
			return errBoom
		}
		runtime.Goexit()
		return nil
	}, WithRetry(crew.Retry{Attempts: 2, Delay: 0, MaxDelay: 0}), WithErrorHandler(h), WithMaxWait(time.Hour))
	ctx := context.Background()
	b.Add(ctx, 1)
	if err := b.Flush(ctx); !errors.Is(err, crew.ErrGoexit) {
		t.Fatalf("Flush = %v, want an error wrapping crew.ErrGoexit", err)
	}
	receive(t, handedCh)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats().Latency; s.Count != 2 || s.Total >= 2*first {
		t.Fatalf("Latency count %d, total %v: want 2 calls, one of %v and one that ended at once", s.Count, s.Total, first)
	}
}

// With GODEBUG=panicnil=1, a flush function's panic(nil) is recovered as
// nil: it is a failed flush all the same, handed to the error handler once
// the retries are spent, not counted as flushed with its items lost
// without a word. Run in a child process with the setting.
func TestPanicNilInFlushUnderGODEBUG(t *testing.T) {
	if os.Getenv("BATCH_PANICNIL_CHILD") == "1" {
		panicNilFlushChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicNilInFlushUnderGODEBUG$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "BATCH_PANICNIL_CHILD=1", "GODEBUG=panicnil=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child with GODEBUG=panicnil=1: %v\n%s", err, out)
	}
}

func panicNilFlushChild(t *testing.T) {
	leak.Check(t)
	h, handedCh := handler[int]()
	b := New(func(context.Context, []int) error {
		panic(nil) //nolint:govet // the point of the test
	}, WithRetry(crew.Retry{Attempts: 1, Delay: 0, MaxDelay: 0}), WithErrorHandler(h), WithMaxWait(time.Hour))
	ctx := context.Background()
	b.Add(ctx, 1)
	var pe *crew.PanicError
	if err := b.Flush(ctx); !errors.As(err, &pe) {
		t.Errorf("Flush = %v, want a *crew.PanicError", err)
	}
	if got := receive(t, handedCh); !slices.Equal(got.items, []int{1}) || !errors.As(got.err, &pe) {
		t.Errorf("handed %v with %v, want [1] with a *crew.PanicError", got.items, got.err)
	}
	if err := b.Close(ctx); err != nil {
		t.Errorf("Close = %v", err)
	}
	if s := b.Stats(); s.Flushed != 0 || s.Failed != 1 {
		t.Errorf("stats: %d flushed, %d failed; want 0 and 1", s.Flushed, s.Failed)
	}
}

// dropHandOverUnderWay returns a Batcher (flushing into flushed, batches of
// up to 10 items, DropOldest at 1 pending item) whose open batch holds 2
// while the error handler holds 1, which an Add dropped for 2: the handler
// returns when release is closed, and then the Add sends its result on
// added.
func dropHandOverUnderWay(t *testing.T) (b *Batcher[int], flushed chan []int, release chan struct{}, added chan error) {
	t.Helper()
	inHandler, release := make(chan struct{}), make(chan struct{})
	h := func(_ context.Context, items []int, err error) {
		if errors.Is(err, ErrDropped) {
			close(inHandler)
			<-release
		}
	}
	flushed = make(chan []int, 1)
	b = New(func(_ context.Context, items []int) error { flushed <- slices.Clone(items); return nil },
		WithMaxItems(10), WithMaxWait(time.Hour), WithMaxPending(1, DropOldest), WithErrorHandler(h))
	ctx := context.Background()
	b.Add(ctx, 1)
	added = make(chan error, 1)
	go func() { added <- b.Add(ctx, 2) }() // drops 1 and hands it over
	receive(t, inHandler)
	return b, flushed, release, added
}

// Close waits for the error handler's calls with the items DropOldest
// dropped, as for those of failed flushes.
func TestCloseWaitsForDropHandOvers(t *testing.T) {
	leak.Check(t)
	b, flushed, release, added := dropHandOverUnderWay(t)
	ctx := context.Background()
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	if got := receive(t, flushed); !slices.Equal(got, []int{2}) {
		t.Fatalf("Close flushed %v, want [2]", got)
	}
	// Everything but the hand-over is done: Close must still wait for it.
	select {
	case err := <-closed:
		close(release)
		t.Fatalf("Close returned (%v) while the error handler still had the dropped item", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := receive(t, closed); err != nil {
		t.Fatalf("Close = %v", err)
	}
	receive(t, added)
}

// A flush call counts once in Stats.Latency, also when Close gives up while
// the flush waits to retry it.
func TestLatencyCountsACallOnceWhenCloseGivesUp(t *testing.T) {
	leak.Check(t)
	called := make(chan struct{}, 10)
	h, handedCh := handler[int]()
	b := New(func(context.Context, []int) error { called <- struct{}{}; return errBoom },
		WithRetry(crew.Retry{Attempts: 5, Delay: time.Hour, MaxDelay: time.Hour}), WithErrorHandler(h), WithMaxItems(1))
	b.Add(context.Background(), 1) // sealed and flushed at once
	receive(t, called)             // the flusher now waits an hour to retry
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want the deadline", err)
	}
	receive(t, handedCh)
	deadline := time.Now().Add(waitFor)
	for b.Stats().Pending != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the batch never finished: %+v", b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if s := b.Stats(); s.Latency.Count != 1 || s.Retries != 0 {
		t.Fatalf("one flush call: Latency.Count %d, Retries %d", s.Latency.Count, s.Retries)
	}
}

// A Goexit in the error handler (t.FailNow in a test) leaves nothing
// counted: neither a DropOldest hand-over, which a Close deferred on the
// same goroutine then does not wait for, nor the batch of a flush that
// called Goexit itself.
func TestGoexitInTheErrorHandler(t *testing.T) {
	leak.Check(t)
	t.Run("drop hand-over", func(t *testing.T) {
		h := func(_ context.Context, _ []int, err error) {
			if errors.Is(err, ErrDropped) {
				runtime.Goexit()
			}
		}
		flushed := make(chan []int, 10)
		b := New(func(_ context.Context, items []int) error { flushed <- slices.Clone(items); return nil },
			WithMaxItems(10), WithMaxWait(time.Hour), WithMaxPending(1, DropOldest), WithErrorHandler(h))
		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			defer func() { closed <- b.Close(ctx) }()
			b.Add(context.Background(), 1)
			b.Add(context.Background(), 2) // drops 1: the handler calls Goexit
		}()
		if err := receive(t, closed); err != nil {
			t.Fatalf("Close = %v, want nil", err)
		}
		if got := receive(t, flushed); !slices.Equal(got, []int{2}) {
			t.Fatalf("flushed %v, want [2]", got)
		}
	})
	t.Run("flush and handler", func(t *testing.T) {
		handled := make(chan error, 10)
		h := func(_ context.Context, _ []int, err error) { handled <- err; runtime.Goexit() }
		b := New(func(context.Context, []int) error { runtime.Goexit(); return nil },
			WithErrorHandler(h), WithMaxWait(time.Hour))
		ctx := context.Background()
		b.Add(ctx, 1)
		if err := b.Flush(ctx); !errors.Is(err, crew.ErrGoexit) {
			t.Fatalf("Flush = %v, want an error wrapping crew.ErrGoexit", err)
		}
		if got := receive(t, handled); !errors.Is(got, crew.ErrGoexit) {
			t.Fatalf("handed with %v, want crew.ErrGoexit", got)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatalf("Close = %v", err)
		}
	})
}

// Close giving up hands every batch no flusher took to the error handler,
// even when the handler calls runtime.Goexit on Close's goroutine.
func TestCloseAbortSurvivesAGoexitInTheHandler(t *testing.T) {
	leak.Check(t)
	var mu sync.Mutex
	handed := map[int]error{}
	goexited := false
	started := make(chan struct{}, 8)
	b := New(func(ctx context.Context, items []int) error {
		started <- struct{}{}
		<-ctx.Done() // the first flush runs until Close gives up
		return ctx.Err()
	}, WithMaxItems(1), WithErrorHandler(func(_ context.Context, items []int, err error) {
		mu.Lock()
		for _, it := range items {
			handed[it] = err
		}
		goexit := !goexited && errors.Is(err, ErrClosed)
		goexited = goexited || goexit
		mu.Unlock()
		if goexit {
			runtime.Goexit()
		}
	}))
	for it := 1; it <= 3; it++ { // 1 is flushed; 2 and 3 wait for a flusher
		if err := b.Add(context.Background(), it); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, started)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		b.Close(ctx) // gives up; the handler ends this goroutine at batch 2
	}()
	receive(t, closed)
	deadline := time.Now().Add(waitFor)
	for s := b.Stats(); s.Pending != 0 || s.InFlight != 0; s = b.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("batches left unfinished: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handed) != 3 {
		t.Fatalf("items handed to the error handler: %v, want 1, 2 and 3", handed)
	}
}

// A flusher that a worker took before the pool gave up, and that begins
// after poolGaveUp wrote it off, leaves the batches to the flusher that
// replaced it, which runs on poolGaveUp's goroutine: the count of flushers
// stays right and nothing is flushed twice. (Here the pool has not really
// given up; poolGaveUp is called by hand.)
func TestLateFlusherAfterPoolGaveUp(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(1)
	defer p.Stop()
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo()              // before Stop, should the test fail
	p.Go(func() { <-release }) // holds the worker: the flusher waits
	rec := newRecorder[int]()
	b := New(rec.flush, WithPool(p), WithMaxItems(1))
	if err := b.Add(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b.poolGaveUp()
	if got := rec.next(t); !slices.Equal(got, []int{1}) {
		t.Fatalf("flushed %v, want [1]", got)
	}
	b.mu.Lock()
	flushing, queued := b.flushing, b.queued
	b.mu.Unlock()
	if flushing != 0 || queued != 0 {
		t.Fatalf("after poolGaveUp: %d flushers, %d queued; want none", flushing, queued)
	}
	letGo()                               // the written-off flusher begins
	if err := b.Add(ctx, 2); err != nil { // flushed in place: the pool "gave up"
		t.Fatal(err)
	}
	if got := rec.next(t); !slices.Equal(got, []int{2}) {
		t.Fatalf("flushed %v, want [2]", got)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.Wait() // the late flusher has begun and returned
	rec.none(t)
	if b.flushing != 0 || b.queued != 0 {
		t.Fatalf("after Close: %d flushers, %d queued", b.flushing, b.queued)
	}
}

// A shared pool that gives up between a seal that counts a new flusher and
// the submission of that flusher: poolGaveUp writes the flusher off and
// flushes the batch on a goroutine of its own, and the seal, refused by the
// stopped pool, must not count it out again: the count would go below
// zero, no flusher would start any more, and Flush and Close would wait
// for ever. Any seal can meet the pool's end so; here the
// Add that seals hands the item DropOldest dropped to the error handler
// first, which stops the pool at that moment.
func TestPoolGivesUpWhileASealSubmitsItsFlusher(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(1)
	defer p.Stop()
	rec := newRecorder[int]()
	handed := make(chan []int, 2)
	b := New(rec.flush, WithPool(p), WithMaxItems(10), WithMaxWait(time.Hour),
		WithMaxBytes(3, func(int) int { return 1 }), WithMaxPending(2, DropOldest),
		WithErrorHandler(func(_ context.Context, items []int, err error) {
			handed <- slices.Clone(items)
			if errors.Is(err, ErrDropped) {
				p.Stop() // the pool ends between the seal and the submission
				if got := rec.next(t); !slices.Equal(got, []int{2, 3}) {
					t.Errorf("flushed %v once the pool gave up, want [2 3]", got)
				}
			}
		}))
	// The third Add drops 1, whose byte stays counted, and seals [2 3].
	for i := 1; i <= 3; i++ {
		if err := b.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if got := receive(t, handed); !slices.Equal(got, []int{1}) {
		t.Fatalf("handed %v, want [1]", got)
	}
	if err := b.Add(ctx, 4); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := b.Close(short); err != nil {
		b.mu.Lock()
		flushing, queued := b.flushing, b.queued
		b.mu.Unlock()
		t.Fatalf("Close = %v, want nil (%d flushers, %d queued; stats %+v)", err, flushing, queued, b.Stats())
	}
	if got := rec.next(t); !slices.Equal(got, []int{4}) {
		t.Fatalf("flushed %v, want [4]", got)
	}
}

// A Batcher on a shared pool keeps its count of flushers right when the
// pool's Stop, or Shutdown with a deadline that passes, races with Adds
// that seal batches: Close, after that, returns. Rounds alternate Stop and
// Shutdown, one and two concurrent flushes.
func TestSharedPoolStopRacingAdds(t *testing.T) {
	leak.Check(t)
	for round := range 100 {
		p := crew.New(1)
		var flushes atomic.Int64
		busy := make(chan struct{})
		b := New(func(context.Context, []int) error {
			if flushes.Add(1) == 20 {
				close(busy)
			}
			return nil
		}, WithPool(p), WithMaxItems(1), WithMaxConcurrentFlushes(1+round%2))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
						b.TryAdd(j)
					}
				}
			})
		}
		receive(t, busy)
		if round%4 < 2 { // while the Adds go on
			p.Stop()
		} else {
			short, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
			p.Shutdown(short)
			cancel()
		}
		close(stop)
		wg.Wait()
		closeWithin(t, b, fmt.Sprintf("round %d, after the pool stopped while Adds sealed batches", round))
	}
}

// A flusher that a worker took before Shutdown's deadline and that begins
// while poolGaveUp is dispatching its replacement (here pinned there with
// the pool's hooks, which must not block outside a test) finds itself
// written off: it must not take the replacement's place in queued, which
// would end the counts at -1 with Close waiting for ever.
func TestLateFlusherDuringPoolGaveUp(t *testing.T) {
	leak.Check(t)
	rec := newRecorder[int]()
	taken, resume := make(chan struct{}), make(chan struct{})
	letBegin := sync.OnceFunc(func() { close(resume) })
	var started, dropped atomic.Bool
	p := crew.New(1, crew.WithHooks(crew.Hooks{
		TaskStart: func(crew.TaskEvent) {
			if !started.Swap(true) { // the flusher: taken, begins late
				close(taken)
				<-resume
			}
		},
		Drop: func(ev crew.TaskEvent) {
			if ev.Err == crew.ErrStopped && !dropped.Swap(true) {
				// poolGaveUp's replacement, refused: let the late
				// flusher begin and take the batch first.
				letBegin()
				rec.waitStarted(t)
			}
		},
	}))
	flush := func(ctx context.Context, items []int) error {
		letBegin() // a replacement that flushes without the pool: let the late one begin now
		return rec.flush(ctx, items)
	}
	b := New(flush, WithPool(p), WithMaxItems(1))
	if err := b.Add(context.Background(), 1); err != nil { // seals: a flusher
		t.Fatal(err)
	}
	receive(t, taken)
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	p.Shutdown(short) // gives up while the flusher is held in TaskStart
	if got := rec.next(t); len(got) != 1 || got[0] != 1 {
		t.Fatalf("flushed %v, want [1]", got)
	}
	closeWithin(t, b, "after the late flusher")
}

// The bounds that mean "no bound" work: WithMaxConcurrentFlushes(math.MaxInt)
// must not make New panic (by sizing a slice by it), and
// WithMaxPending(math.MaxInt) with one item a batch must not overflow the
// count of slices kept for reuse, so that some still are.
func TestUnboundedLimits(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("New(WithMaxConcurrentFlushes(math.MaxInt)) panicked: %v", v)
			}
		}()
		b := New(func(context.Context, []int) error { return nil }, WithMaxConcurrentFlushes(math.MaxInt))
		b.Add(ctx, 1)
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	b := New(func(context.Context, []int) error { return nil },
		WithMaxItems(1), WithMaxPending(math.MaxInt, Block))
	defer b.Close(ctx)
	for i := range 10 {
		b.Add(ctx, i)
		if err := b.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.mu.Lock()
	free, maxFree := len(b.free), b.maxFree
	b.mu.Unlock()
	if free == 0 || maxFree != maxFreeBatches {
		t.Fatalf("after 10 flushed batches %d slices kept for reuse, at most %d", free, maxFree)
	}
}

// queuedBatches returns the number of sealed batches waiting for a flusher
// and the capacity of their slices in all.
func queuedBatches[T any](b *Batcher[T]) (n, capacity int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.ready[b.head:] {
		capacity += cap(s.items)
	}
	return len(b.ready) - b.head, capacity
}

// DropOldest finishes a sealed batch that its drops empty: while the
// flushes are stalled, the queue holds no more batches than the pending
// items fill. Otherwise every emptied batch would stay queued with its
// slice, and each Add would scan them all for the oldest item.
func TestDropOldestFinishesTheBatchesItEmpties(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	b := New(rec.flush, WithMaxItems(2), WithMaxWait(time.Hour), WithMaxPending(6, DropOldest),
		WithErrorHandler(func(context.Context, []int, error) {}))
	b.Add(ctx, 0)
	b.Add(ctx, 1) // [0 1] is being flushed, held
	rec.waitStarted(t)
	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(ctx) }() // waits for the batches emptied below
	for i := 2; i < 1000; i++ {
		b.Add(ctx, i)
	}
	if n, _ := queuedBatches(b); n > 2 {
		t.Fatalf("%d batches queued for 4 pending items of 2 a batch", n)
	}
	release()
	if err := receive(t, flushed); err != nil {
		t.Fatal(err)
	}
	closeWithin(t, b, "after the drops")
	if s := b.Stats(); s.Dropped != 994 || s.Flushed != 6 || !slices.Equal(rec.all, []int{0, 1, 996, 997, 998, 999}) {
		t.Fatalf("flushed %v, stats %+v; want [0 1 996 997 998 999], 994 dropped", rec.all, s)
	}
}

// A batch sealed small while it has to wait for a flush slot holds a slice
// the size of its items, not of a full batch, so that the bound on pending
// items bounds memory too: otherwise a few thousand pending items, each
// sealed alone while the flushes are stalled, would each hold a slice of a
// full batch.
func TestSmallBatchesWaitingForAFlushHoldOnlyTheirItems(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	rec := newRecorder[int]()
	release := rec.hold()
	defer release()
	b := New(rec.flush, WithMaxItems(1000), WithMaxWait(time.Hour))
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for i := range 100 {
		b.Add(ctx, i)
		b.Flush(gone) // seals the batch of one, as the timer would
	}
	rec.waitStarted(t) // the first batch is being flushed; the others wait
	n, capacity := queuedBatches(b)
	if n != 99 || capacity > 4*n {
		t.Fatalf("%d batches of one item queued, with slices of %d items in all", n, capacity)
	}
	release()
	closeWithin(t, b, "after the small batches")
	if !slices.Equal(rec.all, seq(0, 100)) {
		t.Fatalf("flushed %v", rec.all)
	}
}

// On a shared pool built WithNonBlocking whose queue is full, the Add that
// seals a batch does not run the flush itself: the flusher goes on a
// goroutine of its own. Otherwise Add would run it, and every batch other
// producers sealed meanwhile, ignoring its ctx.
func TestAddOnAFullNonBlockingPoolDoesNotRunTheFlush(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	p := crew.New(1, crew.WithQueueSize(1), crew.WithNonBlocking())
	defer p.Stop()
	hold, started := make(chan struct{}), make(chan struct{})
	unhold := sync.OnceFunc(func() { close(hold) })
	defer unhold()
	p.Go(func() { close(started); <-hold })
	receive(t, started)
	if err := p.Go(func() {}); err != nil { // fills the queue
		t.Fatal(err)
	}
	rec := newRecorder[int]()
	release := rec.hold()
	defer release()
	b := New(rec.flush, WithPool(p), WithMaxItems(1))
	added := make(chan error, 1)
	go func() { added <- b.Add(ctx, 1) }() // seals [1]; the pool refuses its flusher
	rec.waitStarted(t)
	if err := receive(t, added); err != nil {
		t.Fatal(err)
	}
	release()
	unhold()
	closeWithin(t, b, "after the flush")
	if !slices.Equal(rec.all, []int{1}) {
		t.Fatalf("flushed %v, want [1]", rec.all)
	}
}

// An Add that drops an item for DropOldest and seals a batch starts the
// batch's flush before it hands the dropped item to the error handler, so
// that the flush does not wait for the handler while a flush slot is free.
func TestDropHandOverDoesNotHoldBackTheFlushOfTheBatchSealed(t *testing.T) {
	leak.Check(t)
	ctx := context.Background()
	firstStarted, first, flushed := make(chan struct{}), make(chan struct{}), make(chan []int, 2)
	flush := func(_ context.Context, items []int) error {
		if items[0] == 1 {
			close(firstStarted)
			<-first // the first batch holds one of the two slots
		}
		flushed <- slices.Clone(items)
		return nil
	}
	inHandler, handlerDone := make(chan struct{}), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(handlerDone); close(first) })
	defer letGo()
	b := New(flush, WithMaxItems(100), WithMaxBytes(3, func(int) int { return 1 }), WithMaxWait(time.Hour),
		WithMaxConcurrentFlushes(2), WithMaxPending(5, DropOldest),
		WithErrorHandler(func(context.Context, []int, error) { close(inHandler); <-handlerDone }))
	for i := 1; i <= 3; i++ {
		b.Add(ctx, i) // seals [1 2 3]
	}
	receive(t, firstStarted)
	b.Add(ctx, 4)
	b.Add(ctx, 5)    // [4 5] open
	go b.Add(ctx, 6) // drops 4, seals [5 6]
	receive(t, inHandler)
	if got := receive(t, flushed); !slices.Equal(got, []int{5, 6}) {
		t.Fatalf("flushed %v, want [5 6]", got)
	}
	letGo()
	closeWithin(t, b, "after the drop")
}

// Close reports the outcome of its batches, not ctx.Err(), when ctx has
// ended but every batch has finished by the time Close would give up: it
// gives up on nothing then.
func TestCloseReportsTheOutcomeWhenTheDrainEndsAsCtxEnds(t *testing.T) {
	leak.Check(t)
	for _, tc := range []struct {
		name   string
		result error // of the flush
	}{{"flushed", nil}, {"failed", errBoom}} {
		t.Run(tc.name, func(t *testing.T) {
			leak.Check(t)
			started, release := make(chan struct{}), make(chan struct{})
			flush := func(context.Context, []int) error {
				close(started)
				<-release
				return tc.result
			}
			h, handedCh := handler[int]()
			b := New(flush, WithMaxItems(1), WithMaxWait(time.Hour), WithErrorHandler(h))
			if err := b.Add(context.Background(), 1); err != nil { // sealed and flushed at once
				t.Fatal(err)
			}
			receive(t, started)
			// Close finds its ctx ended and the flush under way; before it
			// gives up, the flush ends and the drain completes.
			b.giveUpHook = func() {
				close(release)
				receive(t, b.drained)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := b.Close(ctx)
			switch {
			case tc.result == nil && err != nil:
				t.Fatalf("Close = %v, want nil: the batch was flushed", err)
			case tc.result != nil && (!errors.Is(err, errBoom) || errors.Is(err, context.Canceled)):
				t.Fatalf("Close = %v, want the flush error, not ctx's", err)
			}
			if tc.result != nil {
				if got := receive(t, handedCh); !slices.Equal(got.items, []int{1}) || !errors.Is(got.err, errBoom) {
					t.Fatalf("handed %v, %v; want [1], errBoom", got.items, got.err)
				}
			}
			if len(handedCh) != 0 {
				t.Fatalf("error handler called again: %v", <-handedCh)
			}
			if s := b.Stats(); s.Pending != 0 || s.InFlight != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// Flush waits for batches, not for the hand-over of an item DropOldest
// dropped: it returns while the error handler still has that item.
func TestFlushDoesNotWaitForADropHandOver(t *testing.T) {
	leak.Check(t)
	b, flushed, release, added := dropHandOverUnderWay(t)
	ctx := context.Background()
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if got := receive(t, flushed); !slices.Equal(got, []int{2}) {
		t.Fatalf("Flush flushed %v, want [2]", got)
	}
	if s := b.Stats(); s.Dropped != 1 || s.Pending != 0 || s.Flushed != 1 {
		t.Errorf("stats %+v", s)
	}
	close(release)
	if err := receive(t, added); err != nil {
		t.Fatal(err)
	}
	closeWithin(t, b, "after the hand-over")
}
