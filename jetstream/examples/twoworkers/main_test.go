package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain makes the test binary a worker process when run() starts it as
// one, as the example program does with itself.
func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "worker" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

func runExample(t *testing.T, n int, kill bool) string {
	t.Helper()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	// The worker processes run this test binary; -test.run=^$ keeps them
	// from running tests should TestMain ever not intercept them.
	if err := run(&out, self, []string{"-test.run=^$"}, n, kill); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	return out.String()
}

func TestTwoWorkers(t *testing.T) {
	out := runExample(t, 600, false)
	for _, want := range []string{"600 orders published and acknowledged", "worker-1: processed", "worker-2: processed", "0 lost", "every order was processed exactly once"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestTwoWorkersOneKilled(t *testing.T) {
	out := runExample(t, 1200, true)
	for _, want := range []string{"worker-1 killed", "0 lost", "processed at least once"} {
		if !strings.Contains(out, want) && !(want == "processed at least once" && strings.Contains(out, "exactly once")) {
			t.Errorf("output lacks %q", want)
		}
	}
}
