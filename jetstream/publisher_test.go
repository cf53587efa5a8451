package jetstream

import (
	"context"
	"errors"
	"github.com/gocrew/crew"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew/batch"
)

// TestRetriedFlushIsStoredOnce fails the first flush after the server has
// stored its batch; the batcher retries it with the same message ids, and
// the stream drops them as duplicates.
func TestRetriedFlushIsStoredOnce(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")

	var failures atomic.Int32
	p := NewPublisher(js, "jobs.new", itemID, WithBatch(
		batch.WithMaxItems(10),
		batch.WithMaxWait(time.Hour), // sealed by size and Close only
		batch.WithRetry(crew.Retry{Attempts: 3, Delay: time.Millisecond, MaxDelay: 5 * time.Millisecond}),
		batch.WithErrorHandler(func(_ context.Context, items []item, err error) {
			t.Errorf("%d items not published: %v", len(items), err)
		}),
	))
	p.afterPublish = func() error {
		if failures.Add(1) == 1 {
			return errors.New("connection reset after the acks (injected)")
		}
		return nil
	}
	ctx := testCtx(t)
	for _, it := range items(0, 25) {
		if err := p.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s := p.Stats()
	if s.Stored != 25 || s.Duplicates != 10 || s.Batch.Retries != 1 || s.Batch.Flushed != 25 {
		t.Errorf("stats %+v, want 25 stored, the 10 of the retried batch dropped as duplicates", s)
	}
	if n := streamMsgs(t, st); n != 25 {
		t.Fatalf("stream holds %d messages, want 25", n)
	}
	seen := map[int]bool{}
	for seq := uint64(1); seq <= 25; seq++ {
		it, h := storedItem(ctx, t, st, seq)
		if seen[it.ID] {
			t.Errorf("item %d stored twice", it.ID)
		}
		seen[it.ID] = true
		if got := h.Get(natsjs.MsgIDHeader); got != itemID(it) {
			t.Errorf("message id %q, want %q", got, itemID(it))
		}
	}
}

func TestPublisherDefaultIDIsContentHash(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	st := createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	p := NewPublisher[item](js, "jobs.new", nil)
	for range 2 {
		for _, it := range items(0, 5) {
			if err := p.Add(ctx, it); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s := p.Stats(); s.Stored != 5 || s.Duplicates != 5 {
		t.Errorf("stats %+v, want 5 stored and 5 duplicates", s)
	}
	if n := streamMsgs(t, st); n != 5 {
		t.Errorf("stream holds %d messages, want 5", n)
	}
}

func TestPublisherFailsWithoutStream(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	ctx := testCtx(t)
	var failed atomic.Int32
	p := NewPublisher(js, "nowhere", itemID,
		WithPublishTimeout(time.Second),
		WithBatch(
			batch.WithRetry(crew.Retry{Attempts: 2, Delay: time.Millisecond, MaxDelay: time.Millisecond}),
			batch.WithErrorHandler(func(_ context.Context, items []item, err error) { failed.Add(int32(len(items))) }),
		))
	for _, it := range items(0, 3) {
		if err := p.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err == nil {
		t.Fatal("Close returned nil for a subject no stream stores")
	}
	if n := failed.Load(); n != 3 {
		t.Errorf("%d items reached the error handler, want 3", n)
	}
}
