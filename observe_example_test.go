package crew_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

func ExampleWithHooks() {
	var started, failed, dropped atomic.Int64
	p := crew.New(2, crew.WithQueueSize(0), crew.WithHooks(crew.Hooks{
		TaskStart: func(crew.TaskEvent) { started.Add(1) },
		TaskFinish: func(e crew.TaskEvent) {
			if e.Err != nil {
				failed.Add(1)
				fmt.Println("failed:", e.Err)
			}
		},
		Drop: func(e crew.TaskEvent) { dropped.Add(1) },
	}))

	p.Submit(func(context.Context) error { return errors.New("disk full") }).Wait()
	p.Go(func() {})
	p.Stop()
	p.Go(func() {}) // refused: ErrStopped, a drop
	fmt.Println(started.Load(), "started,", failed.Load(), "failed,", dropped.Load(), "dropped")
	// Output:
	// failed: disk full
	// 2 started, 1 failed, 1 dropped
}

func ExampleWithLatency() {
	p := crew.New(4, crew.WithLatency())
	for range 100 {
		p.Go(func() { spin(100 * time.Microsecond) })
	}
	p.Stop()

	l, _ := p.Latency()
	fmt.Println("tasks:", l.Run.Count)
	fmt.Println("p50 run at least 100µs:", l.Run.Quantile(0.5) >= 97*time.Microsecond)
	fmt.Println("p99 wait <= max wait:", l.Wait.Quantile(0.99) <= l.Wait.Max)
	// Output:
	// tasks: 100
	// p50 run at least 100µs: true
	// p99 wait <= max wait: true
}

func ExampleHistogram() {
	var h crew.Histogram
	for ms := 1; ms <= 1000; ms++ {
		h.Record(time.Duration(ms) * time.Millisecond)
	}
	s := h.Snapshot()
	// Quantiles are within 3.125% of the exact ones (500ms, 900ms, 990ms).
	fmt.Println(s.Count, s.Quantile(0.5).Round(time.Millisecond), s.Quantile(0.9).Round(time.Millisecond),
		s.Quantile(0.99).Round(time.Millisecond), s.Max)
	// Output: 1000 495ms 889ms 990ms 1s
}

func ExampleLatency_Track() {
	p := crew.New(4)
	defer p.Stop()

	// Time one group's tasks on their own.
	var lat crew.Latency
	g := p.Group(context.Background())
	for range 10 {
		g.Go(lat.Track(func(context.Context) error { return nil }))
	}
	g.Wait()
	s := lat.Snapshot()
	fmt.Println(s.Wait.Count, s.Run.Count)
	// Output: 10 10
}

// A named pool's workers carry the pprof label crew.pool=NAME, so CPU and
// goroutine profiles split by pool: go tool pprof -tags shows the split and
// -tagfocus=crew.pool=thumbnails keeps one pool (examples/profile writes a
// CPU profile to try it on). Here a goroutine profile shows two tasks of
// the pool "thumbnails" under its label.
func ExampleWithName() {
	p := crew.New(2, crew.WithName("thumbnails"))
	defer p.Stop()

	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	for range 2 {
		p.Go(func() { wg.Done(); <-release })
	}
	wg.Wait() // both tasks are running
	var buf bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&buf, 1)
	close(release)
	for line := range strings.Lines(buf.String()) {
		// Goroutines with the same stack share a record; one still on its
		// way into <-release has a record of its own.
		if strings.Contains(line, `"crew.pool":"thumbnails"`) {
			fmt.Print(line)
			break
		}
	}
	// Output: # labels: {"crew.pool":"thumbnails"}
}

func ExampleWithLogger() {
	// Drop the time and the stop's duration so that the output is stable.
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{}
			}
			return a
		},
	})
	p := crew.New(2, crew.WithName("mailer"), crew.WithLogger(slog.New(h)))
	var wg sync.WaitGroup
	wg.Add(3)
	for range 3 {
		p.Go(wg.Done)
	}
	wg.Wait()
	p.Stop()
	// Output: level=INFO msg="crew: pool stopped" pool=mailer submitted=3 completed=3 failed=0 panicked=0 dropped=0 cancelled=0
}
