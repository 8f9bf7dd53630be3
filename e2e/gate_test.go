//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// The agent's container joins the forwarder's user namespace, whose root
// is the forwarder's own user: an agent image that names no user (a bare
// Debian, here) must run as the sandbox's uid 1000, as it did in the pod's
// namespace, never as that root. The opened path: hack/mutation-check's
// agent-user-unset leaves the user to the image, and the agent is root.
func TestAnImageWithoutAUserRunsAsTheSandboxsUser(t *testing.T) {
	row(t, "an agent image that names no user runs the agent as uid 1000, not as root of the forwarder's user namespace", func(t *testing.T) {
		image := "localhost/asb-e2e-nouser:test"
		if _, err := podman("tag", baseImage, image); err != nil {
			t.Fatalf("tag %s as %s: %v", baseImage, image, err)
		}
		t.Cleanup(func() { _, _ = podman("rmi", image) })
		user, err := podman("image", "inspect", "--format", "{{.Config.User}}", image)
		if err != nil || strings.TrimSpace(user) != "" {
			t.Fatalf("%s names user %q (%v): the row needs an image that names none", image, user, err)
		}
		res := runSession(t, sessionOpts{
			Cmd: []string{"sh", "-c", "id -u; id -g"},
			Env: map[string]string{"AGENT_SANDBOX_IMAGE": image},
		})
		wantCode(t, res, 0)
		if got := strings.Fields(res.Stdout()); len(got) != 2 || got[0] != "1000" || got[1] != "1000" {
			t.Errorf("the agent ran as uid/gid %q, want 1000 1000", got)
		}
	})
}
