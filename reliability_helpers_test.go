package crew_test

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// Helpers shared by the reliability tests (fuzz_test.go, stress_test.go,
// traps_test.go, badinput_test.go).

// mustReturn runs f and fails the test with a goroutine dump if f has not
// returned within d. f keeps running (and leaks) if it hangs: the test has
// failed by then. It reports whether f returned.
func mustReturn(t testing.TB, d time.Duration, what string, f func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not return within %v; goroutines:\n\n%s", what, d, leak.Dump())
		return false
	}
}

// returnsWithin reports whether f returns within d, without failing the
// test. f keeps running if it does not.
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

// waitUntil polls cond until it holds or the deadline passes; it fails the
// test with a goroutine dump then.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; goroutines:\n\n%s", d, what, leak.Dump())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// knownBugsOn reports whether CREW_KNOWN_BUGS=1 asks to run the tests of
// bugs reported but not yet fixed (to check a fix).
func knownBugsOn() bool { return os.Getenv("CREW_KNOWN_BUGS") == "1" }

// knownBug skips a test that reproduces a bug reported but not yet fixed,
// unless CREW_KNOWN_BUGS=1.
func knownBug(t *testing.T, what string) {
	t.Helper()
	if !knownBugsOn() {
		t.Skip("known bug: " + what + " (CREW_KNOWN_BUGS=1 runs it)")
	}
}

// submitRacesShutdown reports whether the fuzz and stress tests may call
// Submit while Shutdown runs. They may: a Submit that has not returned
// when Shutdown drops the queue completes its Task once
// (TestSubmitRacingShutdownCompletesEachTaskOnce). Should a bug in that
// race need to be parked, return knownBugsOn() to keep the two apart
// unless CREW_KNOWN_BUGS=1.
func submitRacesShutdown() bool { return true }

// raisePeak raises peak to v if v is larger.
func raisePeak(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}
