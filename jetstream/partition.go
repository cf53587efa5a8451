package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// Order per key across processes
//
// A partitioned Queue ([WithPartitions]) publishes each job to one of n
// partition subjects, chosen by a hash of its key ([WithKey]), so that a
// key's jobs lie in one subject in the order the stream stored them. A
// [KeyedConsumer] reads each partition through a durable consumer of its
// own whose MaxAckPending is 1: the server hands out a partition's next
// message only once the one before it is acknowledged or terminated,
// whichever process holds it. So:
//
//   - a key's jobs run one at a time, in stream order, in any process;
//   - a job that fails and is handed back (Nak with a backoff) is
//     redelivered before any later job of its partition is delivered;
//   - a job whose process dies is redelivered, to any process, when its
//     AckWait passes, and the partition waits for it meanwhile;
//   - the partitions run in parallel: n is the concurrency limit across
//     the cluster.
//
// The price is head-of-line blocking: a slow or failing job holds up the
// other keys of its partition, and a dead process holds up its partitions
// for an AckWait. Choose n well above the number of processes.

// partitionToken separates a partitioned Queue's subject from the number
// of a partition: the jobs of partition p of subject S are published to
// S.part.<p>.
const partitionToken = "part"

// maxPartitions bounds [WithPartitions]: each partition is a durable
// consumer with a pull open in every process.
const maxPartitions = 4096

// PartitionSubject returns the subject of partition p of the partitioned
// subject subject: subject.part.p.
func PartitionSubject(subject string, p int) string {
	return subject + "." + partitionToken + "." + strconv.Itoa(p)
}

// Partition returns the partition, in [0, n), of the jobs of key: the
// 32-bit FNV-1a hash of key modulo n. It returns 0 for n < 1.
func Partition(key string, n int) int {
	if n < 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(uint64(h.Sum32()) % uint64(n)) // uint32(n) would drop n's high bits
}

// WithPartitions splits the Queue's subject S into n partition subjects,
// S.part.0 to S.part.<n-1> ([PartitionSubject]): every job then needs a
// key ([WithKey]), and goes to its key's partition ([Partition]). A
// [KeyedConsumer] made with the same n runs each key's jobs one at a time
// in stream order, across processes. Every producer and consumer of the
// subject must use the same n: a job enqueued with another n lands in
// another partition, behind or ahead of its key's other jobs. n must be
// between 1 and 4096.
func WithPartitions(n int) QueueOption {
	return partitionsOption(n)
}

type partitionsOption int

func (o partitionsOption) applyQueue(s *queueSettings) error {
	if o < 1 || o > maxPartitions {
		return invalid("WithPartitions(%d): n must be between 1 and %d", int(o), maxPartitions)
	}
	s.partitions = int(o)
	return nil
}

// WithKey gives the job its key on a partitioned Queue ([WithPartitions]):
// jobs with the same key go to the same partition, and a [KeyedConsumer]
// runs them one at a time in the order the stream stored them. Any string
// is a key, the empty one included. On a Queue without partitions,
// Enqueue and Schedule refuse WithKey.
func WithKey(key string) EnqueueOption {
	return enqueueOption(func(s *enqueueSettings) error {
		s.key = &key
		return nil
	})
}

// A KeyedConsumer runs the jobs of a partitioned [Queue] ([WithPartitions])
// so that the jobs of each key run one at a time, in the order the stream
// stored them, across every process that runs a KeyedConsumer of the same
// name, while different partitions run in parallel. Each partition is
// read by a durable consumer of its own with MaxAckPending 1, fed to a
// [Consumer] (one message in flight) on the shared executor: the server
// delivers a partition's next message only after the one before it is
// acknowledged or terminated, so neither a retry (the backoff's Nak), nor
// a process that dies holding a job (redelivered after AckWait), nor a
// server restart lets a later job of the key pass it. A job given up on
// ([Permanent], MaxDeliver, a panic) is dead-lettered and terminated, and
// the key's next job runs. A snoozed job ([Snooze] with [WithSnooze]) is
// published to its partition again, behind the key's later jobs.
//
// The number of partitions is the concurrency limit across the cluster;
// a slow job holds up the other keys of its partition. Make one with
// [NewKeyedConsumer] and start it with [KeyedConsumer.Run].
type KeyedConsumer[T any] struct {
	consumers []*Consumer[T]
	running   sync.Mutex
}

