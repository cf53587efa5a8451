package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// workerStop is how long a worker may take to stop after SIGTERM before
// it is killed: asynq's default ShutdownTimeout is 8s.
const workerStop = 20 * time.Second

// A result is what one round measured.
type result struct {
	system     string
	procs      int
	jobs       int
	throughput float64       // jobs/s, from the first enqueue to the last job's first completion
	enqueue    float64       // jobs/s, from the first enqueue to the return of the last
	p50, p99   time.Duration // end-to-end latency of each job's first completion
	duplicates int           // completions past the first of a job
	lost       int           // jobs never completed
}

func (r result) String() string {
	return fmt.Sprintf("%s, worker processes %d: %d jobs, %.0f jobs/s, enqueue %.0f jobs/s, p50 %v, p99 %v, %d duplicates, %d lost",
		r.system, r.procs, r.jobs, r.throughput, r.enqueue, fmtDur(r.p50), fmtDur(r.p99), r.duplicates, r.lost)
}

// runRound runs one round of sys with procs worker processes: it starts
// the store and the workers, enqueues cfg.jobs jobs, waits until each has
// completed once, stops the workers gracefully and the store. Whatever
// happens, no process it started outlives it.
func runRound(ctx context.Context, sys *system, cfg config, procs int) (res result, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "jobqueue-"+sys.name+"-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	st, err := sys.start(ctx, cfg, procs, dir)
	if err != nil {
		return res, roundErr(ctx, cfg, err)
	}
	defer st.close()

	col := newCollector(cfg.jobs)
	exited := make(chan *worker, procs) // a worker that exits before it is stopped
	var workers []*worker
	defer func() { // on an early return
		for _, w := range workers {
			w.kill()
		}
	}()
	for i := range procs {
		wc := workerConfig{addr: st.addr, name: "worker-" + strconv.Itoa(i+1), concurrency: cfg.concurrency, work: cfg.work, asynqCheck: cfg.asynqCheck}
		w, err := startWorker(cfg, sys.name, wc, col, exited)
		if err != nil {
			return res, err
		}
		workers = append(workers, w)
	}
	for _, w := range workers {
		select {
		case <-w.ready:
		case w := <-exited:
			return res, w.failed()
		case <-ctx.Done():
			return res, roundErr(ctx, cfg, fmt.Errorf("waiting for %s to start", w.name))
		}
	}

	start := time.Now()
	enqueued, err := produce(ctx, st, cfg)
	if err != nil {
		return res, roundErr(ctx, cfg, err)
	}
	select {
	case <-col.all:
	case w := <-exited:
		return res, w.failed()
	case <-ctx.Done():
		n, reports := col.progress()
		return res, roundErr(ctx, cfg, fmt.Errorf("%d of %d jobs completed (%d lost so far), %d completions", n, cfg.jobs, cfg.jobs-n, reports))
	}

	// Stop the workers together, as a deployment does.
	for _, w := range workers {
		w.stopping.Store(true)
		w.cmd.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	for _, w := range workers {
		if err := w.wait(workerStop); err != nil {
			errs = append(errs, w.describe(fmt.Errorf("%s: %w", w.name, err)))
		}
		if w.protoErr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.name, w.protoErr))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return col.result(sys.name, procs, start, enqueued), nil
}

// roundErr returns err, saying so if the round timed out or was
// interrupted.
func roundErr(ctx context.Context, cfg config, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("timed out after %v (-timeout): %w", cfg.timeout, err)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", err)
	}
	return err
}

// produce enqueues cfg.jobs jobs through st from cfg.producers goroutines,
// each job stamped with the time just before its Enqueue, and returns
// when the last Enqueue returned.
func produce(ctx context.Context, st *store, cfg config) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range cfg.producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.jobs) {
					return
				}
				if err := st.enqueue(ctx, job{I: int(i), T: time.Now().UnixNano()}); err != nil {
					once.Do(func() {
						first = fmt.Errorf("enqueue job %d: %w", i, err)
						cancel()
					})
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Now(), first
}

