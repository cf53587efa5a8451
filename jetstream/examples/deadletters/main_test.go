package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// checkLeaks fails t if goroutines started during the test outlive it.
// Call it first, so that it runs after every other cleanup.
func checkLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// startServer starts an embedded nats-server with JetStream on a random
// loopback port with the streams JOBS (jobs.>) and DLQ (dead.>), and the
// dead letter, as WithDeadLetter stores it, of the job JOBS/1 on
// jobs.email; it returns the server's URL and a connection to it.
func startServer(t *testing.T) (string, natsjs.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, subj := range map[string]string{"JOBS": "jobs.>", "DLQ": "dead.>"} {
		if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{subj}, Duplicates: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "jobs.email", []byte(`{"to":"ann"}`)); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set("Tenant", "acme")
	h.Set(crewjs.HeaderError, "permanent: no such mailbox")
	h.Set(crewjs.HeaderStream, "JOBS")
	h.Set(crewjs.HeaderSequence, "1")
	h.Set(crewjs.HeaderSubject, "jobs.email")
	h.Set(crewjs.HeaderDelivery, "1")
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dead.email", Header: h, Data: []byte(`{"to":"ann"}`)}); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), js
}

// cmd runs the command line args against url and returns its output.
func cmd(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, &out, &errOut, append([]string{"-server", url}, args...))
	return out.String() + errOut.String(), err
}

func TestListShowReplayDelete(t *testing.T) {
	checkLeaks(t)
	url, js := startServer(t)

	out, err := cmd(t, url, "-subject", "dead.email", "list")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, out)
	}
	for _, want := range []string{"1\t", "jobs.email\tJOBS/1\tdelivery 1\tpermanent: no such mailbox", "1 dead letters listed"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	out, err = cmd(t, url, "-subject", "dead.>", "show", "1")
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	for _, want := range []string{"subject:  jobs.email", "stream:   JOBS/1", "header:   Tenant: acme", `body:     {"to":"ann"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Crew-Error") {
		t.Errorf("show lists the dead-letter headers among the original's:\n%s", out)
	}
	out, err = cmd(t, url, "-subject", "dead.email", "replay", "1")
	if err != nil || !strings.Contains(out, "dead letter 1 replayed as sequence 2") {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "JOBS")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, "jobs.email")
	if err != nil || raw.Sequence != 2 || raw.Header.Get("Tenant") != "acme" || raw.Header.Get(crewjs.HeaderError) != "" {
		t.Errorf("replayed message %+v, %v", raw, err)
	}
	if out, err = cmd(t, url, "-subject", "dead.email", "show", "1"); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("show after replay: %v\n%s", err, out)
	}
	if out, err = cmd(t, url, "-subject", "dead.email", "delete", "1"); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("delete after replay: %v\n%s", err, out)
	}
	if out, err = cmd(t, url, "-subject", "dead.email", "list"); err != nil || !strings.Contains(out, "0 dead letters listed") {
		t.Errorf("list after replay: %v\n%s", err, out)
	}
}

func TestBadCommandLines(t *testing.T) {
	checkLeaks(t)
	url, _ := startServer(t)
	for _, args := range [][]string{
		{"list"},
		{"-subject", "dead.email"},
		{"-subject", "dead.email", "list", "1"},
		{"-subject", "dead.email", "show"},
		{"-subject", "dead.email", "show", "0"},
		{"-subject", "dead.email", "replay", "x"},
		{"-subject", "dead.email", "-n", "-1", "list"},
		{"-subject", "dead.email", "purge"},
	} {
		if out, err := cmd(t, url, args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want the usage\n%s", args, err, out)
		}
	}
	if out, err := cmd(t, url, "-subject", "dead email", "list"); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("a subject with a space: %v, want ErrInvalid\n%s", err, out)
	}
	if out, err := cmd(t, url, "-subject", "dead.email", "delete", "99"); !errors.Is(err, natsjs.ErrMsgNotFound) {
		t.Errorf("delete 99: %v, want ErrMsgNotFound\n%s", err, out)
	}
	if out, err := cmd(t, url, "-bogus"); err == nil {
		t.Errorf("an unknown flag: no error\n%s", out)
	}
}
