package main

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	before := runtime.NumGoroutine()
	var out strings.Builder
	if err := run(&out, 3000, 4); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), "sent 3000 events") || !strings.Contains(out.String(), "0 events lost") {
		t.Fatalf("unexpected report:\n%s", out.String())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before run, %d after", before, runtime.NumGoroutine())
		}
		time.Sleep(time.Millisecond) // polling, bounded by the deadline
	}
}
