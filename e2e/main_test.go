//go:build e2e

// Package e2e drives the real agent-sandbox binary against rootless podman and
// a fake upstream "internet" (e2e/fakeupstream) on the shared egress network.
// Build and run it with `make e2e`; see hack/run-e2e.
package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// tally counts rows (leaf subtests), the unit of the suite's final line.
var tally struct {
	sync.Mutex
	passed, failed, skipped int
}

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: setup failed: %v\n", err)
		teardown()
		fmt.Println("e2e: 0 passed, 1 failed, 0 skipped")
		os.Exit(1)
	}
	code := m.Run()
	teardown()
	tally.Lock()
	passed, failed, skipped := tally.passed, tally.failed, tally.skipped
	tally.Unlock()
	if code != 0 && failed == 0 {
		// A failure outside any row (setup helpers, a panic) still counts.
		failed = 1
	}
	fmt.Printf("e2e: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if skipped > 0 {
		fmt.Println("e2e: rows must not skip: a skipped security check is a silent hole; fix the prerequisite instead")
		code = 1
	}
	os.Exit(code)
}

// row runs one counted check as a subtest.
func row(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Cleanup(func() {
			tally.Lock()
			defer tally.Unlock()
			switch {
			case t.Skipped():
				tally.skipped++
			case t.Failed():
				tally.failed++
			default:
				tally.passed++
			}
		})
		fn(t)
	})
}
