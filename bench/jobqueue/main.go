// Command jobqueue compares crew's JetStream job queue
// (github.com/gocrew/crew/jetstream) with asynq (github.com/hibiken/asynq)
// on a real redis-server: the same jobs, enqueued by a producer in this
// process and run by worker processes, copies of this program.
//
// For each system and each worker-process count it starts the store (an
// embedded nats-server with JetStream, or redis-server as a child process),
// starts the worker processes, enqueues the jobs from several goroutines
// and waits until every job has completed at least once. Each worker
// reports every completion (the job's index and its end-to-end latency,
// from the enqueue to the end of the handler) on its standard output. The
// rounds alternate between the systems, and the table reports the median
// of the rounds.
//
//	go run . -procs 1,2,4 -jobs 20000 -rounds 3
//	go run . -durable
//
// It needs redis-server on PATH for asynq (Debian or Ubuntu: apt-get
// install -y redis-server; macOS: brew install redis), or -systems crew.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is what the command line asks for.
type config struct {
	systems     []string      // names of the systems, in the order they run
	procs       []int         // worker-process counts
	jobs        int           // jobs per round
	concurrency int           // handlers running at once in each worker process
	producers   int           // goroutines enqueueing in the parent
	work        time.Duration // each job's sleep before it completes
	rounds      int           // rounds per system and process count
	durable     bool          // stores that persist each job, see durability
	natsSync    time.Duration // JetStream's fsync interval with -durable; 0: the server's default
	asynqCheck  time.Duration // asynq's TaskCheckInterval; 0: asynq's default
	timeout     time.Duration // the most one round may take
	self        string        // the program a worker process runs
	selfArgs    []string      // its arguments
}

// errUsage marks errors in the command line: the command exits with 2.
// errParsed marks those the flag package has reported already.
var (
	errUsage  = errors.New("bad command line")
	errParsed = errors.New("reported")
)

func main() {
	if role := os.Getenv(envWorker); role != "" {
		os.Exit(workerMain(role))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command with args, writing the table to stdout and the
// progress to stderr, and returns the exit code: 0, 1 on a failure, 2 on
// a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errParsed) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "jobqueue: %v\nRun jobqueue -h for the flags.\n", err)
		return 2
	}
	if cfg.self == "" {
		if cfg.self, err = os.Executable(); err != nil {
			fmt.Fprintln(stderr, "jobqueue:", err)
			return 1
		}
	}
	if err := measure(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "jobqueue:", err)
		return 1
	}
	return 0
}

// parseFlags parses and checks the command line; its errors wrap errUsage,
// or are flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("jobqueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	systems := fs.String("systems", "crew,asynq", "systems to compare, comma-separated: crew, asynq")
	procs := fs.String("procs", "1,2,4", "worker-process counts, comma-separated")
	var cfg config
	fs.IntVar(&cfg.jobs, "jobs", 20000, "jobs per round")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "handlers running at once in each worker process")
	fs.IntVar(&cfg.producers, "producers", 8, "goroutines enqueueing the jobs")
	fs.DurationVar(&cfg.work, "work", 0, "each job's work, a sleep (0: a no-op job)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds per system and process count; the table reports their median")
	fs.BoolVar(&cfg.durable, "durable", false, "persist the jobs: redis appendonly (fsync every second), JetStream file storage")
	fs.DurationVar(&cfg.natsSync, "nats-sync", 0, "with -durable, JetStream's fsync interval (0: the server's default, 2m; 1s matches redis)")
	fs.DurationVar(&cfg.asynqCheck, "asynq-check", 0, "asynq's TaskCheckInterval, its poll of an empty queue (0: asynq's default, 1s)")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "the most one round may take")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: jobqueue [flags]\n\nCompares crew's JetStream job queue with asynq on redis-server.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %w: %v", errUsage, errParsed, err)
	}
	bad := func(format string, a ...any) (config, error) {
		return cfg, fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(*systems, ",") {
		s = strings.TrimSpace(s)
		if _, ok := systemsByName[s]; !ok {
			return bad("-systems: unknown system %q (want crew, asynq)", s)
		}
		if slices.Contains(cfg.systems, s) {
			return bad("-systems: %q given twice", s)
		}
		cfg.systems = append(cfg.systems, s)
	}
	for _, p := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 64 {
			return bad("-procs: %q is not a process count from 1 to 64", p)
		}
		cfg.procs = append(cfg.procs, n)
	}
	switch {
	case cfg.jobs < 1:
		return bad("-jobs %d: must be at least 1", cfg.jobs)
	case cfg.concurrency < 1 || cfg.concurrency > 100000:
		return bad("-concurrency %d: must be from 1 to 100000", cfg.concurrency)
	case cfg.producers < 1 || cfg.producers > 10000:
		return bad("-producers %d: must be from 1 to 10000", cfg.producers)
	case cfg.work < 0:
		return bad("-work %v: must not be negative", cfg.work)
	case cfg.rounds < 1:
		return bad("-rounds %d: must be at least 1", cfg.rounds)
	case cfg.natsSync < 0:
		return bad("-nats-sync %v: must not be negative", cfg.natsSync)
	case cfg.natsSync > 0 && !cfg.durable:
		return bad("-nats-sync applies to -durable only: without it the stream is in memory")
	case cfg.asynqCheck < 0:
		return bad("-asynq-check %v: must not be negative", cfg.asynqCheck)
	case cfg.timeout <= 0:
		return bad("-timeout %v: must be positive", cfg.timeout)
	}
	return cfg, nil
}

// measure runs the rounds cfg asks for and writes the report to stdout,
// each round's result to stderr as it comes.
func measure(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	redis := ""
	if slices.Contains(cfg.systems, "asynq") {
		var err error
		if redis, err = redisVersion(); err != nil {
			return err
		}
	}
	results := map[string]map[int][]result{}
	for _, procs := range cfg.procs {
		for r := range cfg.rounds {
			for _, name := range cfg.systems {
				res, err := runRound(ctx, systemsByName[name], cfg, procs)
				if err != nil {
					return fmt.Errorf("%s, %d worker processes, round %d: %w", name, procs, r+1, err)
				}
				fmt.Fprintf(stderr, "round %d: %s\n", r+1, res)
				if results[name] == nil {
					results[name] = map[int][]result{}
				}
				results[name][procs] = append(results[name][procs], res)
			}
		}
	}
	fmt.Fprintf(stdout, "%d jobs a round, %d producer goroutines, %d handlers per worker process, work %v; median of %d rounds, systems alternating.\n",
		cfg.jobs, cfg.producers, cfg.concurrency, cfg.work, cfg.rounds)
	fmt.Fprintf(stdout, "Machine: %s/%s, %d CPUs, %s. Stores on loopback.\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	for _, name := range cfg.systems {
		fmt.Fprintf(stdout, "- %s: %s\n", name, systemsByName[name].describe(cfg, redis))
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, cfg, results)
	return nil
}

// lookRedis returns the path of redis-server, or an error that says how
// to install it.
func lookRedis() (string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server is not on PATH; asynq needs it: install it (Debian or Ubuntu: apt-get install -y redis-server; macOS: brew install redis) or run with -systems crew")
	}
	return path, nil
}
