package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// A job is the payload of every job, in both systems, encoded as JSON.
type job struct {
	I int   `json:"i"` // its index, from 0
	T int64 `json:"t"` // when it was enqueued, Unix nanoseconds
}

// A system is one of the job queues compared.
type system struct {
	name string
	// describe says, for the report, what runs and how durable the store is.
	describe func(cfg config, redis string) string
	// start starts the store, storing in dir, ready for procs worker
	// processes and for enqueueing.
	start func(ctx context.Context, cfg config, procs int, dir string) (*store, error)
	// work runs a worker process until ctx ends, then stops gracefully:
	// it calls ready once it takes jobs, and handle for each job.
	work func(ctx context.Context, w workerConfig, ready func(), handle func(context.Context, job) error) error
}

// A store is a running store with a producer's client.
type store struct {
	addr    string                                 // where the workers connect
	enqueue func(ctx context.Context, j job) error // safe for concurrent use
	close   func()                                 // closes the client, stops the store
}

var systemsByName = map[string]*system{
	"crew":  {name: "crew", describe: describeCrew, start: startCrew, work: crewWorker},
	"asynq": {name: "asynq", describe: describeAsynq, start: startAsynq, work: asynqWorker},
}

// The names in the store.
const (
	jobStream   = "JOBS"
	jobSubject  = "jobs.run"
	jobConsumer = "workers"
	taskType    = "job"
)

func describeCrew(cfg config, _ string) string {
	d := "stream in memory (a store crash loses the queued jobs)"
	if cfg.durable {
		sync := "the server's default sync interval, 2m"
		if cfg.natsSync > 0 {
			sync = fmt.Sprintf("sync interval %v", cfg.natsSync)
		}
		d = "stream on file storage: each message written to the OS when stored, fsync every interval (" + sync + ")"
	}
	return fmt.Sprintf("crewjs.Queue.Enqueue; worker: crewjs.NewConsumer of a durable pull consumer (explicit ack, after the handler) over crew.New(%d); embedded nats-server %s with JetStream, %s; at least once",
		cfg.concurrency, modVersion("github.com/nats-io/nats-server/v2"), d)
}

func describeAsynq(cfg config, redis string) string {
	d := "no persistence (--save '' --appendonly no: a store crash loses the queued jobs)"
	if cfg.durable {
		d = "append-only file, fsync every second (--appendonly yes --appendfsync everysec)"
	}
	check := "default options"
	if cfg.asynqCheck > 0 {
		check = fmt.Sprintf("TaskCheckInterval %v, other options default", cfg.asynqCheck)
	}
	return fmt.Sprintf("asynq %s Client.Enqueue; worker: asynq.NewServer with Concurrency %d, %s, and a ServeMux; %s, %s; at least once",
		modVersion("github.com/hibiken/asynq"), cfg.concurrency, check, redis, d)
}

// modVersion returns the version of module path in this build.
func modVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(version unknown)"
}

// startCrew starts an embedded nats-server with JetStream on a random
// loopback port, creates the stream and the durable consumer, and returns
// a store that enqueues through a crewjs.Queue.
func startCrew(ctx context.Context, cfg config, procs int, dir string) (*store, error) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	if cfg.natsSync > 0 {
		opts.SyncInterval = cfg.natsSync
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	srv.Start()
	stop := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, errors.New("nats-server not ready after 10s")
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("producer"))
	if err != nil {
		stop()
		return nil, err
	}
	closeAll := func() {
		nc.Close()
		stop()
	}
	storage := natsjs.MemoryStorage
	if cfg.durable {
		storage = natsjs.FileStorage
	}
	js, err := natsjs.New(nc)
	if err == nil {
		_, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: jobStream, Subjects: []string{jobSubject}, Storage: storage})
	}
	if err == nil {
		// MaxAckPending bounds the jobs all workers hold together (1000 by
		// default): raise it where the workers' handlers outnumber it.
		maxAck := 0
		if n := procs * cfg.concurrency; n > 1000 {
			maxAck = n
		}
		_, err = js.CreateOrUpdateConsumer(ctx, jobStream, natsjs.ConsumerConfig{
			Durable:       jobConsumer,
			FilterSubject: jobSubject,
			AckPolicy:     natsjs.AckExplicitPolicy,
			MaxAckPending: maxAck,
		})
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("JetStream setup: %w", err)
	}
	q := crewjs.NewQueue[job](js, jobSubject)
	return &store{
		addr: srv.ClientURL(),
		enqueue: func(ctx context.Context, j job) error {
			_, err := q.Enqueue(ctx, j)
			return err
		},
		close: closeAll,
	}, nil
}

// crewWorker runs a crewjs.Consumer of the durable consumer over a crew
// pool of w.concurrency workers, as the jetstream README does.
func crewWorker(ctx context.Context, w workerConfig, ready func(), handle func(context.Context, job) error) error {
	nc, err := nats.Connect(w.addr, nats.Name(w.name))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, jobStream, jobConsumer)
	if err != nil {
		return err
	}
	pool := crew.New(w.concurrency, crew.WithName(w.name))
	defer pool.Stop()
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[job]) error {
		return handle(ctx, m.Value)
	})
	ready()
	return c.Run(ctx) // until SIGTERM; then drains
}

// startAsynq starts redis-server as a child process on a random loopback
// port and returns a store that enqueues through an asynq.Client.
func startAsynq(ctx context.Context, cfg config, _ int, dir string) (*store, error) {
	r, err := startRedis(ctx, dir, cfg.durable)
	if err != nil {
		return nil, err
	}
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: r.addr})
	return &store{
		addr: r.addr,
		enqueue: func(ctx context.Context, j job) error {
			payload, err := json.Marshal(j)
			if err != nil {
				return err
			}
			_, err = client.EnqueueContext(ctx, asynq.NewTask(taskType, payload))
			return err
		},
		close: func() {
			client.Close()
			r.close()
		},
	}, nil
}

// asynqWorker runs an asynq.Server with w.concurrency workers and default
// options otherwise, and a ServeMux with the handler.
func asynqWorker(ctx context.Context, w workerConfig, ready func(), handle func(context.Context, job) error) error {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: w.addr}, asynq.Config{
		Concurrency:       w.concurrency,
		TaskCheckInterval: w.asynqCheck, // 0: asynq's default
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(taskType, func(ctx context.Context, t *asynq.Task) error {
		var j job
		if err := json.Unmarshal(t.Payload(), &j); err != nil {
			return fmt.Errorf("decode %q: %v: %w", t.Payload(), err, asynq.SkipRetry)
		}
		return handle(ctx, j)
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	ready()
	<-ctx.Done() // SIGTERM, as Server.Run waits for
	srv.Shutdown()
	return nil
}
