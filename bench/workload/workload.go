// Package workload defines the benchmark matrix: how many users submit how many
// tasks to a pool of which limit, and which task they submit.
package workload

import (
	"fmt"
	"math"
	"os"
	"strconv"
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

// String describes the counts, e.g. "users=100 tasks/user=10000 limit=200000".
func (w Workload) String() string {
	return fmt.Sprintf("users=%d tasks/user=%d limit=%d", w.Users, w.TasksPerUser, w.Limit)
}

// Matrix is the users x tasks matrix of pond's benchmark.
var Matrix = []Workload{
	{"1u-1Mt", 1, 1_000_000, MatrixLimit},
	{"100u-10Kt", 100, 10_000, MatrixLimit},
	{"1Ku-1Kt", 1_000, 1_000, MatrixLimit},
	{"10Ku-100t", 10_000, 100, MatrixLimit},
	{"1Mu-1t", 1_000_000, 1, MatrixLimit},
}

// CPU is the workload of the CPU-bound task: one user, 100,000 tasks, 1,000 workers.
var CPU = Workload{"1u-100Kt", 1, 100_000, 1_000}

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
