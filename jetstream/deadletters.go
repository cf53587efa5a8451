package jetstream

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// DeadLetters lists, inspects, replays and deletes the dead letters that
// [WithDeadLetter] publishes to a subject: the messages of the stream that
// holds the subject, stored on it. Make one with [NewDeadLetters]; it holds
// no goroutine and needs no closing, and may be used from several
// goroutines at once.
//
// On a nil DeadLetters or one not made by NewDeadLetters, its methods
// return an error wrapping [crew.ErrInvalid].
type DeadLetters struct {
	js      natsjs.JetStream
	subject string

	mu sync.Mutex
	st natsjs.Stream // the stream that holds subject, once looked up
}

// A DeadLetter is a message that a [Consumer] gave up on, as
// [WithDeadLetter] stored it: where the original came from, why it was
// given up on, and its body and headers.
type DeadLetter struct {
	Seq         uint64      // its sequence in the dead-letter stream
	Time        time.Time   // when it was dead-lettered
	Subject     string      // the subject the original was published to (HeaderSubject)
	Stream      string      // the stream the original was stored in (HeaderStream)
	OriginalSeq uint64      // the original's sequence in that stream (HeaderSequence)
	Delivery    int         // the delivery that failed (HeaderDelivery)
	Error       string      // why it was given up on, cut to 1024 bytes (HeaderError)
	Header      nats.Header // the original's headers: without the dead-letter headers above nor the server's (Nats-)
	Data        []byte      // the original's body
}

// Decode decodes the dead letter's body into v with c, the [Codec] of the
// [Consumer] that gave it up ([JSON] by default). It returns an error
// wrapping [crew.ErrInvalid] for a nil c, and c's error otherwise.
func (dl DeadLetter) Decode(c Codec, v any) error {
	if c == nil {
		return invalid("DeadLetter.Decode: nil Codec")
	}
	if err := c.Unmarshal(dl.Data, v); err != nil {
		return fmt.Errorf("jetstream: decode dead letter %d: %w", dl.Seq, err)
	}
	return nil
}

// deadLetterHeaders are the headers WithDeadLetter adds to a dead letter.
var deadLetterHeaders = []string{HeaderError, HeaderStream, HeaderSequence, HeaderSubject, HeaderDelivery}

// NewDeadLetters returns the [DeadLetters] published through js to
// subject, the subject given to [WithDeadLetter]: it may also be a
// wildcard (dead.>) that covers the dead-letter subjects of several
// consumers, all held by one stream. The stream is looked up on first use.
// NewDeadLetters panics, with an error wrapping [crew.ErrInvalid], if js
// is nil or subject is not a valid subject (empty, with white space or an
// empty token, or a > that is not its last token).
func NewDeadLetters(js natsjs.JetStream, subject string) *DeadLetters {
	var err error
	if js == nil {
		err = invalid("NewDeadLetters: nil JetStream")
	} else if e := checkFilter(subject); e != nil {
		err = invalid("NewDeadLetters: %v", e)
	}
	if err != nil {
		panic(err)
	}
	return &DeadLetters{js: js, subject: subject}
}

// Subject returns the dead-letter subject given to [NewDeadLetters]: "" for
// a nil DeadLetters.
func (d *DeadLetters) Subject() string {
	if d == nil {
		return ""
	}
	return d.subject
}

// List returns the dead letters in the order they were stored, oldest
// first: ranging over it reads one dead letter from the server at a time,
// each with a request of its own, from the first stored, until there are
// no more or the loop stops. A dead letter stored while the loop runs is
// included if its sequence is above the last one read. If a read fails,
// or ctx ends, List yields the error, with a zero DeadLetter, and stops;
// on a nil ctx or a DeadLetters not made by [NewDeadLetters] it yields an
// error wrapping [crew.ErrInvalid].
func (d *DeadLetters) List(ctx context.Context) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		st, err := d.prepare(ctx, "List", 1)
		if err != nil {
			yield(DeadLetter{}, err)
			return
		}
		for seq := uint64(1); ; {
			raw, err := st.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(d.subject))
			if errors.Is(err, natsjs.ErrMsgNotFound) {
				return
			}
			if err != nil {
				yield(DeadLetter{}, fmt.Errorf("jetstream: list dead letters of %s from %d: %w", d.subject, seq, err))
				return
			}
			if !yield(parseDeadLetter(raw), nil) {
				return
			}
			seq = raw.Sequence + 1
		}
	}
}

// Get returns the dead letter of sequence seq in the dead-letter stream.
// It returns an error wrapping [natsjs.ErrMsgNotFound] if the stream holds
// no message seq on the dead-letter subject (never stored, deleted,
// replayed, or on another subject); an error wrapping [crew.ErrInvalid]
// for a nil ctx, a seq of 0, or a DeadLetters not made by
// [NewDeadLetters]; and the error of the look-up otherwise.
func (d *DeadLetters) Get(ctx context.Context, seq uint64) (DeadLetter, error) {
	st, err := d.prepare(ctx, "Get", seq)
	if err != nil {
		return DeadLetter{}, err
	}
	return d.get(ctx, st, seq)
}

// get returns the dead letter seq of st.
func (d *DeadLetters) get(ctx context.Context, st natsjs.Stream, seq uint64) (DeadLetter, error) {
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("jetstream: dead letter %s/%d: %w", st.CachedInfo().Config.Name, seq, err)
	}
	if !subjectMatches(d.subject, raw.Subject) {
		return DeadLetter{}, fmt.Errorf("jetstream: dead letter %s/%d: the message is on %s, not %s: %w",
			st.CachedInfo().Config.Name, seq, raw.Subject, d.subject, natsjs.ErrMsgNotFound)
	}
	return parseDeadLetter(raw), nil
}

