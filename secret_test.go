package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/testpty"
)

// secretCmd runs `agent-sandbox secret ARGS...` through the real command
// tree with stdin, on a machine whose environment is env, and returns its
// exit code, stdout and stderr.
func secretCmd(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runCLIIn(t, env, stdin, append([]string{"secret"}, args...)...)
}

// secretTestConfig is an environment with a config dir of its own, where
// secrets go to dir, and no credential variable set.
func secretTestConfig(t *testing.T) (dir string, env map[string]string) {
	t.Helper()
	xdg := t.TempDir()
	return filepath.Join(xdg, "agent-sandbox", "secrets"), map[string]string{"XDG_CONFIG_HOME": xdg}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestSecretSetStoresPrivately(t *testing.T) {
	dir, env := secretTestConfig(t)
	code, stdout, stderr := secretCmd(t, env, "sk-ant-api03-abc_DEF-123\n", "set", "anthropic")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	path := filepath.Join(dir, "anthropic")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "sk-ant-api03-abc_DEF-123\n" {
		t.Errorf("stored %q", b)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("secret file mode %04o, want 0600", m)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("secrets dir mode %04o, want 0700", m)
	}
	if strings.Contains(stdout+stderr, "abc_DEF") {
		t.Errorf("set echoed the secret: stdout %q stderr %q", stdout, stderr)
	}
	// Replacing a file that was made readable keeps the new one private.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := secretCmd(t, env, "sk-ant-api03-second", "set", "anthropic"); code != 0 {
		t.Fatalf("second set: exit %d, stderr:\n%s", code, stderr)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("replaced secret mode %04o, want 0600", m)
	}
	if v, err := readSecret(dir, "anthropic"); err != nil || v != "sk-ant-api03-second" {
		t.Errorf("readSecret = %q, %v", v, err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %v", leftovers)
	}
}

func TestSecretSetRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"unknown name", "k", []string{"set", "anthropic-key"}, `"anthropic-key" is not a secret agent-sandbox knows; use one of: anthropic, anthropic-oauth, openai, gemini`},
		{"no name", "k", []string{"set"}, "secret set takes one name"},
		{"empty", "\n", []string{"set", "openai"}, "the API key is empty; nothing was stored"},
		{"a quote", `sk-"x`, []string{"set", "openai"}, "is not an API key or token"},
		{"a dollar", "sk-$x", []string{"set", "gemini"}, "is not an API key or token"},
		{"two lines", "sk-a\nsk-b\n", []string{"set", "gemini"}, "is not an API key or token"},
		{"a space", "sk a", []string{"set", "anthropic-oauth"}, "the OAuth token is not an API key or token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, env := secretTestConfig(t)
			code, _, stderr := secretCmd(t, env, tc.stdin, tc.args...)
			if code != exitRefused {
				t.Errorf("exit %d, want %d", code, exitRefused)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
			}
			if des, _ := os.ReadDir(dir); len(des) > 0 {
				t.Errorf("something was stored: %v", des)
			}
		})
	}
}

