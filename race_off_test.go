//go:build !race

package crew_test

// raceDetectorOn tells the stress tests to scale down: the race detector
// makes each task 5 to 20 times slower.
const raceDetectorOn = false
