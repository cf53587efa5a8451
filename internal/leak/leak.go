// Package leak checks that a test leaves no goroutine behind.
//
// Check records the goroutines that exist when a test starts; when the test
// ends it polls, with a deadline, until every goroutine started since has
// exited, and fails the test with their stacks if some have not.
package leak

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Timeout is how long Check waits for goroutines to exit.
var Timeout = 5 * time.Second

// Check fails t if goroutines started during the test are still running
// Timeout after it ends. Call it first in the test.
func Check(t testing.TB) {
	t.Helper()
	before := ids(stacks())
	t.Cleanup(func() {
		deadline := time.Now().Add(Timeout)
		for {
			extra := leaked(before)
			if len(extra) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leak: %d goroutines still running after the test:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
				return
			}
			time.Sleep(time.Millisecond) // poll interval
		}
	})
}

func leaked(before map[string]bool) []string {
	var extra []string
	for _, g := range stacks() {
		if id := idOf(g); !before[id] && !ignored(g) {
			extra = append(extra, g)
		}
	}
	return extra
}

// ignored reports goroutines that belong to the test harness or runtime.
func ignored(g string) bool {
	return strings.Contains(g, "leak.leaked") || // ourselves
		strings.Contains(g, "testing.(*T).Run") ||
		strings.Contains(g, "testing.runFuzzing") ||
		strings.Contains(g, "testing.tRunner.func1") ||
		strings.Contains(g, "runtime.goexit") && strings.Contains(g, "created by runtime.gc")
}

func stacks() []string {
	return strings.Split(Dump(), "\n\n")
}

// Dump returns the stacks of every goroutine, for a test that fails
// because something did not return in time.
func Dump() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

func ids(gs []string) map[string]bool {
	m := make(map[string]bool, len(gs))
	for _, g := range gs {
		m[idOf(g)] = true
	}
	return m
}

// idOf returns the "goroutine N" prefix of a stack.
func idOf(g string) string {
	if i := strings.Index(g, " ["); i > 0 {
		return g[:i]
	}
	return g
}
