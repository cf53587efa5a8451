package batch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

func TestRetryWaitCanceled(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if wait(ctx, crew.Retry{Attempts: 2, Delay: time.Hour}, 1) {
		t.Fatal("wait did not stop when its context ended")
	}
	if !wait(context.Background(), crew.Retry{Attempts: 2}, 1) {
		t.Fatal("a zero wait was interrupted")
	}
}

// A flush that returns a permanent error is not called again, and the
// error handler gets the error inside the wrapper; each call has the
// policy's deadline.
func TestRetryPermanentAndTimeout(t *testing.T) {
	leak.Check(t)
	boom := errors.New("boom")
	calls := 0
	var handled error
	b := New(func(ctx context.Context, items []int) error {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a flush with Timeout has no deadline")
		}
		return crew.Permanent(boom)
	}, WithRetry(crew.Retry{Attempts: 5, Timeout: time.Hour}), WithMaxItems(1),
		WithErrorHandler(func(_ context.Context, items []int, err error) { handled = err }))
	if err := b.Add(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	b.Close(context.Background()) // reports the handed-over batch, or not, as Close says
	if calls != 1 || handled != boom {
		t.Fatalf("%d calls, handler got %v; want 1 call and boom", calls, handled)
	}
}
