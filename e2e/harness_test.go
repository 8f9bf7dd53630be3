//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testpki"
)

const (
	egressNet    = "agent-sandbox-egress"
	egressSubnet = "10.99.0.0/24"
	fakeIP       = "10.99.0.10"
	fakeName     = "asb-e2e-fakeupstream"
	// harnessLabel marks what the suite itself starts, so cleanup never
	// touches anything else.
	harnessLabel = "asb-e2e.role"
	// homeVolumePrefix names the per-test home volumes.
	homeVolumePrefix = "asb-e2e-home-"
)

// gitHost is the name the fake serves git's smart HTTP protocol for, from
// the bare repositories under gitRoot() (its -git-root, /fake/git inside).
const gitHost = "git.allowed.test"

func gitRoot() string { return filepath.Join(harness.fakeDir, "git") }

// gitAuthRepo is the bare repository under gitRoot() that the fake serves
// only to a request with an Authorization header.
const gitAuthRepo = "secret.git"

// The fake GitHub of TestForge: git on gitHost, the REST and GraphQL API
// on forgeAPIHost, npm's registry on npmHost. Its repositories under an
// owner (forgeRepos) take only the user's token (harness.forgeToken).
const (
	forgeAPIHost = "forge-api.allowed.test"
	npmHost      = "npm.allowed.test"
	ownRepo      = "me/proj"
	otherRepo    = "other/lib"
)

var forgeRepos = []string{ownRepo, otherRepo}

// fakeZone is everything the fake DNS knows. Denied names resolve there too:
// if one is blocked in the sandbox, the router blocked it, not the fake.
var fakeZone = []string{
	"allowed.test", "*.allowed.test",
	"wild.test", "*.wild.test",
	"denied.test", "*.denied.test",
}

// harness is the state TestMain sets up for every row.
var harness struct {
	bin          string // agent-sandbox under test
	sandboxImage string
	routerImage  string
	fakeImage    string
	workDir      string // per-run dir under $HOME/e2e-work
	fakeDir      string // mounted into the fake: certs and its log
	caPEM        []byte
	forgeToken   string    // the user's GitHub token the fake forge takes
	baseline     leftovers // session objects that existed before the run
	fakeStarted  bool
	netCreated   bool
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// setup checks prerequisites and fails loudly: a missing image or binary must
// never turn into skipped (silently passing) security rows.
func setup() error {
	h := &harness
	h.bin = os.Getenv("AGENT_SANDBOX_BIN")
	if h.bin == "" {
		return errors.New("AGENT_SANDBOX_BIN is not set: run the suite with `make e2e` (hack/run-e2e)")
	}
	if fi, err := os.Stat(h.bin); err != nil || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("AGENT_SANDBOX_BIN=%s is not an executable file: run `make build`", h.bin)
	}
	if _, err := exec.LookPath("podman"); err != nil {
		return errors.New("podman not found in PATH: run hack/setup-test-host")
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(rt); rt == "" || err != nil || !fi.IsDir() {
		return fmt.Errorf("XDG_RUNTIME_DIR=%q is not a directory: rootless podman needs it (hack/run-e2e sets it)", rt)
	}
	if out, err := podman("info", "--format", "{{.Host.Security.Rootless}}"); err != nil {
		return fmt.Errorf("podman does not work for this user: %v", err)
	} else if strings.TrimSpace(out) != "true" {
		return errors.New("podman is not rootless here: run the suite as the test user (make e2e does, as root)")
	}
	if err := lockRun(rt); err != nil {
		return err
	}
	h.sandboxImage = envOr("AGENT_SANDBOX_IMAGE", "localhost/agent-sandbox:dev")
	h.routerImage = envOr("AGENT_SANDBOX_ROUTER_IMAGE", "localhost/agent-sandbox-router:dev")
	h.fakeImage = envOr("AGENT_SANDBOX_E2E_FAKE_IMAGE", "localhost/agent-sandbox-fakeupstream:test")
	for _, img := range []string{h.sandboxImage, h.routerImage, h.fakeImage} {
		if _, err := podman("image", "exists", img); err != nil {
			return fmt.Errorf("image %s is missing for this user: run `make images e2e-images` (or hack/setup-test-host)", img)
		}
	}

	base := filepath.Join(os.Getenv("HOME"), "e2e-work")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	var err error
	if h.workDir, err = os.MkdirTemp(base, "run-"); err != nil {
		return err
	}
	// Containers run under other ids of the user namespace: let them in.
	if err := os.Chmod(h.workDir, 0o755); err != nil {
		return err
	}
	if err := removeStaleHarness(); err != nil {
		return err
	}
	if h.baseline, err = listLeftovers(); err != nil {
		return err
	}
	if !h.baseline.empty() {
		fmt.Fprintf(os.Stderr, "e2e: warning: session objects left by something before this run (ignored by leftover checks):\n%s", h.baseline)
	}
	if err := ensureEgressNetwork(); err != nil {
		return err
	}
	if err := writePKI(); err != nil {
		return err
	}
	return startFake()
}

// atTeardown runs after every test, before the harness is torn down:
// rows that print a report at the end of the suite register here.
var atTeardown []func()

func teardown() {
	for _, f := range atTeardown {
		f()
	}
	h := &harness
	if h.fakeStarted {
		if out, err := podman("rm", "-f", "-t", "2", fakeName); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: cannot remove %s: %v\n%s", fakeName, err, out)
		}
	}
	if h.netCreated {
		// Not forced: a session of someone else may still use it.
		if out, err := podman("network", "rm", egressNet); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: leaving %s in place: %v\n%s", egressNet, err, out)
		}
	}
	if h.workDir != "" && os.Getenv("AGENT_SANDBOX_E2E_KEEP") == "" {
		removeAll(h.workDir)
	} else if h.workDir != "" {
		fmt.Fprintf(os.Stderr, "e2e: keeping %s (AGENT_SANDBOX_E2E_KEEP)\n", h.workDir)
	}
}

