//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
	// recipeBuildTimeout covers a cold build: the agent's npm package
	// (Codex's is about 170 MB) comes from the registry.
	recipeBuildTimeout = 10 * time.Minute
	// recipeSessionTimeout allows for a busy machine: Gemini's --version
	// alone took 12 s under load, and the first session on a new image may
	// copy its layers for the user namespace.
	recipeSessionTimeout = 3 * time.Minute
)

// TestRecipes builds each recipe's image from its Containerfile as the
// README says, then runs the agent in a sandbox through the real launcher
// with the suite's own allowlist: the recipe's allowlist names real hosts,
// which no test may reach.
func TestRecipes(t *testing.T) {
	for _, r := range recipes {
		row(t, r.name+": recipe image builds and "+strings.Join(r.cmd, " ")+" runs in the sandbox", func(t *testing.T) {
			version := pinnedVersion(t, r)
			image := buildRecipe(t, r.name)
			res := runSession(t, sessionOpts{
				Cmd:     r.cmd,
				Env:     map[string]string{"AGENT_SANDBOX_IMAGE": image},
				Timeout: recipeSessionTimeout,
			})
			wantCode(t, res, 0)
			if !strings.Contains(res.Stdout, version) {
				t.Errorf("%s printed %q, want the pinned version %s", strings.Join(r.cmd, " "), strings.TrimSpace(res.Stdout), version)
			}
		})
	}
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

// buildRecipe builds recipes/name on the suite's agent image, into the
// suite's storage, and returns the image's name.
func buildRecipe(t *testing.T, name string) string {
	t.Helper()
	image := "localhost/agent-sandbox-" + name + ":test"
	args := []string{"build", "--pull=never", "--build-arg", "BASE=" + harness.sandboxImage, "-t", image}
	if ca := hostCA(); ca != "" {
		args = append(args, "--secret", "id=hostca,src="+ca)
	}
	args = append(args, recipeDir(name))
	previous, _ := podman("image", "inspect", "--format", "{{.Id}}", image)

	ctx, cancel := context.WithTimeout(context.Background(), recipeBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("podman %s: %s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Fatalf("building recipes/%s failed: %v\n%s", name, err, indent(tail(out.String(), 40)))
	}
	// A changed base or Containerfile leaves the previous build untagged;
	// without this, every such run would leave an image behind.
	if previous = strings.TrimSpace(previous); previous != "" {
		if now, _ := podman("image", "inspect", "--format", "{{.Id}}", image); strings.TrimSpace(now) != previous {
			_, _ = podman("rmi", previous)
		}
	}
	return image
}

// hostCA is what the build's npm step trusts besides Debian's CAs, as with
// the Makefile's HOST_CA: a site's TLS proxy may stand between the build and
// the registry. A podman 5 root filesystem has no CA bundle of its own, so
// AGENT_SANDBOX_E2E_HOST_CA can name the host's copy.
func hostCA() string {
	for _, path := range []string{os.Getenv("AGENT_SANDBOX_E2E_HOST_CA"), "/etc/ssl/certs/ca-certificates.crt"} {
		if fi, err := os.Stat(path); path != "" && err == nil && fi.Size() > 0 {
			return path
		}
	}
	return ""
}

// tail keeps a failed build's log readable: the error is at the end.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
