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

// Only the runtime's init dying during set-up is started again: any other
// failure is the user's to see.
func TestInitDied(t *testing.T) {
	died := errors.New(`attach to s-forwarder: preparing container 96 for attach: runc: runc create failed: unable to start container process: waiting for init preliminary setup: read init-p: connection reset by peer: OCI runtime error`)
	if !initDied(fmt.Errorf("wrapped: %w", died)) {
		t.Error("the init's death is not seen")
	}
	for _, err := range []error{nil, errors.New("start container s-router: OCI runtime error: exec: \"/bin/routerd\": no such file"), ErrNotReady} {
		if initDied(err) {
			t.Errorf("%v is taken for the init's death", err)
		}
	}
}

func TestSubIDsUnread(t *testing.T) {
	raced := errors.New(`failed to make pod: keep-id requires additional UIDs or GIDs defined in /etc/subuid and /etc/subgid to function correctly: %!w(<nil>)`)
	if !subIDsUnread(fmt.Errorf("wrapped: %w", raced)) {
		t.Error("the service's unread subordinate ids are not seen")
	}
	for _, err := range []error{nil, errors.New("create pod s: name s is in use: pod already exists"), ErrNotReady} {
		if subIDsUnread(err) {
			t.Errorf("%v is taken for unread subordinate ids", err)
		}
	}
}
