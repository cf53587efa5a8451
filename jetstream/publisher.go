package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/gocrew/crew"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew/batch"
)

// A Publisher publishes items to a JetStream subject in batches, through a
// [batch.Batcher] whose flush publishes every item of a batch and waits for
// the server to acknowledge each one. Make one with [NewPublisher], queue
// items with [Publisher.Add], and stop it with [Publisher.Close].
//
// Each message carries a message id (the Nats-Msg-Id header) computed from
// its item, and the stream drops a message whose id it stored within its
// duplicate window (the Duplicates of [natsjs.StreamConfig], two minutes by
// default). A
// flush that failed, for example because some acknowledgements did not
// arrive in time, is retried with the same ids, so the items that were
// stored the first time are not stored twice. The window must therefore be
// longer than the time a batch may spend being retried.
//
// A failed flush is retried as [batch.WithRetry] says (by default 5
// attempts, 100ms to 2s apart; see [WithBatch]), and the items of a batch
// whose last attempt failed go to the batch's error handler
// ([batch.WithErrorHandler]).
//
// With [WithHeaderInjector], each message carries the headers that the
// injector set from the context of the Add that queued its item, or, for
// items with the same message id, of another such Add (see
// [Publisher.Add]).
//
// Once Close has been called, Add, Flush and Close return
// [batch.ErrClosed]. Given a nil context, and on a nil Publisher or one not
// made by NewPublisher, they return an error wrapping [crew.ErrInvalid] and
// do nothing; [Publisher.Stats] then returns zeros.
type Publisher[T any] struct {
	js      natsjs.JetStream
	subject string
	id      func(T) string
	codec   Codec
	timeout time.Duration
	b       *batch.Batcher[T]
	inject  HeaderInjector // nil: none
	headers *headerStore   // the injector's headers; nil without one

	stored, duplicates atomic.Uint64

	// afterPublish, if set, is called after each flush has its
	// acknowledgements; an error it returns fails the flush. Tests use it
	// to make a flush fail after its messages were stored.
	afterPublish func() error
}

// PublisherStats is a snapshot of a [Publisher]'s counters, as
// [Publisher.Stats] returns it.
type PublisherStats struct {
	Stored     uint64      // messages the stream stored
	Duplicates uint64      // messages the stream dropped as duplicates of stored ones
	Batch      batch.Stats // the batcher's counters
}

// NewPublisher returns a [Publisher] of items to subject, which must belong
// to a stream, publishing through js, configured by opts
// ([PublisherOption]). id returns the message id of an item: the same item
// must get the same id, and different items different ids; an empty id
// fails the item's flush with an error wrapping [crew.ErrInvalid]. If id is nil, the id
// is a hash of the subject and the encoded item, so two equal items
// published within the duplicate window are stored once.
//
// NewPublisher panics, with an error wrapping [crew.ErrInvalid], if js is nil,
// subject cannot be published to (it is empty, contains white space, an
// empty token or a wildcard), or an option is nil or invalid.
func NewPublisher[T any](js natsjs.JetStream, subject string, id func(T) string, opts ...PublisherOption) *Publisher[T] {
	var argErr error
	if js == nil {
		argErr = invalid("NewPublisher: nil JetStream")
	} else if err := checkSubject(subject); err != nil {
		argErr = invalid("NewPublisher: %v", err)
	}
	s := defaultPublisherSettings()
	applyOptions("NewPublisher", &s, argErr, opts, PublisherOption.applyPublisher)
	p := &Publisher[T]{js: js, subject: subject, id: id, codec: s.codec, timeout: s.timeout, inject: s.inject}
	bopts := append([]batch.Option{batch.WithRetry(crew.Retry{Attempts: 5, Delay: 100 * time.Millisecond, MaxDelay: 2 * time.Second})}, s.batch...)
	p.b = batch.New(p.flush, bopts...)
	if p.inject != nil {
		p.headers = newHeaderStore(func() int { return p.b.Stats().Pending })
	}
	return p
}

// Add queues item for publishing. It returns once the item is accepted,
// before it is published; see [batch.Batcher.Add] for when it waits and the
// errors it returns ([batch.ErrClosed] once [Publisher.Close] has been
// called).
//
// Add does not look for other items with the same message id: each is
// queued and published as any other. The stream stores the first of
// their messages that it receives within its duplicate window and drops
// the others, which count in [PublisherStats.Duplicates]; their flushes
// succeed.
//
// With [WithHeaderInjector], Add first calls the injector with ctx, and
// the item's message is published with the headers it set. The Publisher
// keeps them by the item's message id until the stream has stored the
// message, so that a retried flush publishes them again: Add calls the
// id function, or without one encodes the item, to find its id, once
// more than the flush does, and leaves an error or a panic there to the
// flush, which fails and reports it. The pending items of an id are all published with the
// headers of the first of their Adds that did not return an error (an
// Add that returns an error takes back its own), whichever message the
// stream stores; those published after the stream stored one, which it
// drops, may go without. The headers of items that are never stored
// (dropped, or whose flush failed for good) are let go once about twice
// as many items as are pending have been added since; an item still
// waiting for its flush by then is published without its headers.
func (p *Publisher[T]) Add(ctx context.Context, item T) error {
	if err := p.check(ctx, "Add"); err != nil {
		return err
	}
	if p.inject != nil {
		return p.addWithHeaders(ctx, item)
	}
	return p.b.Add(ctx, item)
}

