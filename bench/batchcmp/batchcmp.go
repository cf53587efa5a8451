// Package batchcmp compares ways of posting events to an HTTP collector
// that takes about a millisecond per request: by N workers that each send
// one request per event and wait for it (10 and 100 workers), or through
// crew's batch.Batcher, which sends batches asynchronously. The collector
// is a real net/http server on a loopback port in the same process.
//
// For each way it reports events per second, the CPU time of the process
// (user plus system, from getrusage, so the collector's share is included
// for both) and the allocations, per event. The benchmarks in the test file
// report the same numbers through go test; Run and WriteTable serve the
// bench program.
package batchcmp

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gocrew/crew/batch"
)

// Config describes a comparison.
type Config struct {
	// Events is the number of events each way sends.
	Events int
	// Producers is the number of goroutines producing the events.
	Producers int
	// SyncWorkers lists the worker counts of the synchronous ways.
	SyncWorkers []int
	// BatchSize, MaxWait and Flushes configure the batcher: the most events
	// per request, how long an event waits for a batch at most, and how many
	// requests are in flight at most.
	BatchSize int
	MaxWait   time.Duration
	Flushes   int
	// ServerDelay is how long the collector takes per request.
	ServerDelay time.Duration
}

// DefaultConfig is the standard comparison: 10 and 100 synchronous
// workers against a batcher, on a collector taking 1 ms per request.
var DefaultConfig = Config{
	Events:      10000,
	Producers:   4,
	SyncWorkers: []int{10, 100},
	BatchSize:   100,
	MaxWait:     10 * time.Millisecond,
	Flushes:     4,
	ServerDelay: time.Millisecond,
}

// A Way is one way of sending events, named for reports.
type Way struct {
	Name  string
	conns int // requests in flight at most
	run   func(ctx context.Context, c *client, cfg Config, events int) error
}

// Ways returns the ways cfg compares: one per synchronous worker count,
// then the batcher.
func Ways(cfg Config) []Way {
	var ways []Way
	for _, n := range cfg.SyncWorkers {
		ways = append(ways, Way{
			Name:  "sync-" + strconv.Itoa(n),
			conns: n,
			run: func(ctx context.Context, c *client, cfg Config, events int) error {
				return sendSync(ctx, c, n, cfg.Producers, events)
			},
		})
	}
	return append(ways, Way{Name: "crew-batch", conns: cfg.Flushes, run: sendBatched})
}

// A Result is the measurement of one way.
type Result struct {
	Name     string
	Events   int
	Requests int64         // requests the collector answered
	Elapsed  time.Duration // wall time
	CPU      time.Duration // process user+system time, 0 where unknown
	Allocs   uint64        // heap allocations of the process
	Bytes    uint64        // heap bytes allocated by the process
}

// EventsPerSec returns the throughput.
func (r Result) EventsPerSec() float64 { return float64(r.Events) / r.Elapsed.Seconds() }

// CPUPerEvent returns the process CPU time per event.
func (r Result) CPUPerEvent() time.Duration { return r.CPU / time.Duration(r.Events) }

// AllocsPerEvent returns the allocations per event.
func (r Result) AllocsPerEvent() float64 { return float64(r.Allocs) / float64(r.Events) }

// BytesPerEvent returns the bytes allocated per event.
func (r Result) BytesPerEvent() float64 { return float64(r.Bytes) / float64(r.Events) }

// Run measures every way of cfg, one after the other, each with a fresh
// collector.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Events <= 0 || cfg.Producers <= 0 || cfg.BatchSize <= 0 || cfg.Flushes <= 0 || cfg.MaxWait <= 0 {
		return nil, fmt.Errorf("batchcmp: invalid config %+v", cfg)
	}
	var results []Result
	for _, w := range Ways(cfg) {
		r, err := Measure(ctx, w, cfg, cfg.Events)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	return results, nil
}

