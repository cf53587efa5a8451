package crew_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// A minimal reader of the pprof profile format (profile.proto: gzipped
// protocol buffers), enough to count a CPU profile's samples by label.
// Field numbers: Profile.sample = 2, Profile.string_table = 6;
// Sample.value = 2 (packed), Sample.label = 3; Label.key = 1, Label.str = 2.

type protoField struct {
	num   int
	wire  int
	value uint64 // varint
	bytes []byte // length-delimited
}

func protoFields(b []byte) ([]protoField, error) {
	var fs []protoField
	for len(b) > 0 {
		key, n := protoVarint(b)
		if n == 0 {
			return nil, errors.New("bad key")
		}
		b = b[n:]
		f := protoField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.value, n = protoVarint(b)
			if n == 0 {
				return nil, errors.New("bad varint")
			}
			b = b[n:]
		case 2:
			l, n := protoVarint(b)
			if n == 0 || uint64(len(b)-n) < l {
				return nil, errors.New("bad length")
			}
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		case 1:
			b = b[8:]
		case 5:
			b = b[4:]
		default:
			return nil, fmt.Errorf("wire type %d", f.wire)
		}
		fs = append(fs, f)
	}
	return fs, nil
}

func protoVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// cpuSamplesByLabel reads a CPU profile and returns, for each value of
// label key (and "" for samples without it), the number of samples.
func cpuSamplesByLabel(t *testing.T, prof []byte, key string) map[string]int64 {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(prof))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	top, err := protoFields(raw)
	if err != nil {
		t.Fatal(err)
	}
	var strs []string
	var samples [][]byte
	for _, f := range top {
		switch f.num {
		case 6:
			strs = append(strs, string(f.bytes))
		case 2:
			samples = append(samples, f.bytes)
		}
	}
	counts := map[string]int64{}
	for _, s := range samples {
		fs, err := protoFields(s)
		if err != nil {
			t.Fatal(err)
		}
		var n int64 // value[0]: the number of samples
		value := ""
		for _, f := range fs {
			switch {
			case f.num == 2 && f.wire == 2: // packed values
				v, _ := protoVarint(f.bytes)
				n = int64(v)
			case f.num == 2 && f.wire == 0 && n == 0:
				n = int64(f.value)
			case f.num == 3:
				lf, err := protoFields(f.bytes)
				if err != nil {
					t.Fatal(err)
				}
				var k, v uint64
				for _, l := range lf {
					switch l.num {
					case 1:
						k = l.value
					case 2:
						v = l.value
					}
				}
				if int(k) < len(strs) && strs[k] == key && int(v) < len(strs) {
					value = strs[v]
				}
			}
		}
		counts[value] += n
	}
	return counts
}

// The CPU time of two named pools shows up in a real CPU profile under
// each pool's label, in proportion to the work each did.
func TestNamedPoolsSplitTheCPUProfile(t *testing.T) {
	leak.Check(t)
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Skipf("cannot profile: %v", err) // go test -cpuprofile is on
	}
	resize := crew.New(2, crew.WithName("resize"))
	hash := crew.New(2, crew.WithName("hash"))
	// 3:1 work: 180 and 60 tasks of 3 ms of CPU each, about 0.7 s of CPU:
	// enough samples at 100 Hz even when the host steals some.
	for i := range 240 {
		p := resize
		if i%4 == 3 {
			p = hash
		}
		p.Go(func() { spin(3 * time.Millisecond) })
	}
	resize.Stop()
	hash.Stop()
	pprof.StopCPUProfile()

	counts := cpuSamplesByLabel(t, prof.Bytes(), crew.ProfileLabel)
	r, h := counts["resize"], counts["hash"]
	t.Logf("CPU samples by %s: %v", crew.ProfileLabel, counts)
	if r == 0 || h == 0 {
		t.Fatalf("samples resize=%d hash=%d; want both pools in the profile", r, h)
	}
	// Profiling samples are noisy; the 3:1 split shows within wide bounds,
	// judged only when there are enough samples to judge it by.
	if r+h < 30 {
		t.Logf("only %d labelled samples: split not judged", r+h)
	} else if share := float64(r) / float64(r+h); share < 0.55 || share > 0.92 {
		t.Errorf("resize has %.0f%% of the labelled samples, want about 75%%", 100*share)
	}
}

