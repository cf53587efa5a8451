package jetstream_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	crewjs "github.com/gocrew/crew/jetstream"
)

// A Deposit is the job of the KeyedConsumer example.
type Deposit struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// Each account's deposits run one at a time, in the order they were
// enqueued, in whichever process holds the account's partition; every
// process runs the same code. Here one process runs eight partitions.
func ExampleNewKeyedConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, stop := jobServer(ctx)
	defer stop()

	const partitions = 8
	q := crewjs.NewQueue[Deposit](js, "jobs.deposit", crewjs.WithPartitions(partitions))
	for i := 1; i <= 3; i++ {
		for _, acct := range []string{"alice", "bob"} {
			if _, err := q.Enqueue(ctx, Deposit{Account: acct, Amount: i * 10}, crewjs.WithKey(acct)); err != nil {
				log.Fatal(err)
			}
		}
	}

	pool := crew.New(8)
	defer pool.Stop()
	var mu sync.Mutex
	seen := map[string][]int{}
	done := make(chan struct{})
	kc, err := crewjs.NewKeyedConsumer(ctx, js, "JOBS",
		jetstream.ConsumerConfig{Durable: "ledger", FilterSubject: "jobs.deposit", AckWait: 30 * time.Second},
		partitions, pool, func(ctx context.Context, m crewjs.Msg[Deposit]) error {
			mu.Lock()
			defer mu.Unlock()
			seen[m.Value.Account] = append(seen[m.Value.Account], m.Value.Amount)
			if len(seen["alice"])+len(seen["bob"]) == 6 {
				close(done)
			}
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- kc.Run(runCtx) }()
	<-done
	stopRun()
	if err := <-errc; err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice:", seen["alice"])
	fmt.Println("bob:", seen["bob"])
	// Output:
	// alice: [10 20 30]
	// bob: [10 20 30]
}
