package batch_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	"github.com/gocrew/crew/internal/leak"
)

// FuzzBatcher is a model-based test of Batcher. The input is a program: a
// configuration (batch size, byte bound, wait, concurrent flushes, retries,
// the pending bound and its policy or none, how the error handler adds
// items back) and a list of operations (Add, with a deadline or without,
// TryAdd, Flush and Close, with a deadline or without, Stats, a yield)
// split over up to three goroutines that run them at the same time. Each
// item carries what its batch's first flush attempt does: succeed, fail,
// panic, or block briefly (until its context ends). The error handler
// adds back with TryAdd, at most twice each, all the items it gets, the
// odd ones, or none. A final Close ends every program. Nothing in a
// program can block for ever.
//
// The model checks, while the program runs and after the final Close:
//
//   - every item accepted (by Add, TryAdd, or a TryAdd in the handler) is
//     flushed exactly once, or handed to the error handler exactly once as
//     failed or dropped, and an item refused is neither;
//   - the error handler is never called from inside itself, always with a
//     live context, with ErrDropped only under DropOldest and otherwise
//     with the error of a failed flush;
//   - each call returns an error it is documented to return, and only in
//     the state where it may (ErrClosed once Close has begun, ErrFull only
//     under Fail, a context's error only for a context that ends, a false
//     TryAdd only at a bound or once closed);
//   - a Flush returns once the items its caller added before are flushed
//     or handed over (but for a dropped item on its way to the handler),
//     a Close once they all are, and no flush call begins after it;
//   - Stats match the model's counts, and nothing is pending after Close;
//   - every call returns, and no goroutine survives (leak.Check).
//
// The seeds below run with `go test`; to search for new failures:
//
//	go test -run '^$' -fuzz FuzzBatcher -fuzztime 3000x ./batch
func FuzzBatcher(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x00\x01\x10\x05\x21\x06\x02\x0a\x00"))                                                     // the default bound, failing flushes
	f.Add([]byte("\x05\x0f\x05\x02\x00\x02\x10\x03\x21\x07\x01\x05\x00\x01\x11\x0a\x20\x02\x0b\x01\x22\x0c"))                 // DropOldest at 4, re-add all, 3 actors
	f.Add([]byte("\x2a\x0f\x09\x01\x00\x0d\x10\x0e\x00\x05\x10\x06\x00\x0f\x11\x0b\x00\x03\x0a\x00\x01\x02"))                 // DropOldest at 4, byte bound, retries, re-add odd
	f.Add([]byte("\x09\x06\x01\x01\x00\x0d\x10\x09\x00\x01\x10\x0e\x00\x0e\x11\x02\x1f\x0b\x00\x0f\x10\x03"))                 // Fail at 2, retries
	f.Add([]byte("\x04\x85\x0b\x02\x00\x03\x10\x03\x20\x03\x01\x0e\x11\x0f\x12\x0a\x21\x07"))                                 // unbounded, early Close with a deadline
	f.Add([]byte("\x00\x05\x03\x00\x00\x1b\x00\x1b\x00\x1b\x00\x1b\x00\x37\x0a\x00"))                                         // Block at 2, Adds with deadlines over blocked flushes
	f.Add([]byte("\x10\x03\x06\x02\x00\x07\x10\x07\x20\x07\x01\x03\x11\x03\x21\x03\x0f\x01\x1a\x00\x2a\x01\x0f\x02\x1f\x00")) // DropOldest at 1, everyone closes
	f.Fuzz(func(t *testing.T, data []byte) {
		leak.Check(t)
		p := fbDecode(data)
		m := fbRun(t, p)
		if testing.Verbose() {
			t.Logf("%s: accepted %d, flushed %d, failed %d, dropped %d, refused %d; %d flush calls",
				p, m.sum(&m.accepted), m.sum(&m.flushed), m.sum(&m.failed), m.sum(&m.dropped), m.refused.Load(), m.calls.Load())
		}
	})
}

// Item kinds: what the first flush attempt of a batch does, by its first item.
const (
	fbOK = iota
	fbFail
	fbPanic
	fbBlock
)