// Parked workers of a named pool carry its label in the goroutine profile.
func TestNamedPoolLabelsGoroutineProfile(t *testing.T) {
	leak.Check(t)
	p := crew.New(2, crew.WithName("parked-workers"), crew.WithMinWorkers(2))
	defer p.Stop()
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	for range 2 {
		p.Go(func() { wg.Done(); <-release })
	}
	wg.Wait()
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 1)
	close(release)
	if want := `"crew.pool":"parked-workers"`; !strings.Contains(buf.String(), want) {
		t.Fatalf("goroutine profile has no %s:\n%s", want, buf.String())
	}
}

// workerLabels returns the goroutine profile's record of the goroutine
// blocked in blockedWorker.
func workerLabels(t *testing.T, p *crew.Pool) string {
	t.Helper()
	release, started := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(started); blockedWorker(release) })
	<-started
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 1)
	close(release)
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(rec, "blockedWorker") {
			return rec
		}
	}
	t.Fatal("the worker is not in the goroutine profile")
	return ""
}

//go:noinline
func blockedWorker(release chan struct{}) { <-release }

// A named pool's worker keeps its label after a task that calls pprof.Do
// with the context it received: pprof.Do restores that context's labels
// when it returns, and if those were none the worker would run without the
// label for the rest of its life.
func TestNamedPoolLabelSurvivesPprofDoInATask(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithName("relabelled"), crew.WithMinWorkers(1))
	defer p.Stop()
	if err := p.Submit(func(ctx context.Context) error {
		pprof.Do(ctx, pprof.Labels("request", "a"), func(context.Context) {})
		return nil
	}).Wait(); err != nil {
		t.Fatal(err)
	}
	if rec := workerLabels(t, p); !strings.Contains(rec, `"crew.pool":"relabelled"`) {
		t.Fatalf("the worker lost its label:\n%s", rec)
	}
}

// A named pool's workers carry its label alone, not the labels of the
// context given WithContext.
func TestNamedPoolWorkersDoNotCarryTheParentsLabels(t *testing.T) {
	leak.Check(t)
	parent := pprof.WithLabels(context.Background(), pprof.Labels("request", "first"))
	p := crew.New(1, crew.WithName("named"), crew.WithContext(parent), crew.WithMinWorkers(1))
	defer p.Stop()
	if rec := workerLabels(t, p); strings.Contains(rec, `"request":"first"`) || !strings.Contains(rec, `"crew.pool":"named"`) {
		t.Fatalf("want the pool's label alone:\n%s", rec)
	}
}

// A worker does not keep the profile labels of the producer that started
// it: it runs everybody's tasks, so an unnamed pool's worker started
// inside pprof.Do must not carry that request's label for life.
func TestWorkerDoesNotInheritItsStartersLabels(t *testing.T) {
	leak.Check(t)
	p := crew.New(1)
	defer p.Stop()
	done := make(chan struct{})
	pprof.Do(context.Background(), pprof.Labels("request", "first"), func(context.Context) {
		p.Go(func() { close(done) }) // starts the worker
	})
	<-done
	if rec := workerLabels(t, p); strings.Contains(rec, `"request":"first"`) {
		t.Fatalf("a later task runs under the first producer's labels:\n%s", rec)
	}
}

// Tasks of a named pool run in a runtime/trace region named after it while
// a trace is being recorded.
func TestNamedPoolTraceRegions(t *testing.T) {
	leak.Check(t)
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("cannot trace: %v", err) // go test -trace is on
	}
	p := crew.New(2, crew.WithName("traced-pool-region"))
	for range 10 {
		p.Go(func() { spin(10 * time.Microsecond) })
	}
	p.Stop()
	trace.Stop()
	// The trace names each region type once in its string table.
	if !bytes.Contains(buf.Bytes(), []byte("traced-pool-region")) {
		t.Fatal("the trace does not mention the pool's region")
	}
}
