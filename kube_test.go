package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/kube"
)

// kubeProject is a launch dir whose repository pushes to remote, and the
// settings of a user with an allowlist and, when key is set, an API key.
func kubeProject(t *testing.T, remote, key string) (settings, string) {
	t.Helper()
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "proj")
	for _, d := range []string{filepath.Join(dir, ".git", "objects"), filepath.Join(dir, ".git", "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(dir, ".git", "HEAD"):   "ref: refs/heads/main\n",
		filepath.Join(dir, ".git", "config"): "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = " + remote + "\n",
		filepath.Join(home, "allowed-hosts"): "api.anthropic.com\ngit.example\ngit.example:22\n",
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HOME": home, "AGENT_SANDBOX_ALLOWLIST": filepath.Join(home, "allowed-hosts")}
	if key != "" {
		env["ANTHROPIC_API_KEY"] = key
	}
	return settingsFrom(env), dir
}

func TestKubeExportDecidesAsASession(t *testing.T) {
	const key = "sk-ant-api03-kubeexporttestkey000000"
	set, dir := kubeProject(t, "https://git.example/team/proj.git", key)
	var errOut bytes.Buffer
	s, err := kubeSandbox(set, kubeExportArgs{namespace: "agents"}, dir, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if s.CloneURL != "https://git.example/team/proj.git" || s.ProjectDir != "proj" {
		t.Errorf("clone %q into %q, want the push remote into proj", s.CloneURL, s.ProjectDir)
	}
	if s.Name != kubeName(dir) || kube.CheckName(s.Name) != nil || !strings.HasPrefix(s.Name, "agent-sandbox-proj-") {
		t.Errorf("name %q", s.Name)
	}
	if !strings.Contains(s.Credentials["anthropic.conf"], key) {
		t.Errorf("the router's credential files %v lack the user's key", s.Credentials)
	}
	for k, v := range s.Env {
		if strings.Contains(v, key) {
			t.Errorf("the agent gets the key in %s", k)
		}
	}
	if !strings.Contains(s.Env["ANTHROPIC_AUTH_TOKEN"], "placeholder") || s.Env["SSL_CERT_FILE"] != agentCABundle {
		t.Errorf("the agent's environment lacks the placeholder or the CA bundle: %v", s.Env)
	}
	if len(s.Plan.RouterPorts()) != 1 {
		t.Errorf("router ports %v, want the one host:port entry's", s.Plan.RouterPorts())
	}
	if !strings.Contains(strings.Join(s.Command, " "), "claude") {
		t.Errorf("command %v, want claude's", s.Command)
	}
	objs, err := kube.Manifests(s)
	if err != nil {
		t.Fatal(err)
	}
	if y, err := kube.YAML(s, objs); err != nil || !bytes.Contains(y, []byte("kind: Secret")) || !bytes.Contains(y, []byte("namespace: agents")) {
		t.Errorf("export (%v) lacks the Secret or the namespace", err)
	}
}

func TestKubeExportRefusals(t *testing.T) {
	set, dir := kubeProject(t, "git@git.example:team/proj.git", "")
	for _, tc := range []struct {
		args kubeExportArgs
		want string
	}{
		{kubeExportArgs{}, "only an https:// URL"},
		{kubeExportArgs{clone: "https://user:pw@git.example/x.git"}, "without credentials"},
		{kubeExportArgs{clone: "https://git.example/x.git", serviceIP: "fd00::1"}, "--service-ip fd00::1: not an IPv4 address"},
		{kubeExportArgs{clone: "https://git.example/x.git", name: "Bad_Name"}, "--name: name \"Bad_Name\" is not a valid sandbox name"},
		{kubeExportArgs{clone: "https://git.example/x.git", env: []string{"NOT_SET_HERE"}}, "NOT_SET_HERE is not set"},
		{kubeExportArgs{clone: "https://git.example/x.git", agent: "nobody"}, "not an agent"},
	} {
		_, err := kubeSandbox(set, tc.args, dir, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	if s, err := kubeSandbox(set, kubeExportArgs{clone: "https://git.example/x.git"}, dir, &bytes.Buffer{}); err != nil || len(s.Credentials) != 0 {
		t.Errorf("without a key: %v, credentials %v", err, s.Credentials)
	}
}

// Under podman the router gets what a test session pins (upstream
// resolver and ranges) and this machine's addresses; a cluster's only
// what is set; and podman takes no credentials.
func TestKubeExportForPodman(t *testing.T) {
	set, dir := kubeProject(t, "https://git.example/team/proj.git", "sk-ant-api03-kubeexporttestkey000000")
	set.upstreamDNS, set.upstreamAllow = "10.89.0.10", "10.89.0.0/24"
	set.parsed, set.invalid = parseSettings(set)
	s, err := kubeSandbox(set, kubeExportArgs{runtime: kube.RuntimePodman}, dir, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if s.RouterEnv["UPSTREAM_DNS"] != "10.89.0.10" || s.RouterEnv["UPSTREAM_ALLOW"] != "10.89.0.0/24" || s.RouterEnv["HOST_ADDRS"] != hostAddrs() {
		t.Errorf("router env %v", s.RouterEnv)
	}
	if _, err := kube.Manifests(s); err == nil || !strings.Contains(err.Error(), "without credentials") {
		t.Errorf("podman with a key: %v", err)
	}
	s, err = kubeSandbox(set, kubeExportArgs{}, dir, &bytes.Buffer{})
	if err != nil || s.RouterEnv["HOST_ADDRS"] != "" || s.RouterEnv["UPSTREAM_DNS"] != "10.89.0.10" {
		t.Errorf("a cluster's router env %v (%v)", s.RouterEnv, err)
	}
	if s, err := kubeSandbox(set, kubeExportArgs{cmd: []string{"sh", "./probes.sh"}}, dir, &bytes.Buffer{}); err != nil || !slices.Equal(s.Command, []string{"sh", "./probes.sh"}) {
		t.Errorf("-- sh ./probes.sh: command %q (%v)", s.Command, err)
	}
	if _, err := kubeSandbox(set, kubeExportArgs{runtime: "docker"}, dir, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--runtime docker") {
		t.Errorf("--runtime docker: %v", err)
	}
}

func TestKubeName(t *testing.T) {
	long := "/home/u/" + strings.Repeat("Very_Long.Name", 6)
	for _, dir := range []string{"/home/u/proj", long, "/"} {
		n := kubeName(dir)
		if err := kube.CheckName(n); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
	if kubeName("/a/proj") == kubeName("/b/proj") {
		t.Error("two projects of one name share a sandbox name")
	}
}

// An -o in the project would be read-write in the next session there: its
// agent could read the credentials or change what the user applies. The
// export refuses it, by any path (relative, through a link), and writes
// nothing; outside, the file is written 0600.
func TestKubeExportOutputOutsideTheProject(t *testing.T) {
	const key = "sk-ant-api03-kubeexporttestkey000000"
	set, dir := kubeProject(t, "https://git.example/team/proj.git", key)
	t.Chdir(dir)
	link := filepath.Join(t.TempDir(), "to-proj")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"sandbox.yaml", "./sub/../sandbox.yaml", filepath.Join(dir, ".git", "x.yaml"), filepath.Join(link, "sandbox.yaml")} {
		err := kubeExport(t.Context(), set, kubeExportArgs{output: out}, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "inside the project") || !strings.Contains(err.Error(), "kubectl apply -f -") {
			t.Errorf("-o %s: got %v, want a refusal naming the way out", out, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sandbox.yaml")); !os.IsNotExist(err) {
		t.Errorf("a refused export wrote the file (%v)", err)
	}
	// From a directory of the repository, its top is the project.
	sub := filepath.Join(dir, "docs")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if err := kubeExport(t.Context(), set, kubeExportArgs{output: "../sandbox.yaml"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "inside the project") {
		t.Errorf("-o ../sandbox.yaml from the repository's docs/: got %v, want the refusal", err)
	}
	t.Chdir(dir)
	// A shell's redirection into the project: refused, nothing written.
	redirected, err := os.Create(filepath.Join(dir, "redirected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer redirected.Close()
	if err := kubeExport(t.Context(), set, kubeExportArgs{}, redirected, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "stdout is redirected to") || !strings.Contains(err.Error(), "kubectl apply -f -") {
		t.Errorf("> redirected.yaml in the project: got %v, want the refusal", err)
	}
	if fi, err := redirected.Stat(); err != nil || fi.Size() != 0 {
		t.Errorf("the refused export wrote into the redirected file (%v)", err)
	}
	// Outside, the same redirection is written.
	outside, err := os.Create(filepath.Join(t.TempDir(), "redirected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	if err := kubeExport(t.Context(), set, kubeExportArgs{}, outside, &bytes.Buffer{}); err != nil {
		t.Errorf("> a file outside the project: %v", err)
	}
	if fi, err := outside.Stat(); err != nil || fi.Size() == 0 {
		t.Errorf("the export outside the project wrote nothing (%v)", err)
	}
	out := filepath.Join(t.TempDir(), "sandbox.yaml")
	if err := kubeExport(t.Context(), set, kubeExportArgs{output: out}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("written outside: %v, mode %v", err, fi.Mode())
	}
	if b, _ := os.ReadFile(out); !bytes.Contains(b, []byte(key)) {
		t.Error("the manifests outside lack the Secret's key")
	}
}
