package crew_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// within fails the test if f does not return within the deadline: the
// test's guard against hangs.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// crashes runs the calling test again in a child process, where it calls
// child instead, and fails unless the child crashes with "panic: crash me"
// within groupDeadline: for WithCrashOnPanic, whose panics must end the
// program at once.
func crashes(t *testing.T, child func()) {
	t.Helper()
	const env = "CREW_CRASH_CHILD"
	if os.Getenv(env) == t.Name() {
		child()
		fmt.Println("the child did not crash")
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the child hung instead of crashing; output:\n%s", out)
	case err == nil || !strings.Contains(string(out), "panic: crash me") || strings.Contains(string(out), "did not crash"):
		t.Fatalf("child: err %v, output:\n%s", err, out)
	}
}

// notDone counts the tasks whose Done channel is not yet closed.
func notDone(tasks []*crew.Task) int {
	n := 0
	for _, task := range tasks {
		select {
		case <-task.Done():
		default:
			n++
		}
	}
	return n
}
