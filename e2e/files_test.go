//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFileBoundary is issue 12: what crosses the sandbox's edge without the
// network. Each row shows the attack failing for the reason the defence
// gives (the error text, not just a non-zero exit) and a canary that never
// fired, and beside it the same attack over an opened path, where the
// canary does fire.
func TestFileBoundary(t *testing.T) {
	runSecRows(t, append(fileRows, treeRows...)...)
}

var fileRows = []secRow{
	{15, "launch dirs where sockets live (/, /tmp, /var/tmp, /run, /dev/shm, $TMPDIR, $XDG_RUNTIME_DIR and any dir inside it) are refused before anything is created", rowSocketDirs},
	{16, "a launch dir holding a unix socket is refused; no session reaches a host socket", rowSocketInProject},
	{17, "a running agent that swaps its launch dir's parts for symlinks never gets a session started under it to mount them", rowMountRace},
	{18, "git config, hooks and agent settings written inside never run on the host; git works inside; a new repository is listed at exit", rowGitEscapes},
	{19, "*_proxy variables of the launcher (credentials included) never reach the agent", rowProxyEnv},
	{20, "each project has a home of its own; gc lists and removes the homes of projects that are gone", rowProjectHomes},
	{50, "a podman the agent leaves in its launch dir (.venv/bin on PATH, the current dir, an empty PATH entry) never runs on the host: not for the session, not for gc", rowPlantedPodman},
}

func rowSocketDirs(t *testing.T, ev *evidence) {
	tmpdir := mkdir(t, "tmpdir-")
	// The API service's socket dir exists once a session has run (the
	// harness's own sessions made it); its socket may appear after a
	// launch dir's scan, so lying inside the runtime dir is refused too.
	serviceDir := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "agent-sandbox-podman")
	if err := os.MkdirAll(serviceDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dirs := []struct{ dir, name, how string }{
		{"/", "/", ""}, {"/tmp", "/tmp", ""}, {"/var/tmp", "/var/tmp", ""}, {"/run", "/run", ""}, {"/dev/shm", "/dev/shm", ""},
		{os.Getenv("XDG_RUNTIME_DIR"), "$XDG_RUNTIME_DIR", ""}, {tmpdir, "$TMPDIR", ""},
		{serviceDir, "$XDG_RUNTIME_DIR", "it lies inside "},
	}
	before := podmanInventory(t)
	var refused []string
	for _, d := range dirs {
		nonce := newNonce(t)
		r := runSession(t, sessionOpts{Dir: d.dir, Cmd: []string{"sh", "-c", "echo ran-" + nonce},
			Env: map[string]string{"TMPDIR": tmpdir}})
		wantCode(t, r, 1)
		how := d.how
		if how == "" {
			how = "it is or contains "
		}
		if want := "refusing to mount " + d.dir + ": " + how + d.name; !strings.Contains(r.Stderr(), want) {
			t.Errorf("launch from %s: stderr lacks %q:\n%s", d.dir, want, indent(r.Stderr()))
		}
		if strings.Contains(r.Stdout(), "ran-"+nonce) {
			t.Errorf("LEAK: the agent ran in %s", d.dir)
		}
		if d.how != "" {
			refused = append(refused, d.name+"/"+filepath.Base(d.dir))
		} else {
			refused = append(refused, d.name)
		}
		wantNothingCreated(t, before, r)
	}
	if !t.Failed() {
		ev.add("%s: exit 1 naming the dir, the agent never ran, nothing created", strings.Join(refused, ", "))
	}
}

// canarySocket listens on a unix socket like a host program (tmux, an
// ssh-agent) and records every connection and what it sent.
type canarySocket struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []string
	done sync.WaitGroup
}

func listenCanary(t *testing.T, path string) *canarySocket {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// Containers run as the user (keep-id) but a plain container's root is
	// another id: let both connect, as a careless program would.
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	c := &canarySocket{ln: ln}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			c.mu.Lock()
			c.got = append(c.got, "connection: "+strings.TrimSpace(line))
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *canarySocket) close() { c.ln.Close(); c.done.Wait() }

func (c *canarySocket) heard() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// sendToSocket connects to a unix socket and sends a nonce, from python in
// the sandbox image.
func sendToSocket(path, nonce string) string {
	return fmt.Sprintf(`python3 -S -c 'import socket,sys
s=socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((sys.argv[2]+"\n").encode())' %s %s`, shellQuote(path), nonce)
}

