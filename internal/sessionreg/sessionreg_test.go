package sessionreg

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestOverlappingClaimsAreRefusedBothWays(t *testing.T) {
	live := map[string]bool{"live": true}
	reg := Open(t.TempDir(), func(o string) bool { return live[o] })
	release, err := reg.Claim(Claim{Session: "a", Dir: "/src/p", Owner: "live"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, want string
	}{
		{"/src/p", "session a runs there already"},
		{"/src/p/sub", "it lies inside /src/p, where session a runs"},
		{"/src", "it contains /src/p, where session a runs"},
	} {
		_, err := reg.Claim(Claim{Session: "b", Dir: c.dir, Owner: "live"}, true)
		var o Overlap
		if !errors.As(err, &o) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "refusing to mount "+c.dir) {
			t.Errorf("claim of %s: %v, want %q", c.dir, err, c.want)
		}
	}
	// Neighbours and a prefix that is not a parent run side by side.
	for _, dir := range []string{"/src/q", "/src/p2"} {
		rel, err := reg.Claim(Claim{Session: "n" + dir, Dir: dir, Owner: "live"}, true)
		if err != nil {
			t.Errorf("claim of %s: %v", dir, err)
			continue
		}
		rel()
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Claim(Claim{Session: "c", Dir: "/src/p/sub", Owner: "live"}, true); err != nil {
		t.Errorf("after the release: %v", err)
	}
}

func TestADeadOwnersClaimIsDropped(t *testing.T) {
	reg := Open(t.TempDir(), func(o string) bool { return o == "live" })
	if _, err := reg.Claim(Claim{Session: "a", Dir: "/src/p", Owner: "dead"}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Claim(Claim{Session: "b", Dir: "/src/p", Owner: "live"}, true); err != nil {
		t.Fatalf("a dead session's claim refused a new one: %v", err)
	}
	if _, err := reg.Claim(Claim{Session: "c", Dir: "/src/q", Owner: "dead"}, true); err != nil {
		t.Fatal(err)
	}
	if gone := reg.Prune(); len(gone) != 1 || gone[0] != "c" {
		t.Errorf("pruned %v, want [c]", gone)
	}
	running, err := reg.Running()
	if err != nil || len(running) != 1 || running[0].Session != "b" {
		t.Errorf("running = %v, %v", running, err)
	}
}

// Sessions racing for the same dir: exactly one wins.
func TestRacingClaimsLetOneThrough(t *testing.T) {
	reg := Open(t.TempDir(), func(string) bool { return true })
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := reg.Claim(Claim{Session: string(rune('a' + i)), Dir: "/src/p", Owner: "x"}, true); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d racing claims won, want 1", won)
	}
}
