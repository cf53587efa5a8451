package batch

import (
	"context"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

func TestRetryDelay(t *testing.T) {
	leak.Check(t)
	r := retryPolicy{attempts: 10, base: 10 * time.Millisecond, maxDelay: 70 * time.Millisecond}
	for attempt, full := range map[int]time.Duration{
		1: 10 * time.Millisecond,
		2: 20 * time.Millisecond,
		3: 40 * time.Millisecond,
		4: 70 * time.Millisecond,
		9: 70 * time.Millisecond,
	} {
		for range 100 {
			if d := r.delay(attempt); d < full/2 || d > full {
				t.Fatalf("delay after attempt %d: %v, want within [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
	huge := retryPolicy{attempts: 1000, base: time.Second, maxDelay: 1<<63 - 1}
	if d := huge.delay(900); d < huge.maxDelay/2 {
		t.Fatalf("delay %v overflowed", d)
	}
	if d := (retryPolicy{}).delay(3); d != 0 {
		t.Fatalf("zero policy delay %v", d)
	}
}

func TestRetryWaitCanceled(t *testing.T) {
	leak.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := retryPolicy{attempts: 2, base: time.Hour, maxDelay: time.Hour}
	if r.wait(ctx, 1) {
		t.Fatal("wait did not stop when its context ended")
	}
	if !(retryPolicy{}).wait(context.Background(), 1) {
		t.Fatal("a zero wait was interrupted")
	}
}
