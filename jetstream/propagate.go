package jetstream

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// A HeaderInjector adds to h, the headers of a job being enqueued or an
// item being published, what ctx, the context of the [Queue.Enqueue] or
// [Publisher.Add] call, carries across processes: a trace context, for
// example. See [WithHeaderInjector].
type HeaderInjector func(ctx context.Context, h nats.Header)

// A ContextExtractor returns the context a [Handler] runs with, made from
// ctx, the context the [Consumer] gives it, and h, the message's headers:
// ctx with the trace context that h carries, for example. See
// [WithContextExtractor].
type ContextExtractor func(ctx context.Context, h nats.Header) context.Context

// A ProducerOption configures a [Queue] and a [Publisher], which both
// publish messages: it is a [QueueOption] and a [PublisherOption].
// [WithHeaderInjector] returns one.
type ProducerOption interface {
	QueueOption
	PublisherOption
}

type injectorOption struct{ f HeaderInjector }

func (o injectorOption) applyQueue(s *queueSettings) error         { return o.set(&s.inject) }
func (o injectorOption) applyPublisher(s *publisherSettings) error { return o.set(&s.inject) }

// set stores the injector in *dst, unless it is nil.
func (o injectorOption) set(dst *HeaderInjector) error {
	if o.f == nil {
		return invalid("WithHeaderInjector(nil)")
	}
	*dst = o.f
	return nil
}

// WithHeaderInjector makes [Queue.Enqueue] and [Publisher.Add] call f with
// their ctx and a header of their own, and add what f set there to the
// headers of the message they publish; keys starting with Nats-, the
// server's, are left out. f runs in the goroutine of the call, once per
// call, and must not keep h.
//
// Enqueue calls f before it publishes the job, and f's headers replace
// those of the same keys that [WithHeader] set. [Queue.Schedule] does not
// call f: a periodic job outlives the call that made it. Add calls f when
// it queues the item, and a later flush publishes the headers with the
// item's message (see [Publisher.Add] for how they are kept).
//
// With a [WithContextExtractor] on the [Consumer], the handler's context
// carries what the context of Enqueue or Add did; the package
// github.com/gocrew/crew/exporters/crewotel has such a pair for
// OpenTelemetry trace contexts. f must not be nil.
func WithHeaderInjector(f HeaderInjector) ProducerOption { return injectorOption{f} }

// WithContextExtractor makes the [Consumer] call f with the handler's
// context and the message's headers, just before the handler runs on the
// executor, and run the handler with the context f returns, which must be
// ctx or a context made from it (a nil one stands for ctx): the Consumer
// cancels ctx, not what f returns, when it stops. A panic in f is
// recovered and settles the message like a panic of the handler. f is not
// called for messages that are not handed to the handler (ones that could
// not be decoded, schedules). See [WithHeaderInjector]. f must not be nil.
func WithContextExtractor(f ContextExtractor) ConsumerOption {
	return consumerOption(checked(f != nil, func(s *consumerSettings) { s.extract = f }, "WithContextExtractor(nil)"))
}

// inject calls f with ctx and a header of its own, and copies what f set
// there to h, but for the server's headers (Nats-).
func inject(f HeaderInjector, ctx context.Context, h nats.Header) {
	for k, v := range injected(f, ctx) {
		h[k] = append([]string(nil), v...)
	}
}

// injected calls f with ctx and a new header, and returns what f set
// there but for the server's headers (Nats-).
func injected(f HeaderInjector, ctx context.Context) nats.Header {
	h := nats.Header{}
	f(ctx, h)
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			delete(h, k)
		}
	}
	return h
}

// minHeaderGeneration is the fewest headers a [headerStore] gathers in its
// newer generation before it lets the older one go.
const minHeaderGeneration = 1024

// A headerStore holds the headers that a [Publisher]'s injector set for
// the items Add queued, by message id, until the messages are stored: the
// batcher holds items of the caller's type, which have no room for them,
// and the id is what the Publisher knows an item's message by. It keeps
// the headers of each Add of an id, oldest first, and a flush publishes
// the oldest: an Add that the batcher refuses takes back its own, and
// leaves those of the other Adds of the id. The headers of items that are
// never stored (dropped by the batcher, or whose flush failed for good)
// cannot be told apart from the others; they are let go in a later
// generation: the store keeps two, and once the newer holds twice as many
// ids as the batcher has items pending (and at least
// minHeaderGeneration), it lets the older go and starts a new one. A
// flush that finds headers in the older generation moves them to the
// newer, so a retried batch keeps its own.
type headerStore struct {
	mu       sync.Mutex
	cur, old map[string][]*nats.Header
	rotateAt int
	pending  func() int // the items the batcher holds: accepted, not finished
}

func newHeaderStore(pending func() int) *headerStore {
	return &headerStore{cur: map[string][]*nats.Header{}, old: map[string][]*nats.Header{}, rotateAt: minHeaderGeneration, pending: pending}
}

// put adds h to the headers of the message id, after those of earlier
// Adds of the id, which a flush publishes first: the stream stores the
// message of an id once. It returns what [headerStore.release] takes to
// take h back.
func (s *headerStore) put(id string, h nats.Header) *nats.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := &h
	if hs := s.findLocked(id); hs != nil {
		s.cur[id] = append(hs, kept)
		return kept
	}
	if len(s.cur) >= s.rotateAt {
		n := s.pending()
		if len(s.cur) >= 2*n {
			s.old, s.cur = s.cur, map[string][]*nats.Header{}
		}
		s.rotateAt = max(minHeaderGeneration, 2*n)
	}
	s.cur[id] = []*nats.Header{kept}
	return kept
}

// release takes back kept, the headers that put stored for an Add of the
// message id that the batcher refused, leaving those of the id's other
// Adds.
func (s *headerStore) release(id string, kept *nats.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := s.findLocked(id)
	i := slices.Index(hs, kept)
	switch {
	case i < 0:
	case len(hs) == 1:
		delete(s.cur, id)
	default:
		s.cur[id] = slices.Delete(hs, i, i+1)
	}
}

// get returns a copy of the headers that the oldest Add of the message id
// kept, with room for the message id header, or nil if it has none.
func (s *headerStore) get(id string) nats.Header {
	s.mu.Lock()
	var h nats.Header
	if hs := s.findLocked(id); hs != nil {
		h = *hs[0]
	}
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	c := make(nats.Header, len(h)+1)
	for k, v := range h {
		c[k] = v // the publish sets keys; it does not change values
	}
	return c
}

// findLocked returns the headers of id, moving them to the newer
// generation, or nil.
func (s *headerStore) findLocked(id string) []*nats.Header {
	if hs, ok := s.cur[id]; ok {
		return hs
	}
	hs, ok := s.old[id]
	if ok {
		delete(s.old, id)
		s.cur[id] = hs
	}
	return hs
}

// forget drops the headers of the message id, once the stream stored its
// message.
func (s *headerStore) forget(id string) {
	s.mu.Lock()
	delete(s.cur, id)
	delete(s.old, id)
	s.mu.Unlock()
}

// size returns how many message ids the store holds headers for.
func (s *headerStore) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cur) + len(s.old)
}

// handlerContext returns the context the handler runs with, given ctx,
// the one the Consumer made, and the message's headers h.
func (s *consumerSettings) handlerContext(ctx context.Context, h nats.Header) context.Context {
	if s.extract == nil {
		return ctx
	}
	if hctx := s.extract(ctx, h); hctx != nil {
		return hctx
	}
	return ctx
}