// addWithHeaders adds item with the headers the injector sets from ctx.
func (p *Publisher[T]) addWithHeaders(ctx context.Context, item T) error {
	h := injected(p.inject, ctx)
	if len(h) == 0 {
		return p.b.Add(ctx, item)
	}
	var id string
	err := recovered(func() error {
		var data []byte
		if p.id == nil {
			var err error
			if data, err = p.codec.Marshal(item); err != nil {
				return err
			}
		}
		id = p.msgID(item, data)
		return nil
	})
	if err != nil || id == "" { // its flush fails and reports it
		return p.b.Add(ctx, item)
	}
	kept := p.headers.put(id, h)
	if err = p.b.Add(ctx, item); err != nil {
		p.headers.release(id, kept)
	}
	return err
}

// Flush publishes the items added so far and waits for them; see
// [batch.Batcher.Flush].
func (p *Publisher[T]) Flush(ctx context.Context) error {
	if err := p.check(ctx, "Flush"); err != nil {
		return err
	}
	return p.b.Flush(ctx)
}

// Close publishes what is left, waits for it and stops the Publisher; see
// [batch.Batcher.Close]. It does not close the NATS connection.
func (p *Publisher[T]) Close(ctx context.Context) error {
	if err := p.check(ctx, "Close"); err != nil {
		return err
	}
	return p.b.Close(ctx)
}

// check returns the error of a call of method with ctx: an error wrapping
// crew.ErrInvalid for a nil ctx, and for a nil Publisher or one not made by
// NewPublisher; then Add, Flush and Close do nothing else.
func (p *Publisher[T]) check(ctx context.Context, method string) error {
	if p == nil || p.b == nil {
		return invalid("Publisher.%s: publisher not made by NewPublisher", method)
	}
	if ctx == nil {
		return invalid("Publisher.%s: nil context", method)
	}
	return nil
}

// Stats returns a [PublisherStats] snapshot of the Publisher's counters:
// zeros for a nil Publisher or one not made by [NewPublisher].
func (p *Publisher[T]) Stats() PublisherStats {
	if p == nil || p.b == nil {
		return PublisherStats{}
	}
	return PublisherStats{Stored: p.stored.Load(), Duplicates: p.duplicates.Load(), Batch: p.b.Stats()}
}

// flush publishes items asynchronously, each with its message id, and
// waits for all the acknowledgements. It fails if any item could not be
// encoded, published or acknowledged in time.
func (p *Publisher[T]) flush(ctx context.Context, items []T) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var errs []error
	futures := make([]natsjs.PubAckFuture, 0, len(items))
	for _, item := range items {
		data, err := p.codec.Marshal(item)
		if err != nil {
			errs = append(errs, fmt.Errorf("encode: %w", err))
			continue
		}
		id := p.msgID(item, data)
		if id == "" {
			errs = append(errs, invalid("Publisher: empty message id for an item"))
			continue
		}
		m := &nats.Msg{Subject: p.subject, Data: data}
		if p.headers != nil {
			m.Header = p.headers.get(id)
		}
		f, err := p.js.PublishMsgAsync(m, natsjs.WithMsgID(id))
		if err != nil {
			errs = append(errs, fmt.Errorf("publish %s: %w", id, err))
			continue
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				p.duplicates.Add(1)
			} else {
				p.stored.Add(1)
			}
			if p.headers != nil {
				p.headers.forget(f.Msg().Header.Get(natsjs.MsgIDHeader))
			}
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("publish %s: %w", f.Msg().Header.Get(natsjs.MsgIDHeader), err))
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%d of %d publish acks missing: %w", len(futures)-i, len(items), ctx.Err()))
			return joinFirst(errs)
		}
	}
	if len(errs) == 0 && p.afterPublish != nil {
		return p.afterPublish()
	}
	return joinFirst(errs)
}

// msgID returns the message id of item, whose encoding is data.
func (p *Publisher[T]) msgID(item T, data []byte) string {
	if p.id != nil {
		return p.id(item)
	}
	h := sha256.New()
	h.Write([]byte(p.subject))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// joinFirst joins the first few errors, with a count of the others.
func joinFirst(errs []error) error {
	const show = 3
	if len(errs) <= show {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs[:show:show], fmt.Errorf("and %d more errors", len(errs)-show))...)
}
