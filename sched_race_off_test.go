//go:build !race

package crew_test

// schedRace tells the scheduling tests (keyed, priority, rate, func pools)
// to scale down: the race detector makes each task many times slower.
const schedRace = false
