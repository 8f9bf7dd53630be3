package podman

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestTooOldMessage(t *testing.T) {
	// As the v5 bindings word it for a podman 3 service.
	err := errors.New(`server API version is too old. Client "4.0.0" server "3.4.4"`)
	m := tooOld.FindStringSubmatch(err.Error())
	if m == nil || m[1] != "3.4.4" {
		t.Fatalf("tooOld did not find the server version in %q: %v", err, m)
	}
}

func TestIsConnError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("wait for x: %w", syscall.ECONNREFUSED), true},
		{errors.New(`Post "http://d/v5.8.5/libpod/containers/x/wait": EOF`), true},
		{errors.New("no such pod agent-sandbox-1-2"), false},
		{errors.New("context canceled"), false},
	} {
		if got := isConnError(c.err); got != c.want {
			t.Errorf("isConnError(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
