// Package jetstream runs crew pools on NATS JetStream. A [Consumer] feeds
// the messages of a JetStream pull consumer to a [crew.Pool] or another
// [crew.Executor], and a
// [Publisher] publishes items to a stream in batches, so that bounded,
// panic-safe, observable execution spans many machines and a message is
// not lost when one of them dies.
//
// The package's name is that of the NATS package it builds on,
// [github.com/nats-io/nats.go/jetstream]; import one of them under another
// name, for example crewjs. In these docs, natsjs stands for the NATS one.
//
// # Consuming
//
// Create or look up a durable pull consumer with the explicit ack policy
// ([natsjs.AckExplicitPolicy]), make a pool with [crew.New], and pass both
// to [NewConsumer] with a [Handler]. [Consumer.Run] then fetches and
// processes messages until its context is cancelled, and drains:
//
//	pool := crew.New(16, crew.WithQueueSize(0))
//	defer pool.Stop()
//	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Order]) error {
//		return ship(ctx, m.Value)
//	}, crewjs.WithDeadLetter(js, "orders.dead"))
//	err := c.Run(ctx)
//
// The Consumer fetches only as many messages as it has room for
// ([WithMaxInFlight]), runs the handler for each on the pool, acknowledges
// the ones handled, hands back the failed ones with a backoff
// ([WithBackoff], [ExponentialBackoff]) until the consumer's MaxDeliver,
// dead-letters ([WithDeadLetter]) and terminates the ones that panic or
// fail with a [Permanent] error, sends in-progress heartbeats while tasks
// run ([WithHeartbeat]), abandons handlers that outlive a job timeout
// ([WithJobTimeout]), and drains on shutdown ([WithDrainTimeout]).
// Several processes running Consumers of the same durable consumer share
// its messages; when one dies, the server redelivers the messages it held
// to the others once their AckWait passes. Messages given up on are
// reported to the error handler ([WithErrorHandler]) as a [MessageError],
// and [Consumer.Stats] counts what happened to them.
//
// # Executors and layers
//
// [NewConsumer] takes any [crew.Executor]: a [crew.Pool], a [crew.Subpool]
// that gives the consumer a share of a pool, or a [crew.RateLimited] that
// starts its messages at a rate. [WithKeyed] routes the messages through a
// [crew.Keyed], so that those with the same key (an account, an entity)
// are handled one at a time in the order received, and [WithPriority]
// through a [crew.Priority], so that the held message of highest priority
// starts first; the layer may be shared with local work. A message waiting
// in a layer's queue is held like a running one: it counts against
// [WithMaxInFlight], gets heartbeats, and is handed back, never acked
// unprocessed, when the drain timeout passes before it runs. Raise
// WithMaxInFlight above the executor's limit for a layer to have messages
// to choose from:
//
//	pool := crew.New(16)
//	defer pool.Stop()
//	byAccount := crew.NewKeyed[string](pool)
//	c := crewjs.NewConsumer(cons, pool, handle,
//		crewjs.WithKeyed(byAccount, func(m crewjs.Msg[Order]) string { return m.Value.Account }),
//		crewjs.WithMaxInFlight(64))
//
// These apply within one Consumer. Across the cluster, the durable
// consumer's MaxAckPending bounds the messages that all its Consumers hold
// unacknowledged together: a MaxAckPending of 1 handles one message at a
// time across the cluster.
//
// # Publishing
//
// [NewPublisher] returns a [Publisher], a [batch.Batcher] whose flushes
// publish to a JetStream subject and wait for the publish
// acknowledgements, with a message id per item, so that a retried flush
// does not store an item twice. [Publisher.Add] queues an item,
// [Publisher.Flush] publishes what was added so far, and [Publisher.Close]
// publishes the rest and stops. [WithBatch] sets the batcher's options.
//
// # Jobs
//
// A [Queue] enqueues jobs one at a time: [Queue.Enqueue] waits for the
// stream to store the job and returns its stream sequence. A job may be
// delayed ([WithDelay], [WithRunAt]), carry a unique id that the stream
// stores once within its duplicate window ([WithUniqueID], [ErrDuplicate],
// [Queue.DuplicateWindow]), a time to live ([WithTTL]) and headers
// ([WithHeader]); [Queue.Schedule] makes a periodic job (every interval, or
// a cron expression), which [Queue.Unschedule] deletes. Delayed and
// periodic jobs are the server's message schedules (nats-server 2.12 for
// delays, 2.14 for periodic schedules), stored in the stream next to the
// jobs, on S.schedule.<token> for the Queue's subject S. A [Consumer] runs
// the jobs; its [Handler] may return [Snooze](d) to have a job run again
// later without counting an attempt ([WithSnooze], [Msg.Attempt]), or a
// [Permanent] error to give it up at once.
//
// [WithHeaderInjector] writes what the context of Enqueue carries, a
// trace context for example, into the job's headers, and
// [WithContextExtractor] reads it back into the handler's context; the
// package github.com/gocrew/crew/exporters/crewotel has such a pair for
// OpenTelemetry, which this package does not depend on.
//
//	q := crewjs.NewQueue[Email](js, "jobs.email")
//	seq, err := q.Enqueue(ctx, Email{To: to}, crewjs.WithDelay(time.Minute), crewjs.WithUniqueID("welcome-"+to))
//
// # Dead letters
//
// [NewDeadLetters] returns the [DeadLetters] of the subject given to
// [WithDeadLetter], read from the stream that holds it:
// [DeadLetters.List] ranges over them, oldest first, [DeadLetters.Get]
// reads one, [DeadLetters.Replay] publishes one again to its original
// subject, without the dead-letter headers, and then deletes it, and
// [DeadLetters.Delete] deletes one. A [DeadLetter] says where the
// original came from and why it was given up on; [DeadLetter.Decode]
// decodes its body. The command in examples/deadletters does the same
// from a shell.
//
//	dead := crewjs.NewDeadLetters(js, "orders.dead")
//	for dl, err := range dead.List(ctx) {
//		if err != nil {
//			return err
//		}
//		fmt.Println(dl.Seq, dl.Subject, dl.Error)
//	}
//	newSeq, err := dead.Replay(ctx, seq)
//
// # Payloads
//
// Payloads are typed: a [Codec] encodes the items a Publisher sends and
// decodes what a Consumer receives into a [Msg]. [JSON] is the default,
// [Bytes] passes []byte and string through, and [WithCodec] sets another.
package jetstream