func rowSocketInProject(t *testing.T, ev *evidence) {
	// A project dir with a socket a host program listens on, a few levels
	// down (a dev server's control socket, say).
	dir := launchDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "run/dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	inProject := listenCanary(t, filepath.Join(dir, "run/dev/control.sock"))
	// A host socket outside any launch dir, where tmux keeps its own.
	hostSock := filepath.Join(os.TempDir(), "asb-e2e-canary-"+newNonce(t)+".sock")
	outside := listenCanary(t, hostSock)

	before := podmanInventory(t)
	nonce := newNonce(t)
	r := runSession(t, sessionOpts{Dir: dir, Cmd: []string{"sh", "-c", sendToSocket(filepath.Join(dir, "run/dev/control.sock"), nonce) + "; echo ran-" + nonce}})
	wantCode(t, r, 1)
	if want := "holds the unix socket " + filepath.Join(dir, "run/dev/control.sock"); !strings.Contains(r.Stderr(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, indent(r.Stderr()))
	}
	if strings.Contains(r.Stdout(), "ran-"+nonce) {
		t.Errorf("LEAK: the agent ran in a dir holding a socket")
	}
	wantNothingCreated(t, before, r)

	// A named pipe a host program reads from is refused the same way.
	fifoDir := launchDir(t)
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "commands.fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	nonceFifo := newNonce(t)
	rf := runSession(t, sessionOpts{Dir: fifoDir, Cmd: []string{"sh", "-c", "echo ran-" + nonceFifo}})
	wantCode(t, rf, 1)
	if want := "holds the named pipe " + filepath.Join(fifoDir, "commands.fifo"); !strings.Contains(rf.Stderr(), want) || strings.Contains(rf.Stdout(), "ran-"+nonceFifo) {
		t.Errorf("a dir holding a named pipe was not refused naming it (%q):\n%s", want, indent(rf.Stderr()))
	}
	wantNothingCreated(t, before, rf)

	// From an ordinary project, the host's socket path is not there.
	nonce2 := newNonce(t)
	res, _ := probeSession(t, sessionOpts{}, probe{"connect to the host socket", sendToSocket(hostSock, nonce2)})
	if p := res["connect to the host socket"]; p.RC == 0 || !strings.Contains(p.Out, "FileNotFoundError") {
		t.Errorf("connecting to %s from the sandbox did not fail for want of the path: %s", hostSock, p)
	}

	// Opened path: a container that mounts the project dir as it is
	// reaches the socket, so the refusal is what stood in the way.
	nonce3 := newNonce(t)
	out, err := podman("run", "--rm", "--userns", "keep-id:uid=1000,gid=1000", "--network", "none", "-v", dir+":"+dir, harness.sandboxImage,
		"sh", "-c", sendToSocket(filepath.Join(dir, "run/dev/control.sock"), nonce3))
	if err != nil {
		t.Errorf("opened path: a plain container could not reach the socket (%v): %s", err, out)
	}
	waitHeard(inProject, nonce3)
	heard := strings.Join(inProject.heard(), "\n") + strings.Join(outside.heard(), "\n")
	for _, n := range []string{nonce, nonce2} {
		if strings.Contains(heard, n) {
			t.Errorf("LEAK: a canary socket heard %s:\n%s", n, heard)
		}
	}
	if !strings.Contains(heard, nonce3) {
		t.Errorf("opened path: the canary did not hear the plain container's nonce; heard:\n%s", heard)
	}
	if !t.Failed() {
		ev.add("launch refused (exit 1, names the socket; a named pipe likewise); a session's connect to the host socket failed with FileNotFoundError; both canaries heard nothing of the sandbox; a plain container mounting the same dir reached the socket (opened path)")
	}
}

func waitHeard(c *canarySocket, nonce string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(strings.Join(c.heard(), "\n"), nonce) {
			return
		}
	}
}