// Re-add modes of the error handler.
const (
	fbReAddNone = iota
	fbReAddAll
	fbReAddOdd
)

const (
	fbMaxOps     = 48
	fbMaxItems   = fbMaxOps*4 + 1
	fbMaxReAdds  = 2
	fbDeadline   = 10 * time.Second
	fbPendingOff = 0 // no WithMaxPending: the default bound, with Block
)

var (
	errFB      = errors.New("fuzz: flush error")
	errFBPanic = errors.New("fuzz: flush panic")
	fbWaits    = [4]time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond, time.Hour}
)

type fbOp struct{ code, arg byte }

type fbProgram struct {
	maxItems, flushes, attempts int
	maxBytes                    int // 0: none
	maxWait                     time.Duration
	pending                     int // 0: the default bound
	policy                      batch.FullPolicy
	reAdd                       int
	actors                      [][]fbOp
}

func (p fbProgram) String() string {
	n := 0
	for _, a := range p.actors {
		n += len(a)
	}
	return fmt.Sprintf("items=%d flushes=%d attempts=%d bytes=%d wait=%v pending=%d policy=%v readd=%d actors=%d ops=%d",
		p.maxItems, p.flushes, p.attempts, p.maxBytes, p.maxWait, p.pending, p.policy, p.reAdd, len(p.actors), n)
}

// fbDecode turns any byte string into a valid program: 4 header bytes, then
// two bytes per operation (actor<<4 | code, argument). Missing bytes read
// as zero.
func fbDecode(data []byte) fbProgram {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	h0, h1, h2, h3 := at(0), at(1), at(2), at(3)
	p := fbProgram{
		maxItems: 1 + int(h0%4),
		flushes:  1 + int(h0>>2)%2,
		attempts: 1 + int(h0>>3)%3,
		maxWait:  fbWaits[h2%4],
		reAdd:    int(h2>>2) % 3,
		actors:   make([][]fbOp, 1+int(h3%3)),
	}
	if h0&0x20 != 0 {
		p.maxBytes = 2 + int(h0>>6)
	}
	if mode := h1 % 4; mode != 0 {
		p.policy = batch.FullPolicy(mode - 1)
		p.pending = 1 + int(h1>>2)%8
		if h1&0x80 != 0 {
			p.pending = math.MaxInt
		}
	}
	if p.pending != fbPendingOff && p.pending < p.maxItems && p.maxWait == time.Hour {
		// Only the timer seals a batch at the bound (see WithMaxPending):
		// an Add without a deadline would wait for an hour.
		p.maxWait = fbWaits[2]
	}
	for i := 4; i+1 < len(data) && i < 4+2*fbMaxOps; i += 2 {
		a := int(data[i]>>4) % len(p.actors)
		p.actors[a] = append(p.actors[a], fbOp{code: data[i] & 15, arg: data[i+1]})
	}
	return p
}

type fbModel struct {
	t *testing.T
	p fbProgram
	b *batch.Batcher[int]

	next   atomic.Int64 // the next item
	kind   [fbMaxItems]uint8
	tries  [fbMaxItems]atomic.Int32 // flush attempts of batches it was first in
	reAdds [fbMaxItems]atomic.Int32

	accepted, flushed, failed, dropped [fbMaxItems]atomic.Int32
	refused                            atomic.Int64
	calls                              atomic.Int64 // flush calls
	retries                            atomic.Int64 // flush calls after the first of a batch

	closeBegun atomic.Bool // a Close was called
	mayGiveUp  atomic.Bool // a Close with a deadline was called
	closedOK   atomic.Bool // a Close returned without giving up
	gaveUp     atomic.Bool // a Close gave up: flush calls may still run
	progress   chan struct{}

	lateMu sync.Mutex
	late   []int // items not finished when a Flush of their adder returned

	logMu sync.Mutex
	ended bool
}

