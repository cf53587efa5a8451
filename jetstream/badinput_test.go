package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
)

// errAny, as the error a bad-input case wants, accepts any non-nil error:
// the case's error comes from a package that does not use crew.ErrInvalid.
var errAny = errors.New("any error")

// errFailedNow stands for a case that stopped with t.FailNow.
var errFailedNow = errors.New("FailNow")

// alwaysInject is a HeaderInjector that sets a header whatever ctx.
func alwaysInject(_ context.Context, h nats.Header) { h.Set("K", "v") }

// marshalPanics is JSON, except that Marshal panics.
type marshalPanics struct{ JSON }

func (marshalPanics) Marshal(any) ([]byte, error) { panic("codec exploded") }

// errNoPanic is what panicValue returns when its function did not panic.
var errNoPanic = errors.New("no panic")

// panicValue calls f and returns the error it panicked with: a
// documented panic at construction.
func panicValue(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if err, _ = v.(error); err == nil {
				err = fmt.Errorf("panic with a non-error: %v", v)
			}
		}
	}()
	f()
	return errNoPanic
}

// TestBadInputs calls every exported function and method of the package
// with zero values, nil pointers, contexts and funcs, negative and maximal
// sizes and durations, and after the end of a Consumer's Run or a
// Publisher's Close. Each call must return (or, at construction, panic
// with) an error wrapping crew.ErrInvalid or the package's documented
// error, or work; a nil dereference, any other panic, or a call that does
// not return in time fails the case.
func TestBadInputs(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	pool := crew.New(2)
	defer pool.Stop()
	nop := func(context.Context, Msg[item]) error { return nil }
	// Each case's consumer is a durable of its own that gets only the
	// messages published after it was created, each with an id not used
	// before.
	var durables, sent atomic.Int32
	durableWith := func(t *testing.T, cfg natsjs.ConsumerConfig) natsjs.Consumer {
		cfg.DeliverPolicy = natsjs.DeliverNewPolicy
		return createDurable(t, js, "JOBS", "c"+strconv.Itoa(int(durables.Add(1))), cfg)
	}
	durable := func(t *testing.T) natsjs.Consumer { return durableWith(t, natsjs.ConsumerConfig{}) }
	newConsumer := func(t *testing.T, h Handler[item], o ...ConsumerOption) *Consumer[item] {
		return NewConsumer(durable(t), pool, h, opts(o...)...)
	}
	// runs runs c on 3 fresh messages until they are acked, then stops
	// it, failing if that takes longer than a few seconds.
	runs := func(t *testing.T, c *Consumer[item]) error {
		acked := c.Stats().Acked
		from := int(sent.Add(3)) - 3
		publish(t, js, "jobs.new", items(from, from+3)...)
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- c.Run(runCtx) }()
		waitFor(t, 5*time.Second, "3 messages acked", func() bool { return c.Stats().Acked == acked+3 })
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return errors.New("Run did not return within 5s of its context ending")
		}
	}
	// runsOne runs c on a fresh message until its stats satisfy done,
	// then stops it and returns Run's error.
	runsOne := func(t *testing.T, c *Consumer[item], what string, done func(Stats) bool) error {
		from := int(sent.Add(1)) - 1
		publish(t, js, "jobs.new", item{ID: from})
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- c.Run(runCtx) }()
		waitFor(t, 5*time.Second, what, func() bool { return done(c.Stats()) })
		cancel()
		return <-errc
	}
	// refused runs c on a fresh message and returns the error Run stops
	// with, which it must do on its own within a few seconds.
	refused := func(t *testing.T, c *Consumer[item]) error {
		from := int(sent.Add(1)) - 1
		publish(t, js, "jobs.new", item{ID: from})
		runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := c.Run(runCtx)
		if runCtx.Err() != nil {
			return fmt.Errorf("Run did not stop on its own: %w", err)
		}
		return err
	}
	// runsWith runs a new consumer built with o as runs does.
	runsWith := func(t *testing.T, o ...ConsumerOption) error { return runs(t, newConsumer(t, nop, o...)) }
	newPublisher := func(o ...PublisherOption) *Publisher[item] {
		return NewPublisher(js, "jobs.new", itemID, o...)
	}
	closedPublisher := func(t *testing.T) *Publisher[item] {
		p := newPublisher()
		if err := p.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return p
	}
	// published adds an item to a Publisher built with o and closes it.
	published := func(id func(item) string, o ...PublisherOption) error {
		var handled error
		p := NewPublisher(js, "jobs.new", id, append(o, WithBatch(
			batch.WithRetry(crew.Retry{Attempts: 1, Delay: time.Millisecond, MaxDelay: time.Millisecond}),
			batch.WithErrorHandler(func(_ context.Context, _ []item, err error) { handled = err }),
		))...)
		if err := p.Add(ctx, item{ID: 1}); err != nil {
			return err
		}
		return errors.Join(p.Close(ctx), handled)
	}

	newQueue := func() *Queue[item] { return NewQueue[item](js, "jobs.new") }
	// enqueued enqueues an item to a Queue of the stream, which allows
	// neither schedules nor message TTLs, with o.
	enqueued := func(o EnqueueOption) func(*testing.T) error {
		return func(*testing.T) error {
			_, err := newQueue().Enqueue(ctx, item{ID: -1}, o)
			return err
		}
	}
	// scheduled schedules an item under name with spec and o.
	scheduled := func(name, spec string, o ...EnqueueOption) func(*testing.T) error {
		return func(*testing.T) error {
			_, err := newQueue().Schedule(ctx, name, spec, item{}, o...)
			return err
		}
	}

	cases := []struct {
		name string
		call func(t *testing.T) error
		want error // errors.Is target; nil: the call must succeed
	}{
		// NewConsumer and its options.
		{"NewConsumer nil consumer", func(*testing.T) error {
			return panicValue(func() { NewConsumer(nil, pool, nop) })
		}, crew.ErrInvalid},
		{"NewConsumer nil pool", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, nil, nop) })
		}, crew.ErrInvalid},
		{"NewConsumer zero pool", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, &crew.Pool{}, nop) })
		}, crew.ErrInvalid},
		{"NewConsumer nil handler", func(*testing.T) error {
			return panicValue(func() { NewConsumer[item](fakeConsumer{}, pool, nil) })
		}, crew.ErrInvalid},
		{"NewConsumer nil option", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, pool, nop, WithDoubleAck(), nil) })
		}, crew.ErrInvalid},
		{"NewConsumer nil *Pool executor", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, (*crew.Pool)(nil), nop) })
		}, crew.ErrInvalid},
		{"NewConsumer nil Subpool", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, (*crew.Subpool)(nil), nop) })
		}, crew.ErrInvalid},
		{"NewConsumer zero Subpool", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, &crew.Subpool{}, nop) })
		}, crew.ErrInvalid},
		{"NewConsumer nil RateLimited", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, (*crew.RateLimited)(nil), nop) })
		}, crew.ErrInvalid},
		{"WithKeyed(nil, key)", consumerOptionPanics(WithKeyed((*crew.Keyed[string])(nil), keyOf)), crew.ErrInvalid},
		{"WithKeyed(k, nil)", consumerOptionPanics(WithKeyed[item](crew.NewKeyed[string](pool), nil)), crew.ErrInvalid},
		{"WithPriority(nil, prio)", consumerOptionPanics(WithPriority(nil, func(Msg[item]) int { return 0 })), crew.ErrInvalid},
		{"WithPriority(p, nil)", consumerOptionPanics(WithPriority[item](crew.NewPriority(pool), nil)), crew.ErrInvalid},
		{"WithKeyed for another message type", consumerOptionPanics(WithKeyed(crew.NewKeyed[string](pool), func(m Msg[string]) string { return m.Value })), crew.ErrInvalid},
		{"WithPriority for another message type", consumerOptionPanics(WithPriority(crew.NewPriority(pool), func(Msg[[]byte]) int { return 0 })), crew.ErrInvalid},
		{"WithKeyed and WithPriority", func(*testing.T) error {
			return panicValue(func() {
				NewConsumer(fakeConsumer{}, pool, nop, WithKeyed(crew.NewKeyed[string](pool), keyOf), WithPriority(crew.NewPriority(pool), func(Msg[item]) int { return 0 }))
			})
		}, crew.ErrInvalid},
		{"WithKeyed and WithPulls(2)", func(*testing.T) error {
			return panicValue(func() {
				NewConsumer(fakeConsumer{}, pool, nop, WithPulls(2), WithKeyed(crew.NewKeyed[string](pool), keyOf))
			})
		}, crew.ErrInvalid},
		{"WithKeyed and WithPulls(1)", func(*testing.T) error {
			NewConsumer(fakeConsumer{}, pool, nop, WithPulls(1), WithKeyed(crew.NewKeyed[string](pool), keyOf))
			return nil
		}, nil},
		{"WithMaxInFlight(-1)", consumerOptionPanics(WithMaxInFlight(-1)), crew.ErrInvalid},
		{"WithMaxInFlight(MinInt)", consumerOptionPanics(WithMaxInFlight(math.MinInt)), crew.ErrInvalid},
		{"WithMaxFetch(-1)", consumerOptionPanics(WithMaxFetch(-1)), crew.ErrInvalid},
		{"WithPulls(-1)", consumerOptionPanics(WithPulls(-1)), crew.ErrInvalid},
		{"WithFetchWait(-1)", consumerOptionPanics(WithFetchWait(-1)), crew.ErrInvalid},
		{"WithFetchWait(MinInt64)", consumerOptionPanics(WithFetchWait(math.MinInt64)), crew.ErrInvalid},
		{"WithDrainTimeout(MinInt64)", consumerOptionPanics(WithDrainTimeout(math.MinInt64)), crew.ErrInvalid},
		{"WithHeartbeat(-1)", consumerOptionPanics(WithHeartbeat(-1)), crew.ErrInvalid},
		{"WithBackoff(nil)", consumerOptionPanics(WithBackoff(nil)), crew.ErrInvalid},
		{"WithDeadLetter(nil, subject)", consumerOptionPanics(WithDeadLetter(nil, "dead")), crew.ErrInvalid},
		{"WithDeadLetter(js, empty)", consumerOptionPanics(WithDeadLetter(js, "")), crew.ErrInvalid},
		{"WithDeadLetter(js, wildcard)", consumerOptionPanics(WithDeadLetter(js, "dead.>")), crew.ErrInvalid},
		{"WithDeadLetter(js, space)", consumerOptionPanics(WithDeadLetter(js, "dead letters")), crew.ErrInvalid},
		{"WithErrorHandler(nil)", consumerOptionPanics(WithErrorHandler(nil)), crew.ErrInvalid},
		{"WithCodec(nil) for a consumer", consumerOptionPanics(WithCodec(nil)), crew.ErrInvalid},
		{"WithContextExtractor(nil)", consumerOptionPanics(WithContextExtractor(nil)), crew.ErrInvalid},
		{"WithJobTimeout(0)", consumerOptionPanics(WithJobTimeout(0)), crew.ErrInvalid},
		{"WithJobTimeout(-1)", consumerOptionPanics(WithJobTimeout(-1)), crew.ErrInvalid},
		{"WithJobTimeout(MinInt64)", consumerOptionPanics(WithJobTimeout(math.MinInt64)), crew.ErrInvalid},

		// Consumer.Run and Stats.
		{"Run on a nil Consumer", func(*testing.T) error { return (*Consumer[item])(nil).Run(ctx) }, crew.ErrInvalid},
		{"Run on a zero Consumer", func(*testing.T) error { return new(Consumer[item]).Run(ctx) }, crew.ErrInvalid},
		{"Run with a nil context", func(t *testing.T) error {
			return newConsumer(t, nop).Run(nil) //nolint:staticcheck // the nil context is the test
		}, crew.ErrInvalid},
		{"Stats of a nil Consumer", func(*testing.T) error {
			if st := (*Consumer[item])(nil).Stats(); st != (Stats{}) {
				return fmt.Errorf("stats %+v, want zeros", st)
			}
			return nil
		}, nil},
		{"Run again after Run returned", func(t *testing.T) error {
			c := newConsumer(t, nop)
			if err := runs(t, c); err != nil {
				return fmt.Errorf("first Run: %w", err)
			}
			return runs(t, c)
		}, nil},
		{"Run after its pool stopped", func(t *testing.T) error {
			stopped := crew.New(1)
			c := NewConsumer(durable(t), stopped, nop, fast...)
			stopped.Stop()
			return c.Run(ctx)
		}, crew.ErrStopped},
		{"Run on a zero RateLimited", func(t *testing.T) error {
			return refused(t, NewConsumer(durable(t), &crew.RateLimited{}, nop, fast...))
		}, crew.ErrInvalid},
		{"Run through a zero Keyed", func(t *testing.T) error {
			return refused(t, newConsumer(t, nop, WithKeyed(&crew.Keyed[string]{}, keyOf)))
		}, crew.ErrInvalid},
		{"Run through a zero Priority", func(t *testing.T) error {
			return refused(t, newConsumer(t, nop, WithPriority(&crew.Priority{}, func(Msg[item]) int { return 0 })))
		}, crew.ErrInvalid},
		{"Run through a Keyed whose key function panics", func(t *testing.T) error {
			sink := &errSink{}
			c := newConsumer(t, nop, WithKeyed(crew.NewKeyed[string](pool), func(Msg[item]) string { panic("no key") }), WithErrorHandler(sink.handle))
			if err := runsOne(t, c, "the message given up", func(st Stats) bool { return st.Terminated == 1 }); err != nil {
				return err
			}
			var pe *crew.PanicError
			if mes := sink.messageErrors(); len(mes) != 1 || !errors.As(mes[0], &pe) || c.Stats().Panicked != 1 {
				return fmt.Errorf("error handler got %v, stats %+v, want the key function's panic", mes, c.Stats())
			}
			return nil
		}, nil},
		// A key that no map can hold is bad data of one message: that
		// message is given up with an error wrapping crew.ErrInvalid, as
		// with a key function that panics, and the run goes on.
		{"Run through a Keyed whose key function returns a key that cannot be hashed", func(t *testing.T) error {
			sink := &errSink{}
			c := newConsumer(t, nop, WithKeyed(crew.NewKeyed[any](pool), func(m Msg[item]) any { return []byte(m.Value.Body) }), WithErrorHandler(sink.handle))
			if err := runsOne(t, c, "the message given up", func(st Stats) bool { return st.Terminated == 1 }); err != nil {
				return err
			}
			return givenUpInvalid(sink, c.Stats())
		}, nil},
		{"Run through a Keyed whose key function returns a NaN", func(t *testing.T) error {
			sink := &errSink{}
			c := newConsumer(t, nop, WithKeyed(crew.NewKeyed[float64](pool), func(Msg[item]) float64 { return math.NaN() }), WithErrorHandler(sink.handle))
			if err := runsOne(t, c, "the message given up", func(st Stats) bool { return st.Terminated == 1 }); err != nil {
				return err
			}
			return givenUpInvalid(sink, c.Stats())
		}, nil},
		{"NewConsumer nil Retrying", func(*testing.T) error {
			return panicValue(func() { NewConsumer(fakeConsumer{}, (*crew.Retrying)(nil), nop) })
		}, crew.ErrInvalid},
		{"WithMaxInFlight, WithMaxFetch and WithPulls at MaxInt", func(t *testing.T) error {
			return runsWith(t, WithMaxInFlight(math.MaxInt), WithMaxFetch(math.MaxInt), WithPulls(math.MaxInt))
		}, nil},
		{"WithMaxFetch(MaxInt) with MaxAckPending unlimited", func(t *testing.T) error {
			cons := durableWith(t, natsjs.ConsumerConfig{MaxAckPending: -1})
			return runs(t, NewConsumer(cons, pool, nop, opts(WithMaxInFlight(math.MaxInt), WithMaxFetch(math.MaxInt))...))
		}, nil},
		{"WithPulls(MaxInt) beyond MaxWaiting", func(t *testing.T) error {
			sink := &errSink{}
			cons := durableWith(t, natsjs.ConsumerConfig{MaxWaiting: 4})
			c := NewConsumer(cons, pool, nop, opts(WithMaxInFlight(math.MaxInt), WithPulls(math.MaxInt), WithErrorHandler(sink.handle))...)
			if err := runs(t, c); err != nil {
				return err
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return errors.Join(sink.errs...)
		}, nil},
		{"WithFetchWait(MaxInt64)", func(t *testing.T) error {
			return runsWith(t, WithFetchWait(math.MaxInt64), WithDrainTimeout(50*time.Millisecond))
		}, nil},
		{"WithDrainTimeout(MaxInt64)", func(t *testing.T) error { return runsWith(t, WithDrainTimeout(math.MaxInt64)) }, nil},
		{"WithDrainTimeout(0)", func(t *testing.T) error { return runsWith(t, WithDrainTimeout(0)) }, nil},
		{"WithHeartbeat(MaxInt64)", func(t *testing.T) error { return runsWith(t, WithHeartbeat(math.MaxInt64)) }, nil},
		{"WithHeartbeat(1ns)", func(t *testing.T) error {
			// Heartbeats come at most every millisecond while a message is
			// held.
			c := newConsumer(t, func(ctx context.Context, m Msg[item]) error {
				t := time.NewTimer(20 * time.Millisecond) // the task's work
				defer t.Stop()
				select {
				case <-t.C:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, WithHeartbeat(time.Nanosecond))
			start := time.Now()
			if err := runs(t, c); err != nil {
				return err
			}
			if n, most := c.Stats().Heartbeats, uint64(3*(time.Since(start)/time.Millisecond+1)); n > most {
				return fmt.Errorf("%d heartbeats, want at most %d, one a millisecond for each of 3 messages", n, most)
			}
			return nil
		}, nil},
		{"WithJobTimeout(MaxInt64)", func(t *testing.T) error { return runsWith(t, WithJobTimeout(math.MaxInt64)) }, nil},
		{"WithJobTimeout(1ns)", func(t *testing.T) error {
			// The handler's context is cancelled as it starts, and the
			// handler abandoned unless it returns at once: either way the
			// message is settled once, and Run returns.
			c := newConsumer(t, func(context.Context, Msg[item]) error { return nil },
				WithJobTimeout(time.Nanosecond), WithBackoff(func(int) time.Duration { return 0 }))
			if err := runsOne(t, c, "the message acked", func(st Stats) bool { return st.Acked == 1 }); err != nil {
				return err
			}
			if st := c.Stats(); st.Nacked != st.Abandoned || st.InFlight != 0 {
				return fmt.Errorf("stats %+v: want a nak for each abandoned handler, nothing in flight", st)
			}
			return nil
		}, nil},
		{"WithBackoff returning MinInt64", func(t *testing.T) error {
			failOnce := func(_ context.Context, m Msg[item]) error {
				if m.Delivery() == 1 {
					return errors.New("first delivery fails")
				}
				return nil
			}
			c := newConsumer(t, failOnce, WithBackoff(func(int) time.Duration { return math.MinInt64 }))
			if err := runs(t, c); err != nil {
				return err
			}
			if st := c.Stats(); st.Nacked != 3 {
				return fmt.Errorf("stats %+v, want the 3 messages handed back once", st)
			}
			return nil
		}, nil},
		{"WithBackoff returning MaxInt64", func(t *testing.T) error {
			sink := &errSink{}
			c := newConsumer(t, func(context.Context, Msg[item]) error { return errors.New("fails") },
				WithBackoff(func(int) time.Duration { return math.MaxInt64 }), WithErrorHandler(sink.handle))
			if err := runsOne(t, c, "the message handed back", func(st Stats) bool { return st.Nacked == 1 }); err != nil {
				return err
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return errors.Join(sink.errs...)
		}, nil},

		// NewPublisher, its options and methods.
		{"NewPublisher nil JetStream", func(*testing.T) error {
			return panicValue(func() { NewPublisher[item](nil, "jobs.new", nil) })
		}, crew.ErrInvalid},
		{"NewPublisher empty subject", func(*testing.T) error {
			return panicValue(func() { NewPublisher[item](js, "", nil) })
		}, crew.ErrInvalid},
		{"NewPublisher wildcard subject", func(*testing.T) error {
			return panicValue(func() { NewPublisher[item](js, "jobs.*", nil) })
		}, crew.ErrInvalid},
		{"NewPublisher subject with a space", func(*testing.T) error {
			return panicValue(func() { NewPublisher[item](js, "jobs new", nil) })
		}, crew.ErrInvalid},
		{"NewPublisher subject with an empty token", func(*testing.T) error {
			return panicValue(func() { NewPublisher[item](js, "jobs..new", nil) })
		}, crew.ErrInvalid},
		{"NewPublisher nil option", func(*testing.T) error {
			return panicValue(func() { newPublisher(nil) })
		}, crew.ErrInvalid},
		{"WithCodec(nil) for a publisher", func(*testing.T) error {
			return panicValue(func() { newPublisher(WithCodec(nil)) })
		}, crew.ErrInvalid},
		{"WithHeaderInjector(nil) for a publisher", func(*testing.T) error {
			return panicValue(func() { newPublisher(WithHeaderInjector(nil)) })
		}, crew.ErrInvalid},
		{"WithHeaderInjector and an empty id", func(*testing.T) error {
			return published(func(item) string { return "" }, WithHeaderInjector(alwaysInject))
		}, crew.ErrInvalid},
		{"WithHeaderInjector and a codec that fails", func(*testing.T) error {
			return published(nil, WithCodec(Bytes{}), WithHeaderInjector(alwaysInject))
		}, crew.ErrInvalid},
		{"WithHeaderInjector and a codec that panics", func(*testing.T) error {
			return published(nil, WithCodec(marshalPanics{}), WithHeaderInjector(alwaysInject))
		}, errAny},
		{"id that panics", func(*testing.T) error {
			return flushPanicked(published(func(item) string { panic("id") }))
		}, nil},
		{"WithHeaderInjector and an id that panics", func(*testing.T) error {
			return flushPanicked(published(func(item) string { panic("id") }, WithHeaderInjector(alwaysInject)))
		}, nil},
		{"WithPublishTimeout(0)", func(*testing.T) error {
			return panicValue(func() { newPublisher(WithPublishTimeout(0)) })
		}, crew.ErrInvalid},
		{"WithPublishTimeout(MinInt64)", func(*testing.T) error {
			return panicValue(func() { newPublisher(WithPublishTimeout(math.MinInt64)) })
		}, crew.ErrInvalid},
		{"WithBatch(nil)", func(*testing.T) error {
			return panicValue(func() { newPublisher(WithBatch(nil)) })
		}, crew.ErrInvalid},
		{"WithPublishTimeout(MaxInt64)", func(*testing.T) error {
			return published(itemID, WithPublishTimeout(math.MaxInt64))
		}, nil},
		{"id returning an empty id", func(*testing.T) error {
			return published(func(item) string { return "" })
		}, crew.ErrInvalid},
		{"Add on a nil Publisher", func(*testing.T) error { return (*Publisher[item])(nil).Add(ctx, item{}) }, crew.ErrInvalid},
		{"Flush on a nil Publisher", func(*testing.T) error { return (*Publisher[item])(nil).Flush(ctx) }, crew.ErrInvalid},
		{"Close on a nil Publisher", func(*testing.T) error { return (*Publisher[item])(nil).Close(ctx) }, crew.ErrInvalid},
		{"Add on a zero Publisher", func(*testing.T) error { return new(Publisher[item]).Add(ctx, item{}) }, crew.ErrInvalid},
		{"Flush on a zero Publisher", func(*testing.T) error { return new(Publisher[item]).Flush(ctx) }, crew.ErrInvalid},
		{"Close on a zero Publisher", func(*testing.T) error { return new(Publisher[item]).Close(ctx) }, crew.ErrInvalid},
		{"Stats of nil and zero Publishers", func(*testing.T) error {
			if st := (*Publisher[item])(nil).Stats(); st != (PublisherStats{}) {
				return fmt.Errorf("nil: stats %+v, want zeros", st)
			}
			if st := new(Publisher[item]).Stats(); st != (PublisherStats{}) {
				return fmt.Errorf("zero: stats %+v, want zeros", st)
			}
			return nil
		}, nil},
		{"Add with a nil context", func(*testing.T) error {
			p := newPublisher()
			defer p.Close(ctx)
			return p.Add(nil, item{}) //nolint:staticcheck // the nil context is the test
		}, crew.ErrInvalid},
		{"Flush with a nil context", func(*testing.T) error {
			p := newPublisher()
			defer p.Close(ctx)
			return p.Flush(nil) //nolint:staticcheck // the nil context is the test
		}, crew.ErrInvalid},
		{"Close with a nil context", func(*testing.T) error {
			p := newPublisher()
			defer p.Close(ctx)
			return p.Close(nil) //nolint:staticcheck // the nil context is the test
		}, crew.ErrInvalid},
		{"Add after Close", func(t *testing.T) error { return closedPublisher(t).Add(ctx, item{}) }, batch.ErrClosed},
		{"Flush after Close", func(t *testing.T) error { return closedPublisher(t).Flush(ctx) }, batch.ErrClosed},
		{"Close after Close", func(t *testing.T) error { return closedPublisher(t).Close(ctx) }, batch.ErrClosed},

		// ExponentialBackoff.
		{"ExponentialBackoff(-1, 0)", func(*testing.T) error {
			return panicValue(func() { ExponentialBackoff(-1, 0) })
		}, crew.ErrInvalid},
		{"ExponentialBackoff(MinInt64, MaxInt64)", func(*testing.T) error {
			return panicValue(func() { ExponentialBackoff(math.MinInt64, math.MaxInt64) })
		}, crew.ErrInvalid},
		{"ExponentialBackoff(0, 1s) at delivery MaxInt", func(*testing.T) error {
			if d := ExponentialBackoff(0, time.Second)(math.MaxInt); d != 0 {
				return fmt.Errorf("delay %v, want 0", d)
			}
			return nil
		}, nil},
		{"ExponentialBackoff(1ns, MaxInt64) at deliveries MaxInt and MinInt", func(*testing.T) error {
			f := ExponentialBackoff(1, math.MaxInt64)
			if d := f(math.MaxInt); d < math.MaxInt64/2 {
				return fmt.Errorf("delay at MaxInt %v, want at least half of MaxInt64", d)
			}
			if d := f(math.MinInt); d != 0 && d != 1 {
				return fmt.Errorf("delay at MinInt %v, want within [0, 1ns]", d)
			}
			return nil
		}, nil},

		// Partition computes the hash modulo n for every n, not modulo the
		// low 32 bits of n (0 for 1<<32: a division by zero).
		{"Partition with n beyond 32 bits", func(*testing.T) error {
			if strconv.IntSize < 64 {
				return nil
			}
			h := fnv.New32a()
			h.Write([]byte("key"))
			want := int(h.Sum32()) // below every n here
			one := 1
			for _, n := range []int{one << 32, one<<32 + 1, math.MaxInt} {
				var got int
				if v, panicked := panicOf(func() { got = Partition("key", n) }); panicked {
					return fmt.Errorf("Partition(key, %d) panicked: %v", n, v)
				}
				if got != want {
					return fmt.Errorf("Partition(key, %d) = %d, want %d", n, got, want)
				}
			}
			return nil
		}, nil},

		// Codecs.
		{"Bytes.Marshal(nil)", func(*testing.T) error { _, err := Bytes{}.Marshal(nil); return err }, crew.ErrInvalid},
		{"Bytes.Marshal(int)", func(*testing.T) error { _, err := Bytes{}.Marshal(1); return err }, crew.ErrInvalid},
		{"Bytes.Unmarshal into nil", func(*testing.T) error { return Bytes{}.Unmarshal([]byte("x"), nil) }, crew.ErrInvalid},
		{"Bytes.Unmarshal into a nil *string", func(*testing.T) error {
			return Bytes{}.Unmarshal([]byte("x"), (*string)(nil))
		}, crew.ErrInvalid},
		{"Bytes.Unmarshal into a nil *[]byte", func(*testing.T) error {
			return Bytes{}.Unmarshal([]byte("x"), (*[]byte)(nil))
		}, crew.ErrInvalid},
		{"Bytes.Unmarshal into an int", func(*testing.T) error { var n int; return Bytes{}.Unmarshal([]byte("x"), &n) }, crew.ErrInvalid},
		{"JSON.Marshal(chan)", func(*testing.T) error { _, err := JSON{}.Marshal(make(chan int)); return err }, errAny},
		{"JSON.Unmarshal into nil", func(*testing.T) error { return JSON{}.Unmarshal(nil, nil) }, errAny},

		// Errors and messages.
		{"nil *MessageError", func(*testing.T) error {
			var me *MessageError
			if me.Error() == "" || me.Unwrap() != nil {
				return fmt.Errorf("Error() %q, Unwrap() %v", me.Error(), me.Unwrap())
			}
			return nil
		}, nil},
		{"zero MessageError", func(*testing.T) error {
			var me MessageError
			if me.Error() == "" || me.Unwrap() != nil {
				return fmt.Errorf("Error() %q, Unwrap() %v", me.Error(), me.Unwrap())
			}
			return nil
		}, nil},
		{"Permanent(nil) and IsPermanent(nil)", func(*testing.T) error {
			if Permanent(nil) != nil || IsPermanent(nil) {
				return errors.New("Permanent(nil) is not nil, or IsPermanent(nil) is true")
			}
			return nil
		}, nil},
		// Queue, Enqueue and its options, Schedule, Snooze.
		{"NewQueue nil JetStream", func(*testing.T) error {
			return panicValue(func() { NewQueue[item](nil, "jobs.new") })
		}, crew.ErrInvalid},
		{"NewQueue wildcard subject", func(*testing.T) error {
			return panicValue(func() { NewQueue[item](js, "jobs.*") })
		}, crew.ErrInvalid},
		{"NewQueue nil option", func(*testing.T) error {
			return panicValue(func() { NewQueue[item](js, "jobs.new", nil) })
		}, crew.ErrInvalid},
		{"NewQueue WithCodec(nil)", func(*testing.T) error {
			return panicValue(func() { NewQueue[item](js, "jobs.new", WithCodec(nil)) })
		}, crew.ErrInvalid},
		{"NewQueue WithHeaderInjector(nil)", func(*testing.T) error {
			return panicValue(func() { NewQueue[item](js, "jobs.new", WithHeaderInjector(nil)) })
		}, crew.ErrInvalid},
		{"Enqueue on a nil Queue", func(*testing.T) error {
			_, err := (*Queue[item])(nil).Enqueue(ctx, item{})
			return err
		}, crew.ErrInvalid},
		{"Enqueue on a zero Queue", func(*testing.T) error {
			_, err := new(Queue[item]).Enqueue(ctx, item{})
			return err
		}, crew.ErrInvalid},
		{"Enqueue nil context", func(*testing.T) error {
			_, err := newQueue().Enqueue(nil, item{}) //nolint:staticcheck // the case under test
			return err
		}, crew.ErrInvalid},
		{"Enqueue nil option", enqueued(nil), crew.ErrInvalid},
		{"WithDelay(-1)", enqueued(WithDelay(-1)), crew.ErrInvalid},
		{"WithDelay(MinInt64)", enqueued(WithDelay(math.MinInt64)), crew.ErrInvalid},
		{"WithRunAt(zero time)", enqueued(WithRunAt(time.Time{})), crew.ErrInvalid},
		{"WithRunAt(the past) publishes at once", enqueued(WithRunAt(time.Unix(0, 0))), nil},
		{"WithUniqueID(\"\")", enqueued(WithUniqueID("")), crew.ErrInvalid},
		{"WithTTL(0)", enqueued(WithTTL(0)), crew.ErrInvalid},
		{"WithTTL(999ms)", enqueued(WithTTL(999 * time.Millisecond)), crew.ErrInvalid},
		{"WithHeader empty key", enqueued(WithHeader("", "v")), crew.ErrInvalid},
		{"WithHeader key with a colon", enqueued(WithHeader("a:b", "v")), crew.ErrInvalid},
		{"WithHeader server key", enqueued(WithHeader("Nats-Msg-Id", "v")), crew.ErrInvalid},
		{"WithDelay on a stream without schedules", enqueued(WithDelay(time.Hour)), errAny},
		{"WithTTL on a stream without message TTLs", enqueued(WithTTL(time.Hour)), errAny},
		{"Enqueue with a codec that fails", func(*testing.T) error {
			_, err := NewQueue[item](js, "jobs.new", WithCodec(Bytes{})).Enqueue(ctx, item{})
			return err
		}, crew.ErrInvalid},
		{"Schedule nil context", func(*testing.T) error {
			_, err := newQueue().Schedule(nil, "tick", "@hourly", item{}) //nolint:staticcheck // the case under test
			return err
		}, crew.ErrInvalid},
		{"Schedule empty name", scheduled("", "@hourly"), crew.ErrInvalid},
		{"Schedule name with a dot", scheduled("a.b", "@hourly"), crew.ErrInvalid},
		{"Schedule name with a wildcard", scheduled(">", "@hourly"), crew.ErrInvalid},
		{"Schedule empty spec", scheduled("tick", " "), crew.ErrInvalid},
		{"Schedule @at spec", scheduled("tick", "@at 2030-01-01T00:00:00Z"), crew.ErrInvalid},
		{"Schedule @every 500ms", scheduled("tick", "@every 500ms"), crew.ErrInvalid},
		{"Schedule @every nonsense", scheduled("tick", "@every often"), crew.ErrInvalid},
		{"Schedule WithDelay", scheduled("tick", "@hourly", WithDelay(time.Second)), crew.ErrInvalid},
		{"Schedule WithUniqueID", scheduled("tick", "@hourly", WithUniqueID("x")), crew.ErrInvalid},
		{"Schedule on a stream without schedules", scheduled("tick", "@hourly"), errAny},
		{"Unschedule on a nil Queue", func(*testing.T) error {
			return (*Queue[item])(nil).Unschedule(ctx, "tick")
		}, crew.ErrInvalid},
		{"Unschedule nil context", func(*testing.T) error {
			return newQueue().Unschedule(nil, "tick") //nolint:staticcheck // the case under test
		}, crew.ErrInvalid},
		{"Unschedule empty name", func(*testing.T) error {
			return newQueue().Unschedule(ctx, "")
		}, crew.ErrInvalid},
		{"Unschedule a name never scheduled", func(*testing.T) error {
			return newQueue().Unschedule(ctx, "never")
		}, nil},
		{"DuplicateWindow on a zero Queue", func(*testing.T) error {
			_, err := new(Queue[item]).DuplicateWindow(ctx)
			return err
		}, crew.ErrInvalid},
		{"DuplicateWindow of a subject no stream holds", func(*testing.T) error {
			_, err := NewQueue[item](js, "nowhere").DuplicateWindow(ctx)
			return err
		}, errAny},
		{"Subject of a nil Queue", func(*testing.T) error {
			if s := (*Queue[item])(nil).Subject(); s != "" {
				return fmt.Errorf("Subject() = %q", s)
			}
			return nil
		}, nil},
		{"WithSnooze(nil)", consumerOptionPanics(WithSnooze(nil)), crew.ErrInvalid},
		{"Snooze(-1)", func(*testing.T) error {
			err := Snooze(-1)
			if _, ok := SnoozeDelay(err); ok {
				return errors.New("Snooze(-1) is a snooze")
			}
			return err
		}, crew.ErrInvalid},
		{"SnoozeDelay(nil)", func(*testing.T) error {
			if d, ok := SnoozeDelay(nil); ok || d != 0 {
				return fmt.Errorf("SnoozeDelay(nil) = %v, %v", d, ok)
			}
			return nil
		}, nil},
		{"Attempt of a zero Msg, and with a bad Crew-Attempts", func(*testing.T) error {
			if a := (Msg[item]{}).Attempt(); a != 0 {
				return fmt.Errorf("Attempt() = %d, want 0", a)
			}
			m := Msg[item]{Header: nats.Header{HeaderAttempts: []string{"-3"}}}
			m.Metadata.NumDelivered = 1
			if a := m.Attempt(); a != 1 {
				return fmt.Errorf("Attempt() with Crew-Attempts -3 = %d, want 1", a)
			}
			return nil
		}, nil},
		{"Delivery of a zero Msg", func(*testing.T) error {
			if d := (Msg[item]{}).Delivery(); d != 0 {
				return fmt.Errorf("Delivery() = %d, want 0", d)
			}
			return nil
		}, nil},

		// DeadLetters.
		{"NewDeadLetters nil JetStream", func(*testing.T) error {
			return panicValue(func() { NewDeadLetters(nil, "dead.jobs") })
		}, crew.ErrInvalid},
		{"NewDeadLetters empty subject", func(*testing.T) error {
			return panicValue(func() { NewDeadLetters(js, "") })
		}, crew.ErrInvalid},
		{"NewDeadLetters subject with a space", func(*testing.T) error {
			return panicValue(func() { NewDeadLetters(js, "dead jobs") })
		}, crew.ErrInvalid},
		{"NewDeadLetters subject with > before its end", func(*testing.T) error {
			return panicValue(func() { NewDeadLetters(js, "dead.>.jobs") })
		}, crew.ErrInvalid},
		{"NewDeadLetters subject with an empty token", func(*testing.T) error {
			return panicValue(func() { NewDeadLetters(js, "dead..jobs") })
		}, crew.ErrInvalid},
		{"Get on a nil DeadLetters", func(*testing.T) error {
			_, err := (*DeadLetters)(nil).Get(ctx, 1)
			return err
		}, crew.ErrInvalid},
		{"Replay on a zero DeadLetters", func(*testing.T) error {
			_, err := new(DeadLetters).Replay(ctx, 1)
			return err
		}, crew.ErrInvalid},
		{"Delete on a zero DeadLetters", func(*testing.T) error { return new(DeadLetters).Delete(ctx, 1) }, crew.ErrInvalid},
		{"List on a nil DeadLetters", func(*testing.T) error { return listErr((*DeadLetters)(nil).List(ctx)) }, crew.ErrInvalid},
		{"List nil context", func(*testing.T) error {
			return listErr(NewDeadLetters(js, "jobs.dead").List(nil)) //nolint:staticcheck // the case under test
		}, crew.ErrInvalid},
		{"Get nil context", func(*testing.T) error {
			_, err := NewDeadLetters(js, "jobs.dead").Get(nil, 1) //nolint:staticcheck // the case under test
			return err
		}, crew.ErrInvalid},
		{"Get sequence 0", func(*testing.T) error {
			_, err := NewDeadLetters(js, "jobs.dead").Get(ctx, 0)
			return err
		}, crew.ErrInvalid},
		{"Replay sequence 0", func(*testing.T) error {
			_, err := NewDeadLetters(js, "jobs.dead").Replay(ctx, 0)
			return err
		}, crew.ErrInvalid},
		{"Delete sequence 0", func(*testing.T) error { return NewDeadLetters(js, "jobs.dead").Delete(ctx, 0) }, crew.ErrInvalid},
		{"Get a sequence never stored", func(*testing.T) error {
			_, err := NewDeadLetters(js, "jobs.dead").Get(ctx, math.MaxUint64)
			return err
		}, natsjs.ErrMsgNotFound},
		{"Replay a sequence never stored", func(*testing.T) error {
			_, err := NewDeadLetters(js, "jobs.dead").Replay(ctx, math.MaxUint64)
			return err
		}, natsjs.ErrMsgNotFound},
		{"Get of a subject no stream holds", func(*testing.T) error {
			_, err := NewDeadLetters(js, "nowhere").Get(ctx, 1)
			return err
		}, errAny},
		{"List of a subject no stream holds", func(*testing.T) error { return listErr(NewDeadLetters(js, "nowhere").List(ctx)) }, errAny},
		{"List of a subject with no dead letters", func(*testing.T) error { return listErr(NewDeadLetters(js, "jobs.dead").List(ctx)) }, nil},
		{"Decode with a nil Codec", func(*testing.T) error { var v item; return DeadLetter{}.Decode(nil, &v) }, crew.ErrInvalid},
		{"Subject of a nil DeadLetters", func(*testing.T) error {
			if s := (*DeadLetters)(nil).Subject(); s != "" {
				return fmt.Errorf("Subject() = %q", s)
			}
			return nil
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				returned := false
				defer func() {
					if v := recover(); v != nil {
						done <- fmt.Errorf("panicked: %v", v)
					} else if !returned {
						done <- errFailedNow // t.FailNow, t.Fatal
					}
				}()
				err := tc.call(t)
				returned = true
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("did not return in 15s")
			}
			if err == errFailedNow {
				return
			}
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("got %v, want success", err)
			case tc.want == errAny && err == nil:
				t.Error("got nil, want an error")
			case tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Errorf("got %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
}

// flushPanicked returns nil if err reports a panic of a flush, which Add
// must leave to the flush, an error otherwise.
func flushPanicked(err error) error {
	var pe *crew.PanicError
	if !errors.As(err, &pe) {
		return fmt.Errorf("got %v, want a flush's *crew.PanicError", err)
	}
	return nil
}

// listErr ranges over a List and returns the first error it yields, or
// an error if it yields a dead letter.
func listErr(seq iter.Seq2[DeadLetter, error]) error {
	for dl, err := range seq {
		if err != nil {
			return err
		}
		return fmt.Errorf("yielded dead letter %d", dl.Seq)
	}
	return nil
}

// consumerOptionPanics returns a case that builds a Consumer with o.
func consumerOptionPanics(o ConsumerOption) func(*testing.T) error {
	return func(*testing.T) error {
		pool := crew.New(1)
		defer pool.Stop()
		return panicValue(func() {
			NewConsumer(fakeConsumer{}, pool, func(context.Context, Msg[item]) error { return nil }, o)
		})
	}
}

// givenUpInvalid checks that the one message a case ran was given up with
// an error wrapping crew.ErrInvalid, not counted as a panic.
func givenUpInvalid(sink *errSink, st Stats) error {
	if mes := sink.messageErrors(); len(mes) != 1 || !errors.Is(mes[0], crew.ErrInvalid) || st.Panicked != 0 {
		return fmt.Errorf("error handler got %v, stats %+v, want the message given up with an error wrapping crew.ErrInvalid", mes, st)
	}
	return nil
}

// panicOf calls f and returns the value it panicked with, if it did.
func panicOf(f func()) (v any, panicked bool) {
	defer func() {
		if v = recover(); v != nil {
			panicked = true
		}
	}()
	f()
	return nil, false
}