func rowMountRace(t *testing.T, ev *evidence) {
	outer := launchDir(t)
	inner := filepath.Join(outer, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	// The outer session's agent flips inner between the real dir and a
	// link to / for as long as the row runs.
	swapper := launchSwapper(t, outer)

	// Not runSession: its leftover check would count the racing session.
	// The launcher is started from outer and enters inner itself, as a
	// shell does: inner is missing for an instant at each swap.
	intoInner := writeScript(t, "into-inner", "until cd inner 2>/dev/null; do sleep 0.01; done\nexec "+harness.bin+" \"$@\"\n")
	const tries = 6
	asLink, asInside, asGone := 0, 0, 0
	for i := range tries {
		// Starts spread over the swap's period land on both of its states.
		time.Sleep(time.Duration(i*37%100) * time.Millisecond)
		nonce := newNonce(t)
		l := startLauncher(t, sessionOpts{Trace: true, Dir: outer, Bin: intoInner, Cmd: agentCmd("echo ran-" + nonce)}).wait()
		if l.Code != 1 {
			t.Errorf("try %d: exit %d, want 1 (refused)", i, l.Code)
		}
		if strings.Contains(l.Stdout(), "ran-"+nonce) {
			t.Errorf("LEAK: try %d: a session started inside the racing session's dir ran its agent:\n%s", i, indent(l.Stdout()))
		}
		switch {
		case strings.Contains(l.Stderr(), "lies inside "+outer):
			asInside++
		case strings.Contains(l.Stderr(), "refusing to mount /:"):
			asLink++
		case strings.Contains(l.Stderr(), "cannot read the launch directory "+inner+": "):
			// Swapped away between the launcher's look at its working
			// directory and its scan of it: refused as well.
			asGone++
		default:
			t.Errorf("try %d: refused for another reason than the race:\n%s", i, indent(l.Stderr()))
		}
	}
	swapper.stop(t)
	flips := swapper.flips(t)
	if flips < 2 {
		t.Errorf("the racing agent never swapped the path: the row proved nothing")
	}
	if !t.Failed() {
		ev.add("%d starts under a session swapping their dir for a link to / (%d swaps meanwhile): %d refused as inside the running session's dir, %d as /, %d as gone while it was scanned; no agent ran", tries, flips, asInside, asLink, asGone)
	}
}

type swapper struct {
	l       *launcher
	dir     string
	stopped bool
}

func launchSwapper(t *testing.T, dir string) *swapper {
	script := `touch started
n=0
while [ ! -e stop ]; do
  mv inner inner.real && ln -s / inner && sleep 0.05 && rm inner && mv inner.real inner
  n=$((n+1)); echo $n > flips
  sleep 0.05
done`
	l := startLauncher(t, sessionOpts{Trace: true, Dir: dir, Cmd: agentCmd(script), Timeout: 4 * time.Minute})
	s := &swapper{l: l, dir: dir}
	t.Cleanup(func() { s.stop(t) })
	if !l.waitFile("flips", 60*time.Second) {
		t.Fatal("the racing session never swapped its dir")
	}
	return s
}

func (s *swapper) flips(t *testing.T) int {
	var n int
	fmt.Sscan(strings.TrimSpace(s.l.fileIn("flips")), &n)
	return n
}

func (s *swapper) stop(t *testing.T) {
	if s.stopped {
		return
	}
	s.stopped = true
	if err := os.WriteFile(filepath.Join(s.dir, "stop"), nil, 0o644); err != nil {
		t.Error(err)
	}
	s.l.wait()
	s.l.wantCode(0)
}

// gitEnv is a clean git environment for the host's git as the test user.
func hostGit(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = []string{"HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=host", "GIT_AUTHOR_EMAIL=host@example.com", "GIT_COMMITTER_NAME=host", "GIT_COMMITTER_EMAIL=host@example.com"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	if out, err := hostGit(t, dir, args...); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// gitProject is a repository as a user has one: a commit, a submodule-like
// nested repository, agent settings, and a bare remote beside it in the
// launch dir (fetch and push go through git's real transport code).
func gitProject(t *testing.T) string {
	t.Helper()
	dir := launchDir(t)
	mustGit(t, dir, "init", "-q", "-b", "main")
	mustGit(t, dir, "init", "-q", "--bare", "-b", "main", "remote.git")
	for _, f := range []struct{ path, body string }{
		{".gitignore", "ca.pem\nremote.git/\nnested/\n"},
		{"README", "hello\n"},
		{".claude/settings.json", "{}\n"},
		{".mcp.json", "{}\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f.path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.path), []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustGit(t, dir, "add", ".")
	mustGit(t, dir, "commit", "-q", "-m", "first")
	mustGit(t, dir, "remote", "add", "origin", filepath.Join(dir, "remote.git"))
	mustGit(t, dir, "push", "-q", "origin", "main")
	mustGit(t, dir, "branch", "-q", "--set-upstream-to=origin/main")
	return dir
}

// servedRepo copies dir's repository, bare, to where the fake upstream
// serves git over HTTPS, and returns its URL there and its path here.
func servedRepo(t *testing.T, dir string) (url, bare string) {
	t.Helper()
	name := newNonce(t) + ".git"
	bare = filepath.Join(gitRoot(), name)
	mustGit(t, dir, "clone", "-q", "--bare", dir, bare)
	return "https://" + gitHost + "/" + name, bare
}

func rowGitEscapes(t *testing.T, ev *evidence) {
	dir := gitProject(t)
	// A second remote as users have one: HTTPS on an allowlisted host (the
	// fake upstream, git http-backend). The user's config names it; the
	// agent passes the test CA with -c, as it cannot write the config.
	url, bare := servedRepo(t, dir)
	mustGit(t, dir, "remote", "add", "upstream", url)
	served, err := hostGit(t, bare, "rev-parse", "main")
	if err != nil {
		t.Fatalf("the served repository has no main: %v %s", err, served)
	}
	served = strings.TrimSpace(served)
	const ca = "git -c http.sslCAInfo=\"$PWD/ca.pem\" "
	// The canary is outside the launch dir: only the host can create it.
	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	touch := "touch " + canary
	// Each escape, the file it needs, and the error the defence gives.
	const ro, busy = "Read-only file system", "Device or resource busy"
	escapes := []struct{ name, shell, want string }{
		{"git config core.fsmonitor", "git config core.fsmonitor " + shellQuote(touch), busy},
		{"git config core.hooksPath", "mkdir -p evil-hooks && printf '#!/bin/sh\\n" + touch + "\\n' > evil-hooks/post-commit && chmod +x evil-hooks/post-commit && git config core.hooksPath evil-hooks", busy},
		{"git config core.pager", "git config core.pager " + shellQuote(touch+"; cat"), busy},
		{"git config core.sshCommand", "git config core.sshCommand " + shellQuote(touch+"; ssh"), busy},
		{"append to .git/config", "printf '[core]\\n\\tfsmonitor = " + touch + "\\n' >> .git/config", ro},
		{"write a hook", "printf '#!/bin/sh\\n" + touch + "\\n' > .git/hooks/post-commit && chmod +x .git/hooks/post-commit", ro},
		{"move .git aside", "mv .git .git-aside", busy},
		{"replace .git/config", "cp .git/config .git/config.new && mv .git/config.new .git/config", busy},
		{"a hook in the bare remote", "printf '#!/bin/sh\\n" + touch + "\\n' > remote.git/hooks/post-receive", ro},
		{"claude settings hooks", `printf '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"` + touch + `"}]}]}}' > .claude/settings.json`, ro},
		{"a new claude settings file", `printf '{}' > .claude/settings.local.json`, ro},
		{".mcp.json", `printf '{"mcpServers":{"x":{"command":"sh","args":["-c","` + touch + `"]}}}' > .mcp.json`, ro},
	}
	var probes []probe
	for _, e := range escapes {
		probes = append(probes, probe{e.name, e.shell})
	}
	workflow := []probe{
		{"status", "git status --short"},
		{"add and commit", "echo work >> README && git add README && git -c user.name=agent -c user.email=agent@example.com commit -q -m work"},
		{"branch and checkout", "git branch topic && git checkout -q topic && echo more >> README && git -c user.name=agent -c user.email=agent@example.com commit -qam topic"},
		{"rebase", "git checkout -q main && echo main >> other && git add other && git -c user.name=agent -c user.email=agent@example.com commit -qm other && " +
			"git checkout -q topic && git -c user.name=agent -c user.email=agent@example.com rebase -q main"},
		{"fetch from a file remote", "git fetch -q origin"},
		{"push to a file remote", "git push -q origin topic"},
		{"clone over https", ca + "clone -q " + url + " /tmp/clone && git -C /tmp/clone rev-parse HEAD"},
		{"fetch over https", ca + "fetch -q upstream && git rev-parse upstream/main"},
		{"push over https", ca + "push -q upstream topic && git rev-parse topic"},
		{"nested git init with an fsmonitor", "git init -q nested && git -C nested config core.fsmonitor " + shellQuote(touch)},
	}
	mark := markFakeLog()
	res, r := probeSession(t, sessionOpts{Dir: dir, Allowlist: defaultAllowlist + gitHost + " passthrough\n"}, append(probes, workflow...)...)
	for _, e := range escapes {
		p := res[e.name]
		if p.RC == 0 || !strings.Contains(p.Out, e.want) {
			t.Errorf("%s: want a failure saying %q: %s", e.name, e.want, p)
		}
	}
	for _, w := range workflow {
		wantOK(t, res, w.Name)
	}
	wantOK(t, res, "clone over https", served)
	wantOK(t, res, "fetch over https", served)
	// The pushed commit arrived: in the served repository, read here, and
	// in the fake's log of the push.
	topic, _ := hostGit(t, dir, "rev-parse", "topic")
	topic = strings.TrimSpace(topic)
	wantOK(t, res, "push over https", topic)
	if got, err := hostGit(t, bare, "rev-parse", "--verify", "topic"); err != nil || strings.TrimSpace(got) != topic {
		t.Errorf("the push over https did not reach %s: topic = %q (%v), want %s", url, strings.TrimSpace(got), err, topic)
	}
	pushLog := `git push repo="/` + filepath.Base(bare) + `"`
	if !strings.Contains(mark.since(), pushLog) || !strings.Contains(mark.since(), "refs/heads/topic="+topic) {
		t.Errorf("the fake did not log the push (%s refs/heads/topic=%s):\n%s", pushLog, topic, indent(mark.since()))
	}
	for _, l := range strings.Split(mark.since(), "\n") {
		if strings.Contains(l, " git ") {
			t.Logf("fake: %s", l)
		}
	}
	if want := "new " + filepath.Join(dir, "nested", ".git") + ": a new repository"; !strings.Contains(r.Stderr(), want) {
		t.Errorf("the nested repository is not listed at exit (%q):\n%s", want, indent(r.Stderr()))
	}
	// What git would run there, read by the launcher itself: no advice
	// to run git in a repository the agent made.
	if want := "core.fsmonitor = " + shellQuote(touch) + ": git runs it at every git status"; !strings.Contains(r.Stderr(), want) {
		t.Errorf("the exit list does not show the nested repository's fsmonitor (%q):\n%s", want, indent(r.Stderr()))
	}
	if strings.Contains(r.Stderr(), "git -C") {
		t.Errorf("the exit list suggests running git in a repository the agent made:\n%s", indent(r.Stderr()))
	}
	// The host then uses the repository as a user does.
	for _, args := range [][]string{{"status"}, {"log", "--oneline", "-3"}, {"commit", "-q", "--allow-empty", "-m", "host"}, {"diff", "HEAD~1"}} {
		if out, err := hostGit(t, dir, args...); err != nil {
			t.Errorf("host git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := hostGit(t, filepath.Join(dir, "remote.git"), "rev-parse", "--verify", "topic"); err != nil {
		t.Errorf("the push from inside did not reach the remote: %v %s", err, out)
	}
	if _, err := os.Stat(canary); err == nil {
		t.Errorf("LEAK: the host ran a command the agent wrote into the repository (%s exists)", canary)
	}

	// Opened path: the same config and hook written on the host do run
	// when the host uses git, so the canary would have caught a leak.
	opened := gitProject(t)
	openedCanary := filepath.Join(mkdir(t, "canary-"), "ran")
	mustGit(t, opened, "config", "core.fsmonitor", "touch "+openedCanary+".fsmonitor")
	hook := filepath.Join(opened, ".git/hooks/post-commit")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+openedCanary+".hook\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustGit(t, opened, "status")
	mustGit(t, opened, "commit", "-q", "--allow-empty", "-m", "x")
	for _, suffix := range []string{".fsmonitor", ".hook"} {
		if _, err := os.Stat(openedCanary + suffix); err != nil {
			t.Errorf("opened path: the host's git did not run the %s canary: the row's canary cannot catch a leak", suffix)
		}
	}
	if !t.Failed() {
		ev.add("%d escapes failed with EROFS/EBUSY; status, commit, branch, checkout, rebase, fetch and push (a file remote) worked inside; "+
			"clone, fetch and push over HTTPS to %s (allowlisted, git http-backend on the fake; -c http.sslCAInfo, no config write) worked, the pushed topic %.12s is in the served repository and the fake's log; "+
			"host status, log, commit and diff ran no canary; nested repo listed at exit; the same fsmonitor and hook written on the host ran (opened path)", len(escapes), gitHost, topic)
	}
}

func rowProxyEnv(t *testing.T, ev *evidence) {
	nonce := newNonce(t)
	proxy := "http://user:" + nonce + "@127.0.0.1:9/"
	env := map[string]string{}
	for _, k := range []string{"https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "ftp_proxy"} {
		env[k] = proxy
	}
	// Every place a process inside could read it: its environment, every
	// process's environ and command line, and the files it can read. The
	// probes put the nonce together at run time, so that their own command
	// lines do not hold it.
	half := len(nonce) / 2
	n := "$(printf %s%s " + nonce[:half] + " " + nonce[half:] + ")"
	look := []probe{
		{"env", "env | grep -F " + n + "; echo matches=$(env | grep -cF " + n + ")"},
		// Read before grep starts: grep's own command line holds the
		// nonce it looks for.
		{"proc", "d=$(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'); printf '%s\\n' \"$d\" | grep -cF " + n + "; true"},
		{"files", "grep -rlsF " + n + " /etc /home/claude /tmp /var/tmp /run /usr/local/etc \"$PWD\"; echo done"},
	}
	res, _ := probeSession(t, sessionOpts{Env: env}, look...)
	if p := res["env"]; !strings.Contains(p.Out, "matches=0") {
		t.Errorf("LEAK: the proxy credential is in the agent's environment: %s", p)
	}
	if p := res["proc"]; strings.TrimSpace(p.Out) != "0" {
		t.Errorf("LEAK: the proxy credential is in a process's environ or cmdline: %s", p)
	}
	if p := res["files"]; strings.TrimSpace(p.Out) != "done" {
		t.Errorf("LEAK: the proxy credential is in a file the agent can read: %s", p)
	}
	// Opened path: named with --env, it does arrive, and each probe sees it.
	args := []string{"--env", "https_proxy", "--exec", "sh", "-c", "echo \"$https_proxy\" > /var/tmp/seen; " + probeScript(look...)}
	r := runSession(t, sessionOpts{Args: args, Env: env})
	wantCode(t, r, 0)
	opened := parseProbes(r.Stdout())
	if p := opened["env"]; !strings.Contains(p.Out, "matches=1") {
		t.Errorf("opened path: --env https_proxy did not show in env: %s", p)
	}
	if p := opened["proc"]; strings.TrimSpace(p.Out) == "0" {
		t.Errorf("opened path: the proc probe did not find a passed variable: %s", p)
	}
	if p := opened["files"]; !strings.Contains(p.Out, "/var/tmp/seen") {
		t.Errorf("opened path: the file probe did not find the nonce written to a file: %s", p)
	}
	if !t.Failed() {
		ev.add("8 *_proxy variables with a credential nonce: absent from env, /proc/*/environ and cmdline, and every readable file under /etc, ~, /tmp, /var/tmp, /run and the launch dir; passed with --env, all three probes found it (opened path)")
	}
}

func rowProjectHomes(t *testing.T, ev *evidence) {
	a, b := launchDir(t), launchDir(t)
	homes := func() map[string]string {
		out, err := podman("volume", "ls", "--filter", "label=agent-sandbox.project", "--format", `{{.Name}} {{index .Labels "agent-sandbox.project"}}`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, l := range lines(out) {
			if name, dir, ok := strings.Cut(l, " "); ok && (dir == a || dir == b) {
				m[dir] = name
			}
		}
		return m
	}
	t.Cleanup(func() {
		for _, v := range homes() {
			if _, err := podman("volume", "rm", "-f", v); err != nil {
				t.Errorf("cannot remove %s: %v", v, err)
			}
		}
	})
	nonce := newNonce(t)
	// No AGENT_SANDBOX_HOME_VOLUME: the default, a home per project.
	own := map[string]string{"AGENT_SANDBOX_HOME_VOLUME": ""}
	res, _ := probeSession(t, sessionOpts{Dir: a, Env: own}, probe{"write", "echo " + nonce + " > ~/.bashrc-" + nonce})
	wantOK(t, res, "write")
	res, _ = probeSession(t, sessionOpts{Dir: b, Env: own}, probe{"read in another project", "cat ~/.bashrc-" + nonce})
	if p := res["read in another project"]; p.RC == 0 || !strings.Contains(p.Out, "No such file") {
		t.Errorf("LEAK: another project's session read the first one's home: %s", p)
	}
	res, _ = probeSession(t, sessionOpts{Dir: a, Env: own}, probe{"read in the same project", "cat ~/.bashrc-" + nonce})
	wantOK(t, res, "read in the same project", nonce)
	h := homes()
	if h[a] == "" || h[b] == "" || h[a] == h[b] {
		t.Fatalf("project homes = %v, want one for each of %s and %s", h, a, b)
	}
	// The second project goes away: gc lists its home, --homes removes it.
	removeAll(b)
	out, err := runBin(t, "gc")
	if err != nil || !strings.Contains(out, h[b]) || !strings.Contains(out, "no longer exists") || strings.Contains(out, h[a]) {
		t.Errorf("gc (%v) does not list exactly the home of the removed project %s:\n%s", err, h[b], indent(out))
	}
	if _, err := podman("volume", "exists", h[b]); err != nil {
		t.Errorf("plain gc removed the home %s", h[b])
	}
	out, err = runBin(t, "gc", "--homes")
	if err != nil || !strings.Contains(out, "removed home "+h[b]) {
		t.Errorf("gc --homes (%v) did not remove %s:\n%s", err, h[b], indent(out))
	}
	if _, err := podman("volume", "exists", h[b]); err == nil {
		t.Errorf("gc --homes left %s", h[b])
	}
	if _, err := podman("volume", "exists", h[a]); err != nil {
		t.Errorf("gc --homes removed the home of a project that exists (%s)", h[a])
	}
	if !t.Failed() {
		ev.add("%s and %s: a file written in one's home absent in the other's (No such file), present again in its own; gc listed the removed project's home, gc --homes removed it and kept the other", h[a], h[b])
	}
}

// rowPlantedPodman: the launch dir is the agent's, and an activated
// virtualenv or direnv puts a dir of it first on PATH. A podman found
// there would run on the host with the user's rights at the next start.
func rowPlantedPodman(t *testing.T, ev *evidence) {
	real, err := exec.LookPath("podman")
	if err != nil {
		t.Fatal(err)
	}
	canary := filepath.Join(mkdir(t, "canary-"), "ran")
	// What an agent would leave: a podman that does its work (so that
	// nothing looks wrong) and leaves a mark.
	planted := "#!/bin/sh\necho \"$*\" >> " + canary + "\nexec " + real + " \"$@\"\n"
	dir := launchDir(t)
	venv := filepath.Join(dir, ".venv", "bin")
	if err := os.MkdirAll(venv, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{venv, dir} {
		if err := os.WriteFile(filepath.Join(d, "podman"), []byte(planted), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := venv + "::.:" + os.Getenv("PATH")
	env := map[string]string{"PATH": path, "AGENT_SANDBOX_PODMAN": ""}
	r := runSession(t, sessionOpts{Dir: dir, Env: env, Cmd: []string{"true"}})
	wantCode(t, r, 0)
	gc := runSession(t, sessionOpts{Dir: dir, Env: env, Args: []string{"gc"}})
	wantCode(t, gc, 0)
	if b, err := os.ReadFile(canary); err == nil {
		t.Errorf("LEAK: the podman planted in the launch dir ran on the host: %q", b)
	}
	// Opened path: the same podman in a dir of the user's own, first on
	// PATH, is the user's choice and runs.
	own := mkdir(t, "userbin-")
	if err := os.WriteFile(filepath.Join(own, "podman"), []byte(planted), 0o755); err != nil {
		t.Fatal(err)
	}
	r = runSession(t, sessionOpts{Env: map[string]string{"PATH": own + ":" + os.Getenv("PATH"), "AGENT_SANDBOX_PODMAN": ""}, Cmd: []string{"true"}})
	wantCode(t, r, 0)
	b, err := os.ReadFile(canary)
	if err != nil || !strings.Contains(string(b), "system service") {
		t.Fatalf("opened path: a podman first on PATH outside the launch dir did not run: %q, %v", b, err)
	}
	if !t.Failed() {
		ev.add("with %s/.venv/bin, an empty entry and . first on PATH, a session and gc ran the real podman and the planted one never; from a user dir first on PATH it ran (%s)", "$launch", strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	}
}