// NewKeyedConsumer creates or updates, through js, the durable consumers
// of the n partitions of the subject cfg.FilterSubject in stream, and
// returns a [KeyedConsumer] that runs handler on ex for their messages.
// The consumer of partition p is named cfg.Durable-p<p>, filters
// [PartitionSubject](cfg.FilterSubject, p), and otherwise has cfg, with
// AckPolicy explicit and MaxAckPending 1. Every process that runs the
// jobs calls NewKeyedConsumer with the same arguments; the first creates
// the consumers. opts are [NewConsumer]'s; each partition's Consumer has
// at most one message in flight and one pull open, whatever they say.
//
// NewKeyedConsumer returns an error wrapping [crew.ErrInvalid], creating
// nothing, for a nil ctx, js, ex or handler, an empty stream or
// cfg.Durable, a cfg.FilterSubject that is empty or has wildcards, cfg
// with FilterSubjects, an AckPolicy other than explicit or a
// MaxAckPending other than 0 or 1, n outside 1 to 4096, and an invalid
// option; and the server's error if a consumer cannot be created. A
// consumer created before an error stays.
func NewKeyedConsumer[T any](ctx context.Context, js natsjs.JetStream, stream string, cfg natsjs.ConsumerConfig, n int, ex crew.Executor, handler Handler[T], opts ...ConsumerOption) (*KeyedConsumer[T], error) {
	if err := checkKeyedConfig(ctx, js, stream, cfg, n, ex, handler); err != nil {
		return nil, err
	}
	opts = append(opts[:len(opts):len(opts)], WithMaxInFlight(1), WithPulls(1))
	// Check the options before creating anything.
	if _, err := newConsumer(noConsumer{}, ex, handler, opts); err != nil {
		return nil, err
	}
	durable := cfg.Durable
	cfg.AckPolicy = natsjs.AckExplicitPolicy
	cfg.MaxAckPending = 1
	filter := cfg.FilterSubject
	kc := &KeyedConsumer[T]{consumers: make([]*Consumer[T], n)}
	for p := range n {
		cfg.Durable = durable + "-p" + strconv.Itoa(p)
		cfg.Name = ""
		cfg.FilterSubject = PartitionSubject(filter, p)
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
		if err != nil {
			return nil, fmt.Errorf("jetstream: consumer %s of %s: %w", cfg.Durable, stream, err)
		}
		kc.consumers[p] = NewConsumer(cons, ex, handler, opts...)
	}
	return kc, nil
}

// checkKeyedConfig returns why NewKeyedConsumer's arguments are invalid.
func checkKeyedConfig[T any](ctx context.Context, js natsjs.JetStream, stream string, cfg natsjs.ConsumerConfig, n int, ex crew.Executor, handler Handler[T]) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, invalid("NewKeyedConsumer: "+format, args...))
	}
	if ctx == nil {
		bad("nil context")
	}
	if js == nil {
		bad("nil JetStream")
	}
	if ex == nil {
		bad("nil executor")
	}
	if handler == nil {
		bad("nil handler")
	}
	if stream == "" {
		bad("empty stream name")
	}
	if cfg.Durable == "" || strings.ContainsAny(cfg.Durable, ".*> \t\r\n") {
		bad("cfg.Durable %q must name the consumers: non-empty, without dots, wildcards or white space", cfg.Durable)
	}
	if err := checkSubject(cfg.FilterSubject); err != nil {
		bad("cfg.FilterSubject: %v", err)
	}
	if len(cfg.FilterSubjects) > 0 {
		bad("cfg.FilterSubjects: each partition's consumer filters its own subject")
	}
	if cfg.AckPolicy != natsjs.AckExplicitPolicy && cfg.AckPolicy != natsjs.AckNonePolicy {
		bad("cfg.AckPolicy %v: the partitions need explicit acks", cfg.AckPolicy)
	}
	if cfg.MaxAckPending != 0 && cfg.MaxAckPending != 1 {
		bad("cfg.MaxAckPending %d: a partition holds one message at a time", cfg.MaxAckPending)
	}
	if n < 1 || n > maxPartitions {
		bad("n = %d: must be between 1 and %d", n, maxPartitions)
	}
	return errors.Join(errs...)
}

// noConsumer stands for a consumer while NewKeyedConsumer checks the
// options; it is never used.
type noConsumer struct{ natsjs.Consumer }

// Partitions returns the number of partitions: 0 for a nil KeyedConsumer.
func (kc *KeyedConsumer[T]) Partitions() int {
	if kc == nil {
		return 0
	}
	return len(kc.consumers)
}

// Run runs a [Consumer] for each partition, as [Consumer.Run] does, until
// ctx is cancelled or one of them stops with an error; then it stops the
// others, each draining as Consumer.Run does, and returns once all have
// returned: nil after a clean drain, else their errors joined. A
// KeyedConsumer runs at most once at a time; Run returns [ErrRunning]
// otherwise. Run returns an error wrapping [crew.ErrInvalid] for a nil
// ctx, and for a nil KeyedConsumer or one not made by [NewKeyedConsumer].
func (kc *KeyedConsumer[T]) Run(ctx context.Context) error {
	if kc == nil || len(kc.consumers) == 0 {
		return invalid("KeyedConsumer.Run: consumer not made by NewKeyedConsumer")
	}
	if ctx == nil {
		return invalid("KeyedConsumer.Run: nil context")
	}
	if !kc.running.TryLock() {
		return ErrRunning
	}
	defer kc.running.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(kc.consumers))
	var wg sync.WaitGroup
	for i, c := range kc.consumers {
		wg.Go(func() {
			if errs[i] = c.Run(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stats returns the sum of the partitions' [Consumer.Stats]: zeros for a
// nil KeyedConsumer.
func (kc *KeyedConsumer[T]) Stats() Stats {
	var sum Stats
	if kc == nil {
		return sum
	}
	for _, c := range kc.consumers {
		sum = sum.plus(c.Stats())
	}
	return sum
}
