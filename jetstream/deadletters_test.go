package jetstream

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// listAll returns the dead letters d lists, failing t on an error.
func listAll(t *testing.T, ctx context.Context, d *DeadLetters) []DeadLetter {
	t.Helper()
	var out []DeadLetter
	for dl, err := range d.List(ctx) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		out = append(out, dl)
	}
	return out
}

// A job that fails on every delivery is dead-lettered; DeadLetters lists
// and gets it with where it came from and why, replays it to its subject,
// where the consumer runs it again, and deletes the dead letter; replaying
// it again finds nothing, and a retried republish stores it once.
func TestDeadLettersListGetReplay(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	ctx := testCtx(t)
	jobs := createStream(t, js, "JOBS", "jobs.>")
	dlq := createStream(t, js, "DLQ", "dead.jobs")
	cons := createDurable(t, js, "JOBS", "workers", natsjs.ConsumerConfig{MaxDeliver: 2})
	h := nats.Header{}
	h.Set("Tenant", "acme")
	// Three attempts made before a snooze: the first delivery is the
	// last MaxDeliver allows.
	h.Set(HeaderAttempts, "3")
	data, _ := JSON{}.Marshal(item{ID: 7, Body: "x"})
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "jobs.new", Header: h, Data: data}, natsjs.WithMsgID("item-7")); err != nil {
		t.Fatal(err)
	}

	var fail atomic.Bool
	fail.Store(true)
	var handled atomic.Int32
	pool := crew.New(2)
	defer pool.Stop()
	c := NewConsumer(cons, pool, func(ctx context.Context, m Msg[item]) error {
		if fail.Load() {
			return errors.New("boom")
		}
		if m.Value.ID != 7 || m.Header.Get("Tenant") != "acme" || m.Header.Get(HeaderError) != "" || m.Attempt() != 1 {
			t.Errorf("replayed job %+v, headers %v, attempt %d", m.Value, m.Header, m.Attempt())
		}
		handled.Add(1)
		return nil
	}, opts(WithBackoff(func(int) time.Duration { return 0 }), WithDeadLetter(js, "dead.jobs"))...)
	runConsumer(t, c)
	waitFor(t, 10*time.Second, "the job dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })

	d := NewDeadLetters(js, "dead.jobs")
	if d.Subject() != "dead.jobs" {
		t.Errorf("Subject() = %q", d.Subject())
	}
	list := listAll(t, ctx, d)
	if len(list) != 1 {
		t.Fatalf("List: %d dead letters, want 1", len(list))
	}
	dl := list[0]
	if dl.Seq != 1 || dl.Subject != "jobs.new" || dl.Stream != "JOBS" || dl.OriginalSeq != 1 || dl.Delivery != 1 ||
		!strings.Contains(dl.Error, "boom") || dl.Time.IsZero() {
		t.Errorf("dead letter %+v", dl)
	}
	if dl.Header.Get("Tenant") != "acme" || dl.Header.Get(HeaderAttempts) != "3" || len(dl.Header) != 2 {
		t.Errorf("dead letter headers %v, want the original's, Tenant and Crew-Attempts", dl.Header)
	}
	var it item
	if err := dl.Decode(JSON{}, &it); err != nil || it.ID != 7 || it.Body != "x" {
		t.Errorf("Decode: %+v, %v", it, err)
	}
	got, err := d.Get(ctx, dl.Seq)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Seq != dl.Seq || got.Subject != dl.Subject || got.Error != dl.Error || string(got.Data) != string(dl.Data) || !got.Time.Equal(dl.Time) {
		t.Errorf("Get %+v, List %+v", got, dl)
	}

	fail.Store(false)
	newSeq, err := d.Replay(ctx, dl.Seq)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if newSeq != 2 {
		t.Errorf("Replay stored sequence %d, want 2", newSeq)
	}
	waitFor(t, 10*time.Second, "the replayed job handled", func() bool { return handled.Load() == 1 && c.Stats().Acked == 1 })
	if _, err := d.Get(ctx, dl.Seq); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("Get after Replay: %v, want ErrMsgNotFound", err)
	}
	if n := len(listAll(t, ctx, d)); n != 0 {
		t.Errorf("List after Replay: %d dead letters", n)
	}
	if _, err := d.Replay(ctx, dl.Seq); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("second Replay: %v, want ErrMsgNotFound", err)
	}
	// A Replay retried after its delete failed publishes with the same
	// message id: the stream keeps the first copy.
	again, err := d.republish(ctx, "DLQ", dl)
	if err != nil || again != newSeq {
		t.Errorf("republish again: sequence %d, %v; want %d", again, err, newSeq)
	}
	if n := streamMsgs(t, jobs); n != 2 {
		t.Errorf("JOBS holds %d messages, want the original and one replay", n)
	}
	if n := streamMsgs(t, dlq); n != 0 {
		t.Errorf("DLQ holds %d messages, want none", n)
	}
	if handled.Load() != 1 {
		t.Errorf("the replayed job ran %d times", handled.Load())
	}
}

