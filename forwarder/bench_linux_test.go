package main

import (
	"syscall"
	"testing"
)

// countSwitches reports the context switches of the whole test process
// (client, relay and echo alike) per operation, from the call to the
// call of the function it returns: on the machines the forwarder runs
// on, a relay costs what it is woken, more than what it copies.
func countSwitches(b *testing.B) func() {
	before := switches()
	return func() {
		if n := b.N; n > 0 {
			b.ReportMetric(float64(switches()-before)/float64(n), "ctxsw/op")
		}
	}
}

func switches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}
