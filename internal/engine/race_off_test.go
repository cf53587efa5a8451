//go:build !race

package engine

const stRaceEnabled = false
