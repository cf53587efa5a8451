// Package stress holds what the stress tests of crew's packages share: how
// long they run and the seeds of their randomized rounds.
//
// A stress test runs for about 2 s, 30 s with CREW_STRESS=long, and not at
// all with -short or CREW_STRESS=off. CREW_STRESS_SEED=n makes a randomized
// test run every round with seed n, to replay a failure.
package stress

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Budget returns how long the stress test t runs, or skips t.
func Budget(t testing.TB) time.Duration {
	t.Helper()
	switch mode := strings.ToLower(os.Getenv("CREW_STRESS")); {
	case testing.Short():
		t.Skip("stress test: skipped with -short")
	case mode == "off":
		t.Skip("stress test: CREW_STRESS=off")
	case mode == "long":
		return 30 * time.Second
	}
	return 2 * time.Second
}

// Seed returns the first round's seed, and whether every round uses it:
// CREW_STRESS_SEED=n, or else a seed of the clock's, which it logs.
func Seed(t testing.TB) (seed uint64, same bool) {
	t.Helper()
	s := os.Getenv("CREW_STRESS_SEED")
	if s == "" {
		seed = uint64(time.Now().UnixNano())
		t.Logf("first seed %d", seed)
		return seed, false
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("CREW_STRESS_SEED=%q: %v", s, err)
	}
	t.Logf("every round with seed %d", seed)
	return seed, true
}
