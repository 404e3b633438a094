//go:build !race

package main

// raceEnabled says the tests run with the race detector, so the binary is built with it.
const raceEnabled = false
