// Package workload defines the benchmark matrix: how many users submit how many
// tasks to a pool of which limit, and which task they submit.
package workload

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"time"
)

// MatrixLimit is the pool limit of every matrix workload, as in pond's benchmark.
const MatrixLimit = 200_000

// A Workload is one column of the matrix: Users goroutines each submit
// TasksPerUser tasks to a pool that runs at most Limit tasks at once.
type Workload struct {
	Name         string `json:"name"`
	Users        int    `json:"users"`
	TasksPerUser int    `json:"tasks_per_user"`
	Limit        int    `json:"limit"`
	// Burst and Gap, when set, make each user pause for Gap after every
	// Burst tasks it submits, so that the pool goes idle between bursts.
	Burst int           `json:"burst,omitempty"`
	Gap   time.Duration `json:"gap_ns,omitempty"`
	// Fn, when set, is the task this workload submits, in place of its
	// task kind's.
	Fn func() `json:"-"`
}

// Total is the number of tasks the workload submits.
func (w Workload) Total() int { return w.Users * w.TasksPerUser }

// Scale returns w with its total task count multiplied by f (0 < f <= 1).
// Tasks per user shrink first; once every user is down to one task, the number
// of users shrinks instead, so a tiny scale gives a tiny run for every shape.
// Both counts stay at least 1, and the name and limit stay the same.
func (w Workload) Scale(f float64) Workload {
	if f <= 0 || f >= 1 {
		return w
	}
	total := max(1, int(math.Round(float64(w.Total())*f)))
	w.TasksPerUser = max(1, int(math.Round(float64(w.TasksPerUser)*f)))
	w.Users = max(1, total/w.TasksPerUser)
	return w
}

// String describes the counts, e.g. "users=100 tasks/user=10000 limit=200000",
// and the bursts if any.
func (w Workload) String() string {
	s := fmt.Sprintf("users=%d tasks/user=%d limit=%d", w.Users, w.TasksPerUser, w.Limit)
	if w.Burst > 0 {
		s += fmt.Sprintf(" bursts of %d, %v apart", w.Burst, w.Gap)
	}
	return s
}

// Matrix is the users x tasks matrix of pond's benchmark.
var Matrix = []Workload{
	{Name: "1u-1Mt", Users: 1, TasksPerUser: 1_000_000, Limit: MatrixLimit},
	{Name: "100u-10Kt", Users: 100, TasksPerUser: 10_000, Limit: MatrixLimit},
	{Name: "1Ku-1Kt", Users: 1_000, TasksPerUser: 1_000, Limit: MatrixLimit},
	{Name: "10Ku-100t", Users: 10_000, TasksPerUser: 100, Limit: MatrixLimit},
	{Name: "1Mu-1t", Users: 1_000_000, TasksPerUser: 1, Limit: MatrixLimit},
}

// Service lists workloads shaped like a service's, each with its own task,
// that pond's matrix does not cover: requests that arrive in bursts with the
// pool idle between them; tiny tasks mixed with slow ones; requests that fan
// out to many I/O calls; and CPU-bound tasks that start goroutines of their
// own. Their limits are what a service would set, far below the matrix's.
var Service = []Workload{
	{Name: "bursts", Users: 100, TasksPerUser: 1_000, Limit: 256, Burst: 100, Gap: time.Millisecond, Fn: RandFloat},
	{Name: "mixed", Users: 100, TasksPerUser: 1_000, Limit: 128, Fn: MostlyTiny},
	{Name: "fanout", Users: 1_000, TasksPerUser: 16, Limit: 512, Fn: IOCall},
	{Name: "spawn", Users: 10, TasksPerUser: 1_000, Limit: 64, Fn: Spawn},
}

// CPU is the workload of the CPU-bound task: one user, 100,000 tasks, 1,000 workers.
var CPU = Workload{Name: "1u-100Kt", Users: 1, TasksPerUser: 100_000, Limit: 1_000}

// ScaleEnv names the environment variable that scales every workload down
// (see Workload.Scale), so CI can run tiny versions: CREW_BENCH_SCALE=0.001.
const ScaleEnv = "CREW_BENCH_SCALE"

// ScaleFromEnv returns the factor in $CREW_BENCH_SCALE, or 1 when it is unset.
func ScaleFromEnv() (float64, error) {
	s := os.Getenv(ScaleEnv)
	if s == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 1 {
		return 1, fmt.Errorf("%s=%q: want a number in (0, 1]", ScaleEnv, s)
	}
	return f, nil
}
