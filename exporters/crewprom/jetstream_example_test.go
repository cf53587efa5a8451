package crewprom_test

import (
	"fmt"
	"strings"

	"github.com/gocrew/crew/exporters/crewprom"
	crewjs "github.com/gocrew/crew/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// NewJetStreamCollector reports consumers and publishers by the names
// given: a program passes the method values c.Stats and p.Stats of its
// jetstream.Consumer and jetstream.Publisher. Here a function stands in
// for a consumer that acknowledged 3 messages.
func ExampleNewJetStreamCollector() {
	stats := func() crewjs.Stats { return crewjs.Stats{Fetched: 3, Acked: 3} } // c.Stats
	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewJetStreamCollector(map[string]func() crewjs.Stats{"orders": stats}, nil))

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP crew_jetstream_consumer_acked_total Messages handled successfully and acknowledged.
# TYPE crew_jetstream_consumer_acked_total counter
crew_jetstream_consumer_acked_total{consumer="orders"} 3
`), "crew_jetstream_consumer_acked_total")
	fmt.Println(err)
	// Output: <nil>
}
