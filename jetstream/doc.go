// Package jetstream runs crew pools on NATS JetStream, so that bounded,
// panic-safe, observable execution spans many machines and a message is
// not lost when one of them dies.
//
// A [Consumer] feeds a JetStream pull consumer into a crew.Pool: it fetches
// only as many messages as it has room for, runs the handler for each on
// the pool, acknowledges the ones handled, hands back the failed ones with
// a backoff until the consumer's MaxDeliver, dead-letters and terminates
// the ones that panic, sends in-progress heartbeats while tasks run, and
// drains on shutdown. Several processes running Consumers of the same
// durable consumer share its messages; when one dies, the server
// redelivers the messages it held to the others once their AckWait
// passes.
//
// A [Publisher] is a batch.Batcher whose flushes publish to a JetStream
// subject and wait for the publish acknowledgements, with a message id
// per item, so that a retried flush does not store an item twice.
//
// Payloads are typed: a [Codec] (JSON by default) encodes the items a
// Publisher sends and decodes what a Consumer receives into a [Msg].
//
// The package's name is that of the NATS package it builds on,
// github.com/nats-io/nats.go/jetstream; import one of them under another
// name, for example crewjs.
package jetstream
