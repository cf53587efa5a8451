package jetstream

import (
	"strconv"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A Msg is a decoded JetStream message as a [Handler] receives it: its
// body decoded by the [Codec] into Value, and what the server says about it.
//
// The [Consumer] settles the message (Ack, Nak, Term) from the handler's
// result; the handler must not do so through Raw, a [natsjs.Msg]. It may
// read Raw for what the other fields do not carry.
type Msg[T any] struct {
	Value    T                  // the body, decoded by the Codec
	Subject  string             // the subject the message was published to
	Header   nats.Header        // the message's headers (do not modify)
	Metadata natsjs.MsgMetadata // stream and consumer sequence, NumDelivered, timestamp
	Raw      natsjs.Msg         // the underlying message
}

// Delivery returns which delivery of the message this is: 1 the first time,
// 2 after one Nak or redelivery, and so on. It is the NumDelivered of
// [natsjs.MsgMetadata].
func (m Msg[T]) Delivery() int { return int(m.Metadata.NumDelivered) }

// Attempt returns which attempt at the job this delivery is: the
// [Delivery], plus the attempts made before the job was snoozed, which
// the [HeaderAttempts] header carries (see [WithSnooze]). Deliveries that
// snoozed are not attempts. The backoff ([WithBackoff]) and the MaxDeliver
// limit count attempts.
func (m Msg[T]) Attempt() int { return priorAttempts(m.Header) + m.Delivery() }

// priorAttempts returns the attempts the HeaderAttempts header of h
// counts: 0 if it is absent or not a non-negative number.
func priorAttempts(h nats.Header) int {
	n, err := strconv.Atoi(h.Get(HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