// Measure starts a collector, sends events to it the way w says, checks
// that every event arrived, and returns the measurement. Starting and
// stopping the collector are not measured.
func Measure(ctx context.Context, w Way, cfg Config, events int) (Result, error) {
	col, err := startCollector(cfg.ServerDelay)
	if err != nil {
		return Result{}, err
	}
	c := newClient(col.url, w.conns)
	defer func() {
		c.close()
		col.stop()
	}()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	start := time.Now()
	err = w.run(ctx, c, cfg, events)
	elapsed := time.Since(start)
	cpu1 := cpuTime()
	runtime.ReadMemStats(&after)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", w.Name, err)
	}
	if got := col.events.Load(); got != int64(events) {
		return Result{}, fmt.Errorf("%s: the collector received %d events, want %d", w.Name, got, events)
	}
	return Result{
		Name:     w.Name,
		Events:   events,
		Requests: col.requests.Load(),
		Elapsed:  elapsed,
		CPU:      cpu1 - cpu0,
		Allocs:   after.Mallocs - before.Mallocs,
		Bytes:    after.TotalAlloc - before.TotalAlloc,
	}, nil
}

// WriteTable writes results as an aligned text table.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tevents\trequests\tevents/s\tCPU\tCPU/event\tallocs/event\tB/event\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%v\t%v\t%.1f\t%.0f\t\n", r.Name, r.Events, r.Requests,
			r.EventsPerSec(), r.CPU.Round(time.Millisecond), r.CPUPerEvent(), r.AllocsPerEvent(), r.BytesPerEvent())
	}
	return tw.Flush()
}

// sendSync sends each event in its own request from one of workers
// goroutines, which wait for the answer before taking the next event.
func sendSync(ctx context.Context, c *client, workers, producers, events int) error {
	ch := make(chan event, workers)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := make([]byte, 0, 128)
			for ev := range ch {
				buf = ev.appendJSON(buf[:0])
				if err := c.post(ctx, buf); err != nil {
					keepFirst(errs, err)
				}
			}
		})
	}
	produce(producers, events, func(ev event) { ch <- ev })
	close(ch)
	wg.Wait()
	return firstOf(errs)
}

// sendBatched sends the events through a batcher, one request per batch.
func sendBatched(ctx context.Context, c *client, cfg Config, events int) error {
	errs := make(chan error, 1)
	b := batch.New(func(ctx context.Context, evs []event) error {
		buf := make([]byte, 0, len(evs)*64)
		for _, ev := range evs {
			buf = ev.appendJSON(buf)
		}
		return c.post(ctx, buf)
	},
		batch.WithMaxItems(cfg.BatchSize),
		batch.WithMaxWait(cfg.MaxWait),
		batch.WithMaxConcurrentFlushes(cfg.Flushes),
		batch.WithErrorHandler(func(_ context.Context, evs []event, err error) {
			keepFirst(errs, fmt.Errorf("%d events not sent: %w", len(evs), err))
		}))
	produce(cfg.Producers, events, func(ev event) {
		if err := b.Add(ctx, ev); err != nil {
			keepFirst(errs, err)
		}
	})
	if err := b.Close(ctx); err != nil {
		keepFirst(errs, err)
	}
	return firstOf(errs)
}

// produce makes events 0 to n-1 from the given number of goroutines and
// passes each to send.
func produce(producers, n int, send func(event)) {
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for id := p; id < n; id += producers {
				send(event{id: int64(id), kind: kinds[id%len(kinds)], at: time.Now().UnixNano()})
			}
		})
	}
	wg.Wait()
}

// keepFirst keeps err in errs, a channel of capacity 1, unless it holds one.
func keepFirst(errs chan error, err error) {
	select {
	case errs <- err:
	default:
	}
}

// firstOf returns the error kept in errs, if any.
func firstOf(errs chan error) error {
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

var kinds = []string{"view", "click", "purchase"}

// event is what the producers send: a small record encoded as one line of
// JSON.
type event struct {
	id   int64
	kind string
	at   int64
}

// appendJSON appends the event as a line of JSON.
func (e event) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, e.id, 10)
	b = append(b, `,"kind":`...)
	b = strconv.AppendQuote(b, e.kind)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, e.at, 10)
	return append(b, "}\n"...)
}