// Replay publishes the dead letter seq again to its original subject,
// with its body and [DeadLetter].Header, less [HeaderAttempts], so that it
// starts afresh: a [Consumer] of that subject runs it as a new message.
// It waits for the original stream (HeaderStream) to store it, and then
// deletes the dead letter. It returns the stream sequence of the new
// message.
//
// The publish expects the original stream, so it fails if another stream,
// or none, holds the subject now, and it carries the message id
// replay.<dead-letter stream>.<seq>, so that a Replay retried after a
// failure that came after the publish (the delete failed, or ctx ended)
// stores the message once, if retried within the original stream's
// duplicate window. If the delete fails, the message was replayed, the
// dead letter stays, and Replay returns the new sequence with the error;
// a replay is thus at least once.
//
// Replay returns an error wrapping [natsjs.ErrMsgNotFound] if there is no
// dead letter seq (see [DeadLetters.Get]), one wrapping [crew.ErrInvalid]
// for a nil ctx, a seq of 0, a DeadLetters not made by [NewDeadLetters]
// or a dead letter without the original's subject and stream, and the
// error of the look-up, the publish or the delete otherwise.
func (d *DeadLetters) Replay(ctx context.Context, seq uint64) (uint64, error) {
	st, err := d.prepare(ctx, "Replay", seq)
	if err != nil {
		return 0, err
	}
	dl, err := d.get(ctx, st, seq)
	if err != nil {
		return 0, err
	}
	newSeq, err := d.republish(ctx, st.CachedInfo().Config.Name, dl)
	if err != nil {
		return 0, err
	}
	return newSeq, d.delete(ctx, st, seq)
}

// republish publishes dl to its original subject in its original stream,
// with the message id of its replay from the dead-letter stream dlStream,
// and returns the new message's sequence: that of the first one stored if
// the stream dropped it as a duplicate.
func (d *DeadLetters) republish(ctx context.Context, dlStream string, dl DeadLetter) (uint64, error) {
	if dl.Subject == "" || dl.Stream == "" {
		return 0, invalid("DeadLetters.Replay: message %s/%d has no %s or %s header: not a dead letter", dlStream, dl.Seq, HeaderSubject, HeaderStream)
	}
	h := nats.Header{}
	for k, v := range dl.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Del(HeaderAttempts)
	ack, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: dl.Subject, Header: h, Data: dl.Data},
		natsjs.WithMsgID("replay."+dlStream+"."+strconv.FormatUint(dl.Seq, 10)), natsjs.WithExpectStream(dl.Stream))
	if err != nil {
		return 0, fmt.Errorf("jetstream: replay dead letter %s/%d to %s in %s: %w", dlStream, dl.Seq, dl.Subject, dl.Stream, err)
	}
	return ack.Sequence, nil
}

// Delete deletes the dead letter seq from the dead-letter stream, without
// replaying it. It returns an error wrapping [natsjs.ErrMsgNotFound] if
// there is no dead letter seq (see [DeadLetters.Get]), one wrapping
// [crew.ErrInvalid] for a nil ctx, a seq of 0 or a DeadLetters not made by
// [NewDeadLetters], and the error of the look-up or the delete otherwise.
func (d *DeadLetters) Delete(ctx context.Context, seq uint64) error {
	st, err := d.prepare(ctx, "Delete", seq)
	if err != nil {
		return err
	}
	if _, err := d.get(ctx, st, seq); err != nil {
		return err
	}
	return d.delete(ctx, st, seq)
}

// delete deletes the message seq of st.
func (d *DeadLetters) delete(ctx context.Context, st natsjs.Stream, seq uint64) error {
	if err := st.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("jetstream: delete dead letter %s/%d: %w", st.CachedInfo().Config.Name, seq, err)
	}
	return nil
}

// prepare checks d, ctx and seq for method and returns the dead-letter
// stream, looking it up the first time.
func (d *DeadLetters) prepare(ctx context.Context, method string, seq uint64) (natsjs.Stream, error) {
	if d == nil || d.js == nil {
		return nil, invalid("DeadLetters.%s: not made by NewDeadLetters", method)
	}
	if ctx == nil {
		return nil, invalid("DeadLetters.%s: nil context", method)
	}
	if seq == 0 {
		return nil, invalid("DeadLetters.%s: sequence 0: stream sequences start at 1", method)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.st != nil {
		return d.st, nil
	}
	st, err := streamOf(ctx, d.js, d.subject)
	if err != nil {
		return nil, err
	}
	d.st = st
	return st, nil
}

// parseDeadLetter reads a dead letter from its stored message.
func parseDeadLetter(raw *natsjs.RawStreamMsg) DeadLetter {
	dl := DeadLetter{
		Seq:     raw.Sequence,
		Time:    raw.Time,
		Subject: raw.Header.Get(HeaderSubject),
		Stream:  raw.Header.Get(HeaderStream),
		Error:   raw.Header.Get(HeaderError),
		Header:  nats.Header{},
		Data:    raw.Data,
	}
	dl.OriginalSeq, _ = strconv.ParseUint(raw.Header.Get(HeaderSequence), 10, 64)
	dl.Delivery, _ = strconv.Atoi(raw.Header.Get(HeaderDelivery))
	for k, v := range raw.Header {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			dl.Header[k] = v
		}
	}
	for _, k := range deadLetterHeaders {
		dl.Header.Del(k)
	}
	return dl
}

// subjectMatches reports whether subject matches filter, a subject that
// may hold the wildcards * and >.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}