// errorf reports a failure. Goroutines of a program that hung may still
// run after the test has ended, when t must no longer be used.
func (m *fbModel) errorf(format string, args ...any) {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if !m.ended {
		m.t.Errorf("%s: "+format, append([]any{m.p}, args...)...)
	}
}

func (m *fbModel) sum(a *[fbMaxItems]atomic.Int32) int {
	n := 0
	for i := range a {
		n += int(a[i].Load())
	}
	return n
}

func (m *fbModel) signal() {
	select {
	case m.progress <- struct{}{}:
	default:
	}
}

func (m *fbModel) done(it int) int32 {
	return m.flushed[it].Load() + m.failed[it].Load() + m.dropped[it].Load()
}

func (m *fbModel) flush(ctx context.Context, items []int) error {
	m.calls.Add(1)
	if m.closedOK.Load() {
		m.errorf("a flush call began after Close returned")
	}
	if len(items) == 0 {
		m.errorf("an empty batch")
		return nil
	}
	first := items[0]
	try := m.tries[first].Add(1)
	if try > 1 {
		m.retries.Add(1)
	}
	switch m.kind[first] {
	case fbFail:
		if try == 1 {
			return errFB
		}
	case fbPanic:
		if try == 1 {
			panic(errFBPanic)
		}
	case fbBlock:
		t := time.NewTimer(200 * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, it := range items {
		m.flushed[it].Add(1)
	}
	m.signal()
	return nil
}

// handle is the error handler.
func (m *fbModel) handle(ctx context.Context, items []int, err error) {
	buf := make([]byte, 64<<10)
	if n := strings.Count(string(buf[:runtime.Stack(buf, false)]), ".(*fbModel).handle("); n != 1 {
		m.errorf("the error handler was called from inside itself (%d calls deep)", n)
	}
	if ctx.Err() != nil {
		m.errorf("the error handler got a context that ended: %v", ctx.Err())
	}
	drop := errors.Is(err, batch.ErrDropped)
	var pe *crew.PanicError
	switch {
	case drop && m.p.policy != batch.DropOldest:
		m.errorf("an item dropped under %v", m.p.policy)
	case drop, errors.Is(err, errFB), errors.Is(err, context.Canceled) && m.mayGiveUp.Load(),
		errors.Is(err, batch.ErrClosed) && m.mayGiveUp.Load():
	case errors.As(err, &pe):
		if pe.Value != errFBPanic {
			m.errorf("the error handler got a panic %v", pe.Value)
		}
	default:
		m.errorf("the error handler got %v", err)
	}
	for _, it := range items {
		if drop {
			m.dropped[it].Add(1)
		} else {
			m.failed[it].Add(1)
		}
	}
	m.signal()
	for _, it := range items {
		if m.p.reAdd == fbReAddNone || m.p.reAdd == fbReAddOdd && it%2 == 0 || m.reAdds[it].Add(1) > fbMaxReAdds {
			continue
		}
		if m.b.TryAdd(it) {
			m.accepted[it].Add(1)
		} else {
			m.refused.Add(1)
		}
	}
}

func fbRun(t *testing.T, p fbProgram) *fbModel {
	m := &fbModel{t: t, p: p, progress: make(chan struct{}, 1)}
	t.Cleanup(func() {
		m.logMu.Lock()
		m.ended = true
		m.logMu.Unlock()
	})
	opts := []batch.Option{
		batch.WithMaxItems(p.maxItems),
		batch.WithMaxWait(p.maxWait),
		batch.WithMaxConcurrentFlushes(p.flushes),
		batch.WithRetry(crew.Retry{Attempts: p.attempts, Delay: 0, MaxDelay: 100 * time.Microsecond}),
		batch.WithErrorHandler(m.handle),
	}
	if p.maxBytes > 0 {
		opts = append(opts, batch.WithMaxBytes(p.maxBytes, func(it int) int { return 1 + it%3 }))
	}
	if p.pending != fbPendingOff {
		opts = append(opts, batch.WithMaxPending(p.pending, p.policy))
	}
	m.b = batch.New(m.flush, opts...)

	finished := returnsWithin(fbDeadline, func() {
		var wg sync.WaitGroup
		for _, ops := range p.actors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.actor(ops)
			}()
		}
		wg.Wait()
		m.close(0, nil)
		m.awaitItems()
	})
	if !finished {
		t.Fatalf("%s: the program did not return within %v; stats %+v; goroutines:\n\n%s", p, fbDeadline, m.b.Stats(), leak.Dump())
	}
	m.check()
	return m
}

func returnsWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// newItems makes n items of the given kind.
func (m *fbModel) newItems(n int, kind uint8) []int {
	items := make([]int, 0, n)
	for range n {
		it := int(m.next.Add(1) - 1)
		m.kind[it] = kind
		items = append(items, it)
	}
	return items
}

// fbContext returns a context that ends after steps%8 times 300µs if flag
// is set, and the background context otherwise; and whether it ends.
func fbContext(flag bool, steps byte) (context.Context, context.CancelFunc, bool) {
	if !flag {
		return context.Background(), func() {}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(steps%8)*300*time.Microsecond)
	return ctx, cancel, true
}

func (m *fbModel) actor(ops []fbOp) {
	var mine []int // items this actor added, for Flush and Close's checks
	for _, op := range ops {
		kind, count := op.arg&3, 1+int(op.arg>>2)&3
		switch code := op.code; {
		case code <= 5: // Add
			ctx, cancel, ends := fbContext(op.arg&0x10 != 0, op.arg>>5)
			for _, it := range m.newItems(count, kind) {
				err := m.b.Add(ctx, it)
				m.checkAdd(err, ends)
				if err == nil {
					m.accepted[it].Add(1)
					mine = append(mine, it)
				} else {
					m.refused.Add(1)
				}
			}
			cancel()
		case code <= 9: // TryAdd
			for _, it := range m.newItems(count, kind) {
				if m.b.TryAdd(it) {
					m.accepted[it].Add(1)
					mine = append(mine, it)
					continue
				}
				m.refused.Add(1)
				if m.p.pending == math.MaxInt && !m.closeBegun.Load() {
					m.errorf("TryAdd refused an item without a bound, before Close")
				}
			}
		case code <= 12: // Flush
			ctx, cancel, ends := fbContext(op.arg&1 != 0, op.arg>>1)
			m.flushCall(ctx, ends, mine)
			cancel()
		case code == 13: // Stats
			s := m.b.Stats()
			if s.Pending < 0 || s.InFlight < 0 || s.Flushed+s.Failed+s.Dropped > s.Added {
				m.errorf("Stats while running: %+v", s)
			}
		case code == 14:
			for range 1 + int(op.arg%4) {
				runtime.Gosched()
			}
		default: // Close
			var d time.Duration
			if op.arg&1 != 0 {
				d = time.Duration((op.arg>>1)%8) * 300 * time.Microsecond
			}
			m.close(d, mine)
		}
	}
}

func (m *fbModel) checkAdd(err error, ends bool) {
	switch {
	case err == nil:
	case err == batch.ErrClosed:
		if !m.closeBegun.Load() {
			m.errorf("Add = ErrClosed before Close")
		}
	case err == batch.ErrFull:
		if m.p.policy != batch.Fail || m.p.pending == fbPendingOff || m.p.pending == math.MaxInt {
			m.errorf("Add = ErrFull under %v, bound %d", m.p.policy, m.p.pending)
		}
	case errors.Is(err, context.DeadlineExceeded):
		if !ends || m.p.policy == batch.Fail && m.p.pending != fbPendingOff || m.p.pending == math.MaxInt {
			m.errorf("Add = %v (its context ends: %v; %v, bound %d)", err, ends, m.p.policy, m.p.pending)
		}
	default:
		m.errorf("Add = %v", err)
	}
}

// flushError reports whether err is one a Flush or Close may return for
// failed batches.
func (m *fbModel) flushError(err error) bool {
	var pe *crew.PanicError
	return errors.Is(err, errFB) || errors.As(err, &pe) ||
		m.mayGiveUp.Load() && (errors.Is(err, context.Canceled) || errors.Is(err, batch.ErrClosed))
}

