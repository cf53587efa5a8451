package retry

import (
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

func TestBackoffDoublesWithinBound(t *testing.T) {
	leak.Check(t)
	for attempt, want := range map[int]time.Duration{1: 10, 2: 20, 3: 40, 4: 80, 5: 100, 60: 100} {
		for range 100 {
			d := Backoff(attempt, 10, 100)
			if d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
	if d := Backoff(200, time.Hour, 0); d < (1<<63-1)/2 {
		t.Fatalf("unbounded Backoff(200) = %v, want near the largest duration", d)
	}
	if d := Backoff(3, 0, 0); d != 0 {
		t.Fatalf("Backoff with no delay = %v", d)
	}
}

func TestCheck(t *testing.T) {
	leak.Check(t)
	for _, c := range []struct {
		attempts          int
		delay, max, limit time.Duration
		ok                bool
	}{
		{1, 0, 0, 0, true},
		{3, 10, 0, 5, true},
		{3, 10, 10, 0, true},
		{0, 0, 0, 0, false},
		{2, -1, 0, 0, false},
		{2, 0, 0, -1, false},
		{2, 10, 5, 0, false},
	} {
		if got := Check(c.attempts, c.delay, c.max, c.limit) == ""; got != c.ok {
			t.Errorf("Check(%d, %v, %v, %v) ok = %v, want %v", c.attempts, c.delay, c.max, c.limit, got, c.ok)
		}
	}
}
