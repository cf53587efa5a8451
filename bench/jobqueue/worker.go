package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The environment of a worker process. envWorker names the system; a
// program started with it set is a worker process.
const (
	envWorker      = "CREW_JOBQUEUE_WORKER"
	envAddr        = "CREW_JOBQUEUE_ADDR"
	envName        = "CREW_JOBQUEUE_NAME"
	envConcurrency = "CREW_JOBQUEUE_CONCURRENCY"
	envWork        = "CREW_JOBQUEUE_WORK"
	envAsynqCheck  = "CREW_JOBQUEUE_ASYNQ_CHECK"
)

// workerConfig is what a worker process gets from its environment.
type workerConfig struct {
	addr        string // the store's address
	name        string // worker-1, worker-2...
	concurrency int
	work        time.Duration
	asynqCheck  time.Duration
}

// env returns w as the environment of a worker process of system.
func (w workerConfig) env(system string) []string {
	return []string{
		envWorker + "=" + system,
		envAddr + "=" + w.addr,
		envName + "=" + w.name,
		envConcurrency + "=" + strconv.Itoa(w.concurrency),
		envWork + "=" + w.work.String(),
		envAsynqCheck + "=" + w.asynqCheck.String(),
	}
}

// workerFromEnv reads a workerConfig from the environment.
func workerFromEnv() (workerConfig, error) {
	w := workerConfig{addr: os.Getenv(envAddr), name: os.Getenv(envName)}
	var err error
	if w.concurrency, err = strconv.Atoi(os.Getenv(envConcurrency)); err != nil || w.concurrency < 1 {
		return w, fmt.Errorf("%s=%q: not a positive count", envConcurrency, os.Getenv(envConcurrency))
	}
	if w.work, err = time.ParseDuration(os.Getenv(envWork)); err != nil || w.work < 0 {
		return w, fmt.Errorf("%s=%q: not a duration", envWork, os.Getenv(envWork))
	}
	if w.asynqCheck, err = time.ParseDuration(os.Getenv(envAsynqCheck)); err != nil || w.asynqCheck < 0 {
		return w, fmt.Errorf("%s=%q: not a duration", envAsynqCheck, os.Getenv(envAsynqCheck))
	}
	if w.addr == "" {
		return w, fmt.Errorf("%s is empty", envAddr)
	}
	return w, nil
}

// workerMain is a worker process of the system named role: it runs that
// system's worker until SIGTERM or SIGINT, then stops gracefully and
// returns its exit code. It writes "ready" to stdout once it takes jobs,
// then a line per completed job (see reporter). When its stdin ends, the
// parent is gone, and it exits at once.
func workerMain(role string) int {
	sys, ok := systemsByName[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "jobqueue worker: unknown system %q\n", role)
		return 2
	}
	w, err := workerFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobqueue worker:", err)
		return 2
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := newReporter(os.Stdout)
	defer rep.close()
	handle := func(ctx context.Context, j job) error {
		if w.work > 0 {
			t := time.NewTimer(w.work)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		rep.done(j)
		return nil
	}
	if err := sys.work(ctx, w, rep.ready, handle); err != nil {
		fmt.Fprintf(os.Stderr, "jobqueue %s: %v\n", w.name, err)
		return 1
	}
	return 0
}

// A reporter writes a worker's completions to the parent: a line
// "index latency done" per job, the latency and the completion time in
// nanoseconds (done in Unix time), buffered and flushed every few
// milliseconds. A write that fails means the parent is gone: the process
// exits.
type reporter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	line []byte
	stop chan struct{}
	wg   sync.WaitGroup
}

// flushEvery is how often a reporter flushes: it delays the parent's view
// of the completions, not their times.
const flushEvery = 5 * time.Millisecond

func newReporter(w io.Writer) *reporter {
	r := &reporter{w: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{})}
	r.wg.Go(func() {
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.mu.Lock()
				r.flush()
				r.mu.Unlock()
			case <-r.stop:
				return
			}
		}
	})
	return r
}

// ready reports that the worker takes jobs.
func (r *reporter) ready() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w.WriteString("ready\n")
	r.flush()
}

// done reports that j has completed now.
func (r *reporter) done(j job) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := strconv.AppendInt(r.line[:0], int64(j.I), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, now-j.T, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, now, 10)
	b = append(b, '\n')
	r.line = b
	if _, err := r.w.Write(b); err != nil {
		os.Exit(3)
	}
}

// flush flushes the buffer; r.mu is held.
func (r *reporter) flush() {
	if err := r.w.Flush(); err != nil {
		os.Exit(3)
	}
}

// close stops the flushing and flushes what is left.
func (r *reporter) close() {
	close(r.stop)
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flush()
}
