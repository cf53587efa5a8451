// Command deadletters lists, shows, replays and deletes the dead letters
// that crewjs.WithDeadLetter published to a subject of a NATS JetStream
// server.
//
//	go run ./examples/deadletters -subject dead.email list
//	go run ./examples/deadletters -subject dead.email -n 20 list
//	go run ./examples/deadletters -subject dead.email show 42
//	go run ./examples/deadletters -subject dead.email replay 42
//	go run ./examples/deadletters -subject dead.email delete 42
//
// list prints one line per dead letter: its sequence, when it was
// dead-lettered, the original's subject, stream and sequence, the delivery
// that failed and the error. show prints one dead letter with its headers
// and body. replay publishes it again to its original subject and deletes
// it; delete deletes it. -server is the NATS URL (nats.DefaultURL), and
// -subject the dead-letter subject, or a wildcard such as dead.> for list
// and show.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	crewjs "github.com/gocrew/crew/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "deadletters:", err)
		}
		os.Exit(2)
	}
}

// errUsage is wrapped by the error of a command line run cannot run.
var errUsage = errors.New("usage: deadletters [-server URL] -subject SUBJECT [-n N] list | show SEQ | replay SEQ | delete SEQ")

// run runs the command line args, writing to stdout, and the flags'
// messages to stderr, until done or ctx ends.
func run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("deadletters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("server", nats.DefaultURL, "the NATS server's URL")
	subject := fs.String("subject", "", "the dead-letter subject (a wildcard for list and show)")
	limit := fs.Int("n", 0, "list at most n dead letters (0: all)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the whole command")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cmd := fs.Args()
	if *subject == "" || len(cmd) == 0 || *limit < 0 {
		return errUsage
	}
	var seq uint64
	switch {
	case cmd[0] == "list" && len(cmd) == 1:
	case slices.Contains([]string{"show", "replay", "delete"}, cmd[0]) && len(cmd) == 2:
		var err error
		if seq, err = strconv.ParseUint(cmd[1], 10, 64); err != nil || seq == 0 {
			return fmt.Errorf("%w: %q is not a sequence", errUsage, cmd[1])
		}
	default:
		return errUsage
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := nats.Connect(*url, nats.Name("deadletters"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	dead, err := newDeadLetters(js, *subject)
	if err != nil {
		return err
	}

	switch cmd[0] {
	case "list":
		n := 0
		for dl, err := range dead.List(ctx) {
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%d\t%s\t%s\t%s/%d\tdelivery %d\t%s\n", dl.Seq, dl.Time.UTC().Format(time.RFC3339),
				dl.Subject, dl.Stream, dl.OriginalSeq, dl.Delivery, dl.Error)
			if n++; n == *limit {
				break
			}
		}
		fmt.Fprintf(stdout, "%d dead letters listed\n", n)
	case "show":
		dl, err := dead.Get(ctx, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dead letter %d, %s\nsubject:  %s\nstream:   %s/%d\ndelivery: %d\nerror:    %s\n",
			dl.Seq, dl.Time.UTC().Format(time.RFC3339Nano), dl.Subject, dl.Stream, dl.OriginalSeq, dl.Delivery, dl.Error)
		keys := make([]string, 0, len(dl.Header))
		for k := range dl.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			for _, v := range dl.Header[k] {
				fmt.Fprintf(stdout, "header:   %s: %s\n", k, v)
			}
		}
		if utf8.Valid(dl.Data) {
			fmt.Fprintf(stdout, "body:     %s\n", dl.Data)
		} else {
			fmt.Fprintf(stdout, "body:     %q\n", dl.Data)
		}
	case "replay":
		newSeq, err := dead.Replay(ctx, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dead letter %d replayed as sequence %d\n", seq, newSeq)
	case "delete":
		if err := dead.Delete(ctx, seq); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dead letter %d deleted\n", seq)
	}
	return nil
}

// newDeadLetters returns crewjs.NewDeadLetters(js, subject), or the error
// it panics with for an invalid subject.
func newDeadLetters(js natsjs.JetStream, subject string) (dead *crewjs.DeadLetters, err error) {
	defer func() {
		if v := recover(); v != nil {
			e, ok := v.(error)
			if !ok {
				panic(v)
			}
			err = e
		}
	}()
	return crewjs.NewDeadLetters(js, subject), nil
}
