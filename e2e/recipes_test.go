//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// recipe is one of recipes/*: an image derived from the agent image that
// the README tells users to build and run with --exec.
type recipe struct {
	name string // its directory under recipes/
	// pin is the Containerfile's ARG holding the agent's version, which the
	// version command must print.
	pin string
	cmd []string
}

var recipes = []recipe{
	{name: "codex", pin: "CODEX_VERSION", cmd: []string{"codex", "--version"}},
	{name: "gemini", pin: "GEMINI_CLI_VERSION", cmd: []string{"gemini", "--version"}},
}

const (
	// recipeSessionTimeout allows for a busy machine: Gemini's --version
	// alone took 12 s under load, and the first session on a new image may
	// copy its layers for the user namespace.
	recipeSessionTimeout = 3 * time.Minute
)

// TestRecipes runs each recipe's agent in a sandbox through the real
// launcher with the suite's own allowlist (the recipe's names real hosts,
// which no test may reach). `make e2e-images` built the images from the
// recipes' Containerfiles as the README says (their npm step reaches the
// registry, which is setup's to do, not a test's); the version the agent
// prints proves the image is the Containerfile's as it stands.
func TestRecipes(t *testing.T) {
	for _, r := range recipes {
		row(t, r.name+": the recipe image runs "+strings.Join(r.cmd, " ")+" in the sandbox", func(t *testing.T) {
			version := pinnedVersion(t, r)
			image := recipeImage(t, r.name)
			res := runSession(t, sessionOpts{
				Cmd:     r.cmd,
				Env:     map[string]string{"AGENT_SANDBOX_IMAGE": image},
				Timeout: recipeSessionTimeout,
			})
			wantCode(t, res, 0)
			if !strings.Contains(res.Stdout(), version) {
				t.Errorf("%s printed %q, want the pinned version %s: rebuild the image with make e2e-images", strings.Join(r.cmd, " "), strings.TrimSpace(res.Stdout()), version)
			}
		})
	}
}

// recipeImage is the recipe's image as make e2e-images built it.
func recipeImage(t *testing.T, name string) string {
	t.Helper()
	image := "localhost/agent-sandbox-" + name + ":test"
	if _, err := podman("image", "exists", image); err != nil {
		t.Fatalf("%s is missing: build it with make e2e-images (as the test user)", image)
	}
	return image
}

func recipeDir(name string) string {
	// The suite runs from the e2e directory of (a copy of) the tree.
	return filepath.Join("..", "recipes", name)
}

func pinnedVersion(t *testing.T, r recipe) string {
	t.Helper()
	cf, err := os.ReadFile(filepath.Join(recipeDir(r.name), "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG ` + r.pin + `=(\S+)$`).FindSubmatch(cf)
	if m == nil {
		t.Fatalf("recipes/%s/Containerfile has no ARG %s=VERSION", r.name, r.pin)
	}
	return string(m[1])
}
