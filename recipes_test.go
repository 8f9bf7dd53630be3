package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
)

// The recipes for other agents (recipes/*) are documented in the README and
// built and run by e2e/recipes_test.go. These checks keep the parts that
// need no podman true: the allowlists parse and lint clean, the images stay
// derived from the agent image and pinned, and the README names what is there.

var wantRecipes = []string{"codex", "gemini"}

func recipeNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("recipes", "*", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(filepath.Dir(f)))
	}
	for _, want := range wantRecipes {
		if !slices.Contains(names, want) {
			t.Fatalf("recipes/%s/Containerfile is missing; the README promises a %s recipe", want, want)
		}
	}
	return names
}

func TestRecipeAllowlistsParseAndLintClean(t *testing.T) {
	for _, name := range recipeNames(t) {
		path := filepath.Join("recipes", name, "allowed-hosts")
		entries, err := allowlist.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(entries) == 0 {
			t.Errorf("%s has no entries: the agent could not reach its API", path)
		}
		for _, w := range allowlist.Lint(entries) {
			t.Errorf("%s: %s", path, w)
		}
	}
}

var (
	recipeBase    = regexp.MustCompile(`(?m)^ARG BASE=localhost/agent-sandbox:dev$`)
	recipeFrom    = regexp.MustCompile(`(?m)^FROM \$\{BASE\}$`)
	recipePin     = regexp.MustCompile(`(?m)^ARG [A-Z_]+_VERSION=[0-9]+\.[0-9]+\.[0-9]+$`)
	recipeUser    = regexp.MustCompile(`(?m)^USER (\S+)$`)
	recipeVersion = regexp.MustCompile(`--version`)
)

func TestRecipeContainerfiles(t *testing.T) {
	for _, name := range recipeNames(t) {
		path := filepath.Join("recipes", name, "Containerfile")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cf := string(b)
		if !recipeBase.MatchString(cf) || !recipeFrom.MatchString(cf) {
			t.Errorf("%s must build FROM ${BASE} with ARG BASE=localhost/agent-sandbox:dev: the sandbox's tools and uid 1000 come from there", path)
		}
		if !recipePin.MatchString(cf) {
			t.Errorf("%s must pin its agent with ARG NAME_VERSION=x.y.z: the sandbox must not change under its user", path)
		}
		if !recipeVersion.MatchString(cf) {
			t.Errorf("%s must run the agent's --version in the build, so a broken install fails there", path)
		}
		users := recipeUser.FindAllStringSubmatch(cf, -1)
		if len(users) == 0 || users[len(users)-1][1] != "claude" {
			t.Errorf("%s must end as USER claude: the agent runs as uid 1000, never root", path)
		}
	}
}

// readmeSection returns the README's section whose heading contains title,
// up to the next heading of the same level.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = strings.Contains(line, title)
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("README.md has no section %q: document the recipes in recipes/", "## "+title)
	}
	return strings.Join(out, "\n")
}

func TestReadmeNamesRecipes(t *testing.T) {
	section := readmeSection(t, "Other agents")
	for _, want := range []string{"AGENT_SANDBOX_IMAGE", "agent-sandbox allow", "e2e/recipes_test.go"} {
		if !strings.Contains(section, want) {
			t.Errorf("README's Other agents section does not mention %s", want)
		}
	}
	for _, name := range recipeNames(t) {
		for _, want := range []string{"recipes/" + name, "recipes/" + name + "/allowed-hosts"} {
			if !strings.Contains(section, want) {
				t.Errorf("README's Other agents section does not mention %s", want)
			}
		}
		entries, err := allowlist.ReadFile(filepath.Join("recipes", name, "allowed-hosts"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.Contains(section, "`"+e.String()+"`") {
				t.Errorf("README's Other agents section does not list `%s` from recipes/%s/allowed-hosts", e, name)
			}
		}
	}
}
