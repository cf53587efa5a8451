package main

import (
	"strings"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

func TestRun(t *testing.T) {
	leak.Check(t)
	var out strings.Builder
	if err := run(&out, 3000, 4); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), "sent 3000 events") || !strings.Contains(out.String(), "0 events lost") {
		t.Fatalf("unexpected report:\n%s", out.String())
	}
}