// deadLetterMsg returns a message as WithDeadLetter publishes one for the
// message seq of stream on subject.
func deadLetterMsg(dlSubject, subject, stream string, seq int, body string) *nats.Msg {
	h := nats.Header{}
	h.Set(HeaderError, "failed")
	h.Set(HeaderStream, stream)
	h.Set(HeaderSequence, strconv.Itoa(seq))
	h.Set(HeaderSubject, subject)
	h.Set(HeaderDelivery, "1")
	return &nats.Msg{Subject: dlSubject, Header: h, Data: []byte(body)}
}

// DeadLetters sees only its subject's messages, a wildcard all of them;
// Delete deletes one dead letter; Replay refuses what is not a dead letter
// and a subject that the original stream no longer holds; a List that
// stops early stops reading.
func TestDeadLettersSubjectsDeleteAndRefusals(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	ctx := testCtx(t)
	createStream(t, js, "JOBS", "jobs.>")
	createStream(t, js, "OTHER", "other.>")
	dlq := createStream(t, js, "DLQ", "dead.>")
	for _, m := range []*nats.Msg{
		deadLetterMsg("dead.a", "jobs.a", "JOBS", 1, "a1"),        // 1
		deadLetterMsg("dead.b", "jobs.b", "JOBS", 2, "b1"),        // 2
		deadLetterMsg("dead.a", "jobs.a", "JOBS", 3, "a2"),        // 3
		{Subject: "dead.a", Data: []byte("no headers")},           // 4
		deadLetterMsg("dead.a", "other.a", "JOBS", 4, "moved"),    // 5
		deadLetterMsg("dead.a", "jobs.a", "GONE", 5, "no stream"), // 6
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	a, all := NewDeadLetters(js, "dead.a"), NewDeadLetters(js, "dead.>")
	bodies := func(d *DeadLetters) string {
		var s []string
		for _, dl := range listAll(t, ctx, d) {
			s = append(s, string(dl.Data))
		}
		return strings.Join(s, ",")
	}
	if got := bodies(a); got != "a1,a2,no headers,moved,no stream" {
		t.Errorf("dead.a lists %s", got)
	}
	if got := bodies(all); got != "a1,b1,a2,no headers,moved,no stream" {
		t.Errorf("dead.> lists %s", got)
	}
	for dl, err := range all.List(ctx) {
		if err != nil || dl.Seq != 1 {
			t.Errorf("first of List: %d, %v", dl.Seq, err)
		}
		break
	}
	if _, err := a.Get(ctx, 2); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("Get of dead.b's message through dead.a: %v, want ErrMsgNotFound", err)
	}
	if err := a.Delete(ctx, 2); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("Delete of dead.b's message through dead.a: %v, want ErrMsgNotFound", err)
	}
	if err := a.Delete(ctx, 3); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := a.Delete(ctx, 3); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("Delete again: %v, want ErrMsgNotFound", err)
	}
	if got := bodies(all); got != "a1,b1,no headers,moved,no stream" {
		t.Errorf("after Delete, dead.> lists %s", got)
	}
	if _, err := a.Replay(ctx, 4); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Replay of a message without dead-letter headers: %v, want ErrInvalid", err)
	}
	for _, seq := range []uint64{5, 6} {
		if _, err := a.Replay(ctx, seq); err == nil {
			t.Errorf("Replay of %d, whose subject its stream does not hold: no error", seq)
		}
		if _, err := a.Get(ctx, seq); err != nil {
			t.Errorf("dead letter %d after a failed Replay: %v", seq, err)
		}
	}
	if n := streamMsgs(t, dlq); n != 5 {
		t.Errorf("DLQ holds %d messages, want 5", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	yields := 0
	for _, err := range NewDeadLetters(js, "dead.>").List(cctx) {
		yields++
		if !errors.Is(err, context.Canceled) {
			t.Errorf("List with an ended context yielded %v, want context.Canceled", err)
		}
	}
	if yields != 1 {
		t.Errorf("List with an ended context yielded %d times, want once", yields)
	}
}

func TestSubjectMatches(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"dead.jobs", "dead.jobs", true},
		{"dead.jobs", "dead.jobs.x", false},
		{"dead.jobs", "dead", false},
		{"dead.*", "dead.jobs", true},
		{"dead.*", "dead.jobs.x", false},
		{"dead.>", "dead.jobs.x", true},
		{"dead.>", "dead", false},
		{">", "a", true},
		{"*.jobs", "dead.jobs", true},
		{"*.jobs", "dead.other", false},
	} {
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}