func TestSecretListNamesOnly(t *testing.T) {
	dir, env := secretTestConfig(t)
	for _, name := range []string{"openai", "anthropic"} {
		if code, _, stderr := secretCmd(t, env, "value-of-"+name, "set", name); code != 0 {
			t.Fatalf("set %s: %s", name, stderr)
		}
	}
	// A file of another name is not a secret of ours.
	must(t, os.WriteFile(filepath.Join(dir, "notes"), []byte("x"), 0o600))
	code, stdout, stderr := secretCmd(t, env, "", "list")
	if code != 0 || stdout != "anthropic\nopenai\n" {
		t.Errorf("list: exit %d, stdout %q, stderr %q; want the two names", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "value-of") {
		t.Error("list printed a value")
	}
	// A file others can read is listed with its fix, and list fails.
	path := filepath.Join(dir, "openai")
	must(t, os.Chmod(path, 0o644))
	code, stdout, stderr = secretCmd(t, env, "", "list")
	if code != exitRefused || stdout != "anthropic\nopenai\n" || !strings.Contains(stderr, "fix: chmod 600 "+path) {
		t.Errorf("list with a 0644 file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestSecretRemove(t *testing.T) {
	dir, env := secretTestConfig(t)
	if code, _, stderr := secretCmd(t, env, "k1", "set", "gemini"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := secretCmd(t, env, "", "rm", "gemini"); code != 0 || !strings.Contains(stderr, "removed gemini") {
		t.Fatalf("rm: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "gemini")); !os.IsNotExist(err) {
		t.Errorf("gemini still stored: %v", err)
	}
	if code, _, stderr := secretCmd(t, env, "", "rm", "gemini"); code != exitRefused || !strings.Contains(stderr, "no secret gemini is stored") {
		t.Errorf("rm of a missing secret: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := secretCmd(t, env, "", "rm", "../allowed-hosts"); code != exitRefused || !strings.Contains(stderr, "is not a secret agent-sandbox knows") {
		t.Errorf("rm of a path: exit %d, stderr %q", code, stderr)
	}
}

// A session refuses a secret file that others may read or write, in one
// line that ends with the chmod that fixes it.
func TestReadSecretRefusesOpenModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "anthropic")
	must(t, os.WriteFile(path, []byte("sk-ant-api03-x\n"), 0o600))
	for _, m := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o660} {
		must(t, os.Chmod(path, m))
		_, err := readSecret(dir, "anthropic")
		if err == nil {
			t.Errorf("mode %04o accepted", m)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.HasSuffix(msg, "fix: chmod 600 "+path) {
			t.Errorf("mode %04o: %q is not one line ending in the fix", m, msg)
		}
		if strings.Contains(msg, "sk-ant") {
			t.Errorf("the refusal shows the secret: %q", msg)
		}
	}
	for _, m := range []os.FileMode{0o600, 0o400} {
		must(t, os.Chmod(path, m))
		if v, err := readSecret(dir, "anthropic"); err != nil || v != "sk-ant-api03-x" {
			t.Errorf("mode %04o: %q, %v", m, v, err)
		}
	}
	if v, err := readSecret(dir, "openai"); err != nil || v != "" {
		t.Errorf("a missing secret: %q, %v; want none and no error", v, err)
	}
	must(t, os.Mkdir(filepath.Join(dir, "gemini"), 0o700))
	if _, err := readSecret(dir, "gemini"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a dir as a secret: %v", err)
	}
}

// On a terminal the secret is read without echo, after a prompt.
func TestSecretInputTerminalDoesNotEcho(t *testing.T) {
	master, slave := testpty.Open(t)
	var prompt bytes.Buffer
	got := make(chan string, 1)
	go func() {
		v, err := secretInput(slave, &prompt, credKindBySecret("anthropic"))
		if err != nil {
			v = "error: " + err.Error()
		}
		got <- v
	}()
	// Wait until echo is off before typing, as a person would after the prompt.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
		if err == nil && tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo never went off")
		}
	}
	if _, err := master.WriteString("sk-ant-api03-typed\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != "sk-ant-api03-typed" {
			t.Fatalf("read %q", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("secretInput never returned")
	}
	if !strings.Contains(prompt.String(), "paste the API key for api.anthropic.com (ANTHROPIC_API_KEY; it is not shown)") {
		t.Errorf("prompt = %q", prompt.String())
	}
	// Whatever the terminal shows now is all it echoed: the newline of
	// the prompt's line at most.
	var shown []byte
	for {
		fds := []unix.PollFd{{Fd: int32(master.Fd()), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 200); err != nil || n == 0 {
			break
		}
		buf := make([]byte, 4096)
		n, err := unix.Read(int(master.Fd()), buf)
		if err != nil || n <= 0 {
			break
		}
		shown = append(shown, buf[:n]...)
	}
	if strings.Contains(string(shown), "typed") {
		t.Errorf("the terminal echoed the secret: %q", shown)
	}
}