// A worker is a worker process.
type worker struct {
	*child
	name     string
	ready    chan struct{} // closed when it wrote "ready"
	isReady  bool          // ready is closed; only its stdout reader uses it
	stopping atomic.Bool   // set before it is sent SIGTERM
	protoErr error         // the first line it wrote that is not a report, read after done
}

// startWorker starts a worker process of system, with the config wc,
// whose completions go to col. If it exits before it is stopped, it is
// sent to exited.
func startWorker(cfg config, system string, wc workerConfig, col *collector, exited chan<- *worker) (*worker, error) {
	cmd := exec.Command(cfg.self, cfg.selfArgs...)
	cmd.Env = append(os.Environ(), wc.env(system)...)
	// The worker exits when its stdin ends, as when this process dies.
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &worker{name: wc.name, ready: make(chan struct{})}
	w.child, err = startChild(cmd, func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if err := w.line(sc.Bytes(), col); err != nil && w.protoErr == nil {
				w.protoErr = err
			}
		}
		if !w.stopping.Load() {
			exited <- w
		}
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", wc.name, err)
	}
	return w, nil
}

// line takes one line of the worker's stdout.
func (w *worker) line(b []byte, col *collector) error {
	if string(b) == "ready" {
		if w.isReady {
			return errors.New("ready twice")
		}
		w.isReady = true
		close(w.ready)
		return nil
	}
	f := bytes.Fields(b)
	if len(f) != 3 {
		return fmt.Errorf("bad report %q", b)
	}
	var n [3]int64
	for k := range f {
		var err error
		if n[k], err = strconv.ParseInt(string(f[k]), 10, 64); err != nil {
			return fmt.Errorf("bad report %q", b)
		}
	}
	return col.add(n[0], n[1], n[2])
}

// failed returns the error of a worker that exited before it was stopped.
func (w *worker) failed() error {
	<-w.done
	err := w.err
	if err == nil {
		err = errors.New("exit status 0")
	}
	return w.describe(fmt.Errorf("%s exited before it was stopped: %w", w.name, err))
}

// A collector gathers the completions of a round's jobs.
type collector struct {
	mu        sync.Mutex
	firstDone []int64 // when each job first completed, Unix ns; 0: not yet
	latency   []int64 // its end-to-end latency then, ns
	distinct  int     // jobs completed
	reports   int     // completions
	all       chan struct{}
}

func newCollector(jobs int) *collector {
	return &collector{firstDone: make([]int64, jobs), latency: make([]int64, jobs), all: make(chan struct{})}
}

// add records that job i completed at done, latency after it was enqueued.
func (c *collector) add(i, latency, done int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= int64(len(c.firstDone)) || done <= 0 {
		return fmt.Errorf("bad report: job %d done at %d", i, done)
	}
	c.reports++
	if c.firstDone[i] == 0 {
		c.firstDone[i], c.latency[i] = done, latency
		if c.distinct++; c.distinct == len(c.firstDone) {
			close(c.all)
		}
	}
	return nil
}

// progress returns the jobs completed and the completions so far.
func (c *collector) progress() (distinct, reports int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.distinct, c.reports
}

// result computes a round's result, the jobs enqueued from start to
// enqueued.
func (c *collector) result(system string, procs int, start, enqueued time.Time) result {
	c.mu.Lock()
	defer c.mu.Unlock()
	jobs := len(c.firstDone)
	last := slices.Max(c.firstDone)
	lat := slices.Clone(c.latency)
	slices.Sort(lat)
	return result{
		system:     system,
		procs:      procs,
		jobs:       jobs,
		throughput: float64(jobs) / (float64(last-start.UnixNano()) / 1e9),
		enqueue:    float64(jobs) / enqueued.Sub(start).Seconds(),
		p50:        time.Duration(percentile(lat, 50)),
		p99:        time.Duration(percentile(lat, 99)),
		duplicates: c.reports - c.distinct,
		lost:       jobs - c.distinct,
	}
}

// percentile returns the p-th percentile of sorted, by nearest rank.
func percentile(sorted []int64, p int) int64 {
	k := (len(sorted)*p + 99) / 100 // ceil(n*p/100)
	return sorted[max(k, 1)-1]
}