func (m *fbModel) flushCall(ctx context.Context, ends bool, mine []int) {
	err := m.b.Flush(ctx)
	switch {
	case err == batch.ErrClosed:
		if !m.closeBegun.Load() {
			m.errorf("Flush = ErrClosed before Close")
		}
		return
	case err == context.DeadlineExceeded:
		if !ends {
			m.errorf("Flush = %v without a deadline", err)
		}
		return
	case err == nil, m.flushError(err):
	default:
		m.errorf("Flush = %v", err)
		return
	}
	// Every item this actor added before the call is finished, but for one
	// that DropOldest dropped and that is on its way to the handler:
	// judged at the end.
	for _, it := range mine {
		if m.done(it) == 0 {
			m.lateMu.Lock()
			m.late = append(m.late, it)
			m.lateMu.Unlock()
		}
	}
}

// close calls Close, with a deadline d unless 0, and checks that the
// items the caller added are finished when it returns without giving up.
func (m *fbModel) close(d time.Duration, mine []int) {
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		m.mayGiveUp.Store(true)
	}
	m.closeBegun.Store(true)
	err := m.b.Close(ctx)
	switch {
	case err == batch.ErrClosed:
		return
	case errors.Is(err, context.DeadlineExceeded) && d > 0:
		m.gaveUp.Store(true)
		return
	case err == nil, m.flushError(err):
	default:
		m.errorf("Close = %v", err)
		return
	}
	m.closedOK.Store(true)
	for _, it := range mine {
		if m.done(it) == 0 {
			m.errorf("item %d: Close returned %v before it was flushed or handed over", it, err)
		}
	}
	if s := m.b.Stats(); s.Pending != 0 || s.InFlight != 0 {
		m.errorf("Close returned %v; stats %+v", err, s)
	}
}

// awaitItems waits until every item accepted is finished as often, and
// the Batcher's counts agree: after a Close that gave up, flush calls and
// handler calls (whose TryAdd may have accepted an item just before the
// Close) may still be under way.
func (m *fbModel) awaitItems() {
	deadline := time.After(fbDeadline / 2)
	for {
		accepted := m.sum(&m.accepted)
		done := m.sum(&m.flushed) + m.sum(&m.failed) + m.sum(&m.dropped)
		s := m.b.Stats()
		if done == accepted && s.Added == uint64(accepted) && s.Pending == 0 && s.InFlight == 0 &&
			s.Flushed+s.Failed+s.Dropped == s.Added {
			return
		}
		select {
		case <-m.progress:
		case <-time.After(100 * time.Microsecond): // the counts settle without a signal
		case <-deadline:
			m.errorf("items not finished: accepted %d, finished %d; stats %+v", accepted, done, s)
			return
		}
	}
}

func (m *fbModel) check() {
	n := int(m.next.Load())
	var accepted, flushed, failed, dropped uint64
	for it := range n {
		a, f, h, d := m.accepted[it].Load(), m.flushed[it].Load(), m.failed[it].Load(), m.dropped[it].Load()
		if f+h+d != a {
			m.errorf("item %d: accepted %d times, flushed %d, failed %d, dropped %d", it, a, f, h, d)
		}
		accepted += uint64(a)
		flushed += uint64(f)
		failed += uint64(h)
		dropped += uint64(d)
	}
	for _, it := range m.late {
		if m.dropped[it].Load() == 0 {
			m.errorf("item %d: a Flush by its adder returned before it was flushed or handed over", it)
		}
	}
	s := m.b.Stats()
	if s.Added != accepted || s.Flushed != flushed || s.Failed != failed || s.Dropped != dropped ||
		s.Pending != 0 || s.InFlight != 0 || s.Latency.Count != uint64(m.calls.Load()) || s.Retries > uint64(m.retries.Load()) {
		m.errorf("stats %+v; the model: accepted %d, flushed %d, failed %d, dropped %d, %d flush calls",
			s, accepted, flushed, failed, dropped, m.calls.Load())
	}
}
