package main

import (
	"testing"
)

// TestPipesAreReused: streams one after another relay through the same
// kernel pipes, which come back empty and intact.
func TestPipesAreReused(t *testing.T) {
	up := startUpstream(t, echo)
	addrs := startForwarder(t, addrOf(up))
	idlePipes.Lock()
	idlePipes.free = nil
	idlePipes.Unlock()
	for i := range 3 {
		if err := roundTrip(dial(t, addrs[0]), int64(3<<20+i), uint64(i)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	idlePipes.Lock()
	n := len(idlePipes.free)
	idlePipes.Unlock()
	// Two directions per relay; the last relay's pipes may still be in use
	// while its goroutines finish, so at least the earlier ones are back.
	if n == 0 || n > 4 {
		t.Errorf("%d idle pipes after three relays one after another, want 1 to 4", n)
	}
}
