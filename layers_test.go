package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/agent-sandbox/agent-sandbox"

// importsOf is what the non-test files of dir import.
func importsOf(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// The layers (docs/architecture.md): the commands and the session in the
// root drive the internal packages, whose imports only point down. The
// podman bindings are the podman adapter's alone, and the pure layers (the
// allowlist's grammar, the router's plan and log) import nothing that
// talks to podman or reads the environment.
func TestLayers(t *testing.T) {
	// Each internal package and the module's packages it may import.
	allowed := map[string][]string{
		"allowlist":  {},
		"routerconf": {"internal/allowlist"},
		"routerlog":  {},
		"iostreams":  {},
		"trace":      {"internal/iostreams"},
		"podman":     {"internal/apiservice", "internal/iostreams", "internal/trace"},
		"keeper":     {"internal/iostreams"},
		"kube":       {"internal/allowlist", "internal/routerconf"},
		"gate":       {},
	}
	for pkg, may := range allowed {
		for _, imp := range importsOf(t, filepath.Join("internal", pkg)) {
			if rel, ours := strings.CutPrefix(imp, module+"/"); ours && !slices.Contains(may, rel) || imp == module {
				t.Errorf("internal/%s imports %s: it may import only %v of this module", pkg, imp, may)
			}
		}
	}
	dirs, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(dirs, nil) {
		dir, name := ".", "the root"
		if d != nil {
			dir, name = filepath.Join("internal", d.Name()), "internal/"+d.Name()
		}
		if d != nil && (!d.IsDir() || d.Name() == "podman") {
			continue
		}
		for _, imp := range importsOf(t, dir) {
			if strings.HasPrefix(imp, "github.com/containers/podman/v5/pkg/bindings") {
				t.Errorf("%s imports %s: podman's bindings are internal/podman's", name, imp)
			}
		}
	}
}
