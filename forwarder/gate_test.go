package main

import "testing"

func TestIsGate(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"/run/podman-init", "--", "sh"}, true}, {[]string{"/usr/local/bin/forwarder"}, false}, {nil, false}} {
		if got := isGate(c.args); got != c.want {
			t.Errorf("isGate(%q) = %v", c.args, got)
		}
	}
}
