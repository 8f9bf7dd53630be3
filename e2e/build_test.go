//go:build e2e

package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The images agent-sandbox provides by itself, and the base they are built
// from (the launcher's defaults).
const (
	defaultSandboxImage = "localhost/agent-sandbox:dev"
	defaultRouterImage  = "localhost/agent-sandbox-router:dev"
	baseImage           = "docker.io/library/debian:trixie-slim"
	// A build served by podman's layer cache takes seconds; a real one of
	// the sandbox image takes minutes and downloads Claude Code.
	cachedBuildLimit = 90 * time.Second
)

var stepLine = regexp.MustCompile(`(?m)^agent-sandbox: building (sandbox|router) image: step \d+/\d+ \S`)

func TestFirstRunBuild(t *testing.T) {
	// Where `make images` built the images (through the launcher), every
	// step comes from the layer cache: both images are rebuilt, in seconds,
	// and nothing is downloaded. The podman 5 leg copies the sandbox image
	// in, without its cache, and builds only the router there in its
	// setup: there the row rebuilds the router, and the other leg both.
	if _, err := podman("image", "exists", baseImage); err != nil {
		t.Fatalf("%s is not in this storage: the first-run build needs it (hack/setup-test-host imports it)", baseImage)
	}
	copied := os.Getenv("AGENT_SANDBOX_E2E_IMAGES_COPIED") != ""
	missing, what := []string{defaultSandboxImage, defaultRouterImage}, "missing default images are built"
	if copied {
		missing, what = []string{defaultRouterImage}, "a missing router image is built"
	}
	row(t, "first run: "+what+" with a step counter, then the session runs", func(t *testing.T) {
		ids := untagWithBackup(t, missing...)
		r := runSession(t, sessionOpts{
			Cmd: []string{"true"},
			// Unset: the launcher's own defaults, as on a fresh machine.
			Env:     map[string]string{"AGENT_SANDBOX_IMAGE": "", "AGENT_SANDBOX_ROUTER_IMAGE": "", "AGENT_SANDBOX_TRACE": ""},
			Timeout: 2 * cachedBuildLimit,
		})
		wantCode(t, r, 0)
		if r.Elapsed > cachedBuildLimit {
			t.Errorf("first run took %s: the build did not come from the layer cache", r.Elapsed)
		}
		for _, img := range missing {
			if !strings.Contains(r.Stderr(), "agent-sandbox: image "+img+" is missing: building it") {
				t.Errorf("stderr does not say %s is being built", img)
			}
			if !strings.Contains(r.Stderr(), "agent-sandbox: built "+img+" in ") {
				t.Errorf("stderr does not say %s was built", img)
			}
		}
		if copied {
			wantSteps(t, r.Stderr(), "router")
		} else {
			wantSteps(t, r.Stderr(), "sandbox", "router")
		}
		// Rebuilt from the cache: the very images that were there.
		wantImageIDs(t, ids)
	})
	row(t, "agent-sandbox build --only router rebuilds the router image from the cache", func(t *testing.T) {
		ids := backupImages(t, defaultRouterImage)
		r := runSession(t, sessionOpts{
			Args:    []string{"build", "--only", "router"},
			Env:     map[string]string{"AGENT_SANDBOX_IMAGE": "", "AGENT_SANDBOX_ROUTER_IMAGE": "", "AGENT_SANDBOX_TRACE": ""},
			Timeout: cachedBuildLimit,
		})
		wantCode(t, r, 0)
		wantSteps(t, r.Stderr(), "router")
		if strings.Contains(r.Stderr(), "sandbox image") {
			t.Errorf("--only router also built the sandbox image")
		}
		if !strings.Contains(r.Stderr(), "agent-sandbox: built "+defaultRouterImage+" in ") {
			t.Errorf("stderr does not say %s was built", defaultRouterImage)
		}
		wantImageIDs(t, ids)
	})
}

// wantSteps asserts plain step lines (stderr is no terminal here) for each
// image role, and none of a terminal's rewriting.
func wantSteps(t *testing.T, stderr string, roles ...string) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range stepLine.FindAllStringSubmatch(stderr, -1) {
		seen[m[1]]++
	}
	for _, role := range roles {
		if seen[role] < 2 {
			t.Errorf("stderr has %d step lines for the %s image, want one per Containerfile step", seen[role], role)
		}
	}
	if strings.ContainsAny(stderr, "\r\033") {
		t.Errorf("stderr is no terminal, yet has terminal control characters")
	}
}

// untagWithBackup removes the images' names, keeping each image under a
// backup name, and returns their IDs; backupImages only adds the backup.
// Cleanup puts back a name that is still missing. A name on another image
// stays: a build made it (this row's, or a concurrent `make images`).
func untagWithBackup(t *testing.T, images ...string) map[string]string {
	t.Helper()
	ids := backupImages(t, images...)
	for _, img := range images {
		if _, err := podman("untag", img, img); err != nil {
			t.Fatal(err)
		}
		if _, err := podman("image", "exists", img); err == nil {
			t.Fatalf("%s still exists after untagging", img)
		}
	}
	return ids
}

func backupImages(t *testing.T, images ...string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, img := range images {
		id, err := imageID(img)
		if err != nil {
			t.Fatalf("%s must exist before this row: %v", img, err)
		}
		backup := backupName(img)
		if _, err := podman("tag", id, backup); err != nil {
			t.Fatal(err)
		}
		ids[img] = id
		t.Cleanup(func() {
			if _, err := podman("image", "exists", img); err != nil {
				if _, err := podman("tag", id, img); err != nil {
					t.Errorf("cannot restore %s: %v", img, err)
				}
			}
			if _, err := podman("untag", id, backup); err != nil {
				t.Errorf("cannot remove the backup name %s: %v", backup, err)
			}
		})
	}
	return ids
}

func backupName(img string) string {
	name := img[strings.LastIndex(img, "/")+1:]
	return "localhost/asb-e2e-backup-" + strings.ReplaceAll(name, ":", "-") + ":keep"
}

func imageID(img string) (string, error) {
	out, err := podman("image", "inspect", "--format", "{{.Id}}", img)
	return strings.TrimSpace(out), err
}

func wantImageIDs(t *testing.T, ids map[string]string) {
	t.Helper()
	for img, want := range ids {
		got, err := imageID(img)
		switch {
		case err != nil:
			t.Errorf("%s does not exist after the build: %v", img, err)
		case got != want:
			t.Errorf("%s is image %.12s, not the %.12s built before: the build missed the layer cache", img, got, want)
		}
	}
}
