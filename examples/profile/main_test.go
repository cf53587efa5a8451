package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocrew/crew/internal/leak"
)

func TestRunWritesALabelledProfile(t *testing.T) {
	leak.Check(t)
	path := filepath.Join(t.TempDir(), "cpu.prof")
	var out strings.Builder
	// Enough hashing (about 0.25 s of CPU) for the 100 Hz profiler to
	// sample the checksum pool every time.
	if err := run(&out, path, 30, 100); err != nil {
		t.Skipf("cannot profile: %v", err) // go test -cpuprofile is on
	}
	for _, want := range []string{"resize: 30 tasks", "checksum: 100 tasks", "wrote " + path} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	// The label's key and values are in the profile's string table (the
	// core's labels_test.go decodes the samples themselves).
	for _, s := range []string{"crew.pool", "resize", "checksum"} {
		if !bytes.Contains(raw, []byte(s)) {
			t.Errorf("the profile does not mention %q", s)
		}
	}
}