// runLock is held for the whole run: two runs of one user share the fake's
// name and address, and each would tear down the other's.
var runLock *os.File

func lockRun(runtimeDir string) error {
	f, err := os.OpenFile(filepath.Join(runtimeDir, "asb-e2e.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Minute)
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			runLock = f
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return fmt.Errorf("another e2e run of this user held %s for 20 minutes: let it finish or end it", f.Name())
		}
		if !waited {
			fmt.Fprintln(os.Stderr, "e2e: waiting for another e2e run of this user to finish")
		}
		time.Sleep(time.Second)
	}
}

// removeAll also deletes files that containers wrote under subordinate ids.
func removeAll(dir string) {
	if err := os.RemoveAll(dir); err == nil {
		return
	}
	if out, err := podman("unshare", "rm", "-rf", dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cannot remove %s: %v\n%s", dir, err, out)
	}
}

// podman runs the CLI and returns stdout; errors carry stderr.
func podman(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func removeStaleHarness() error {
	out, err := podman("ps", "-a", "--filter", "label="+harnessLabel, "--format", "{{.Names}}")
	if err != nil {
		return err
	}
	for _, name := range lines(out) {
		if _, err := podman("rm", "-f", "-t", "0", name); err != nil {
			return fmt.Errorf("remove stale %s: %w", name, err)
		}
	}
	// Home volumes of an interrupted run; one still in use stays.
	vols, err := podman("volume", "ls", "--format", "{{.Name}}")
	if err != nil {
		return err
	}
	for _, v := range lines(vols) {
		if strings.HasPrefix(v, homeVolumePrefix) {
			_, _ = podman("volume", "rm", v)
		}
	}
	return nil
}

// ensureEgressNetwork (re)creates the shared egress network with a fixed
// subnet so the fake upstream can have a fixed address. One still used by
// running sessions is kept when its subnet already fits.
func ensureEgressNetwork() error {
	if _, err := podman("network", "exists", egressNet); err == nil {
		users, err := podman("ps", "-a", "--filter", "network="+egressNet, "--format", "{{.Names}}")
		if err != nil {
			return err
		}
		subnet, _ := podman("network", "inspect", egressNet, "--format", "{{range .Subnets}}{{.Subnet}} {{end}}")
		if len(lines(users)) > 0 {
			if strings.TrimSpace(subnet) == egressSubnet {
				return nil
			}
			return fmt.Errorf("%s has subnet %s, not %s, and is in use by %v: end those sessions or run `podman network rm -f %s`",
				egressNet, strings.TrimSpace(subnet), egressSubnet, lines(users), egressNet)
		}
		if _, err := podman("network", "rm", egressNet); err != nil {
			return err
		}
	}
	if _, err := podman("network", "create", "--subnet", egressSubnet, egressNet); err != nil {
		return fmt.Errorf("%w (is %s used by another network or interface?)", err, egressSubnet)
	}
	harness.netCreated = true
	return nil
}

func writePKI() error {
	h := &harness
	h.fakeDir = filepath.Join(h.workDir, "fake")
	if err := os.Mkdir(h.fakeDir, 0o755); err != nil {
		return err
	}
	ca, err := testpki.NewCA()
	if err != nil {
		return err
	}
	cert, key, err := ca.Issue(fakeZone, []net.IP{net.ParseIP(fakeIP)})
	if err != nil {
		return err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	h.caPEM = ca.CertPEM
	tok := make([]byte, 18)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	h.forgeToken = "ghp_" + hex.EncodeToString(tok)
	if err := os.Mkdir(gitRoot(), 0o755); err != nil {
		return err
	}
	// The repository that wants credentials (the fake's -git-auth-repos):
	// git sends a URL's userinfo only after a 401.
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", filepath.Join(gitRoot(), gitAuthRepo)).CombinedOutput(); err != nil {
		return fmt.Errorf("git init %s: %v: %s", gitAuthRepo, err, out)
	}
	for name, data := range map[string][]byte{"ca.pem": ca.CertPEM, "ca.key": caKey, "server.pem": cert, "server.key": key} {
		if err := testpki.WriteFile(filepath.Join(h.fakeDir, name), data); err != nil {
			return err
		}
	}
	return nil
}

func startFake() error {
	h := &harness
	var zone []string
	for _, name := range fakeZone {
		zone = append(zone, name+"="+fakeIP)
	}
	_, err := podman("run", "-d", "--name", fakeName, "--label", harnessLabel+"=fakeupstream",
		"--network", egressNet, "--ip", fakeIP, "-v", h.fakeDir+":/fake",
		h.fakeImage,
		"-log", "/fake/fake.log", "-dns", strings.Join(zone, ","),
		"-cert", "/fake/server.pem", "-key", "/fake/server.key",
		"-ca-cert", "/fake/ca.pem", "-ca-key", "/fake/ca.key",
		"-git-hosts", gitHost, "-git-root", "/fake/git", "-git-auth-repos", "/"+gitAuthRepo+",/"+ownRepo+".git,/"+otherRepo+".git",
		"-forge-api-hosts", forgeAPIHost, "-forge-token", h.forgeToken)
	if err != nil {
		return err
	}
	h.fakeStarted = true
	deadline := time.Now().Add(30 * time.Second)
	for !fakeLogContains(" ready dns=") {
		if time.Now().After(deadline) {
			logs, _ := podman("logs", fakeName)
			return fmt.Errorf("fake upstream never logged ready; its output:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
