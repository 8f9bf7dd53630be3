package podman

import (
	"errors"
	"testing"
)

func TestServicePanicked(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("runtime error: invalid memory address or nil pointer dereference"), true},
		{errors.New("no pod with name or ID x found: no such pod"), false},
		{nil, false},
	} {
		if got := servicePanicked(c.err); got != c.want {
			t.Errorf("servicePanicked(%v) = %v", c.err, got)
		}
	}
}
