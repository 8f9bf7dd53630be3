package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
	"github.com/agent-sandbox/agent-sandbox/internal/routerconf"
)

// watchRecorder has an allowlistWatcher follow a temp file and records
// what it applies and warns. A test either runs the watcher as a session
// does (startWatch) or has it look at the file when the test says (poll),
// which needs no waiting: not both.
type watchRecorder struct {
	path string
	w    *allowlistWatcher
	mu   sync.Mutex
	// applied gets every list passed to apply.
	applied  chan []allowlist.Entry
	warnings []string
	fail     error // apply's answer while set
}

// newWatch makes the watcher without running it.
func newWatch(t *testing.T, initial string, current []allowlist.Entry) *watchRecorder {
	t.Helper()
	r := &watchRecorder{path: filepath.Join(t.TempDir(), "allowed-hosts"), applied: make(chan []allowlist.Entry, 16)}
	if err := os.WriteFile(r.path, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	r.w = &allowlistWatcher{
		path: r.path, interval: watchInterval, settle: watchSettle, current: current,
		apply: func(e []allowlist.Entry) error {
			r.mu.Lock()
			err := r.fail
			r.mu.Unlock()
			if err != nil {
				return err
			}
			r.applied <- e
			return nil
		},
		warn: func(format string, a ...any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.warnings = append(r.warnings, fmt.Sprintf(format, a...))
		},
	}
	return r
}

// startWatch runs the watcher as a session does, until the test ends.
func startWatch(t *testing.T, initial string, current []allowlist.Entry) *watchRecorder {
	t.Helper()
	r := newWatch(t, initial, current)
	r.run(t)
	return r
}

func (r *watchRecorder) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.w.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// poll has a watcher that is not running look at the file once.
func (r *watchRecorder) poll() { r.w.poll(context.Background()) }

// replace writes content the way `agent-sandbox allow` does: a temp file
// renamed over the list.
func (r *watchRecorder) replace(t *testing.T, content string) {
	t.Helper()
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		t.Fatal(err)
	}
}

func (r *watchRecorder) wantApplied(t *testing.T, within time.Duration, want []allowlist.Entry) {
	t.Helper()
	select {
	case got := <-r.applied:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
	case <-time.After(within):
		t.Fatalf("nothing applied within %v; warnings: %q", within, r.warned())
	}
}

// wantAppliedNow checks, after polls, that they applied want.
func (r *watchRecorder) wantAppliedNow(t *testing.T, want []allowlist.Entry) {
	t.Helper()
	select {
	case got := <-r.applied:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
	default:
		t.Fatalf("nothing applied, want %v; warnings: %q", want, r.warned())
	}
}

// wantNothingApplied checks, after polls, that they applied nothing.
func (r *watchRecorder) wantNothingApplied(t *testing.T) {
	t.Helper()
	select {
	case got := <-r.applied:
		t.Fatalf("applied %v, want nothing", got)
	default:
	}
}

func (r *watchRecorder) warned() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.warnings...)
}

func (r *watchRecorder) hasWarning(parts []string) bool {
	for _, w := range r.warned() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(w, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// wantWarning checks, after polls, that they warned with all of parts.
func (r *watchRecorder) wantWarning(t *testing.T, parts ...string) {
	t.Helper()
	if !r.hasWarning(parts) {
		t.Fatalf("no warning with %q; warnings: %q", parts, r.warned())
	}
}

func (r *watchRecorder) waitWarning(t *testing.T, within time.Duration, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(within); !r.hasWarning(parts); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning with %q within %v; warnings: %q", parts, within, r.warned())
		}
	}
}

// waitForNewMTime returns once a file written now gets a later mtime than
// path has: the file system's clock (coarse, often a few milliseconds) has
// ticked, so an edit of path in place changes its mtime.
func waitForNewMTime(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(filepath.Dir(path), "clock")
	defer os.Remove(probe)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		pi, err := os.Stat(probe)
		if err != nil {
			t.Fatal(err)
		}
		if pi.ModTime().After(fi.ModTime()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file system's clock stays at %v", fi.ModTime())
		}
	}
}

func TestWatchSeesRenameWithinASecond(t *testing.T) {
	old := mustParse(t, "a.test\n")
	r := newWatch(t, "a.test\n", old)
	// The first look finds the list the session runs with.
	r.poll()
	r.wantNothingApplied(t)

	r.run(t)
	start := time.Now()
	r.replace(t, "a.test\nb.test\nb.test:22\n")
	r.wantApplied(t, time.Second, mustParse(t, "a.test\nb.test\nb.test:22\n"))
	t.Logf("applied %v after the rename", time.Since(start))
	if w := r.warned(); len(w) > 0 {
		t.Errorf("warnings for a good edit: %q", w)
	}
}

func TestWatchSeesEditInPlace(t *testing.T) {
	r := newWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.poll()
	waitForNewMTime(t, r.path)
	// Same length, same inode: only content and mtime differ.
	if err := os.WriteFile(r.path, []byte("b.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.poll()
	r.wantAppliedNow(t, mustParse(t, "b.test\n"))
}

func TestWatchBadEditKeepsTheList(t *testing.T) {
	r := newWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.poll()
	r.replace(t, "a.test\n# a comment\n*.bad*.test\n")
	r.poll()
	r.wantWarning(t, "does not parse", "keeps its previous list", r.path, "line 3", "fix or remove the line")
	// A later look at the same file neither applies it nor warns again.
	r.poll()
	r.wantNothingApplied(t)
	if n := len(r.warned()); n != 1 {
		t.Errorf("warned %d times about one bad edit, want once: %q", n, r.warned())
	}
	// Fixing it applies the fixed list.
	r.replace(t, "a.test\nc.test\n")
	r.poll()
	r.wantAppliedNow(t, mustParse(t, "a.test\nc.test\n"))
}

func TestWatchIgnoresTouchAndCommentEdits(t *testing.T) {
	r := newWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.poll()
	now := time.Now().Add(time.Second)
	if err := os.Chtimes(r.path, now, now); err != nil {
		t.Fatal(err)
	}
	r.poll()
	r.replace(t, "# only a comment more\na.test\n\n")
	r.poll()
	r.wantNothingApplied(t)
	if w := r.warned(); len(w) > 0 {
		t.Errorf("warnings: %q", w)
	}
}

func TestWatchCatchesEditBeforeItStarted(t *testing.T) {
	// The launcher parsed "a.test"; the file said more by the time the
	// watcher started.
	r := startWatch(t, "a.test\nb.test\n", mustParse(t, "a.test\n"))
	r.wantApplied(t, time.Second, mustParse(t, "a.test\nb.test\n"))
}

// TestWatchSeededWithTheStartsReadDoesNotParseAgain: the launcher read
// the file at the start; while it says the same, the watcher's first look
// does not parse a long list again as the agent starts. To show it,
// current says other than the file: a parse would apply the file.
func TestWatchSeededWithTheStartsReadDoesNotParseAgain(t *testing.T) {
	r := newWatch(t, "a.test\nb.test\n", mustParse(t, "a.test\n"))
	_, read, err := readAllowlist(r.path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r.w.sum = read.sum
	r.poll()
	r.wantNothingApplied(t)
	// Unseeded, the same look parses the file and applies it.
	r.w.stamp, r.w.sum = filestamp.Stamp{}, [32]byte{}
	r.poll()
	r.wantAppliedNow(t, mustParse(t, "a.test\nb.test\n"))
}

// TestWatchSeededCatchesAnEditAfterTheStartsRead: an edit between the
// launcher's read and the watcher's first look is applied: one that
// replaces the file, and one in place of the same size whose mtime is
// the read's (a coarse clock), which leaves the file's stamp as it was.
func TestWatchSeededCatchesAnEditAfterTheStartsRead(t *testing.T) {
	for name, edit := range map[string]func(r *watchRecorder){
		"replaced": func(r *watchRecorder) { r.replace(t, "a.test\nb.test\n") },
		"in place, same size and mtime": func(r *watchRecorder) {
			fi, err := os.Stat(r.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(r.path, []byte("b.test\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(r.path, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newWatch(t, "a.test\n", nil)
			entries, read, err := readAllowlist(r.path, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			r.w.current, r.w.sum = entries, read.sum
			edit(r)
			after, err := allowlist.ReadFile(r.path)
			if err != nil {
				t.Fatal(err)
			}
			r.poll()
			r.wantAppliedNow(t, after)
		})
	}
}

func TestWatchMissingFileKeepsTheList(t *testing.T) {
	r := newWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.poll()
	if err := os.Remove(r.path); err != nil {
		t.Fatal(err)
	}
	r.poll()
	r.wantWarning(t, "cannot read the allowlist", r.path, "keeps its previous list")
	r.poll()
	r.wantNothingApplied(t)
	if n := len(r.warned()); n != 1 {
		t.Errorf("warned %d times about one missing file, want once: %q", n, r.warned())
	}
	r.replace(t, "a.test\nd.test\n")
	r.poll()
	r.wantAppliedNow(t, mustParse(t, "a.test\nd.test\n"))
}

func TestWatchApplyFailureWarnsAndRetriesOnNextEdit(t *testing.T) {
	r := startWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.mu.Lock()
	r.fail = errors.New("disk full")
	r.mu.Unlock()
	r.replace(t, "a.test\nb.test\n")
	r.waitWarning(t, time.Second, "cannot apply", "disk full", "keeps its previous list")
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	r.replace(t, "a.test\nb.test\nc.test\n")
	r.wantApplied(t, time.Second, mustParse(t, "a.test\nb.test\nc.test\n"))
}

func TestWatchStopsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allowed-hosts")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchAllowlist(ctx, path, nil, allowlistRead{}, func([]allowlist.Entry) error { return nil }, func(string, ...any) {})
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("watchAllowlist did not return after cancel")
	}
}

// TestWatchStopsWithinItsFirstLook: the first look waits a moment for a
// file it has no stamp of; a session that ends meanwhile (a short one)
// does not wait for the moment to pass.
func TestWatchStopsWithinItsFirstLook(t *testing.T) {
	r := newWatch(t, "a.test\n", mustParse(t, "a.test\n"))
	r.w.settle = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.w.run(ctx)
		close(done)
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the watcher did not return within a second of the session's end")
	}
	r.wantNothingApplied(t)
}

func TestRouterFilesApply(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rf, err := newRouterFiles(dir, "10.89.3.2", credPlan{})
	if err != nil {
		t.Fatal(err)
	}
	entries := mustParse(t, "api.example.com\nssh.example.org:22\n")
	if err := rf.apply(entries); err != nil {
		t.Fatal(err)
	}
	plan, _, err := routerconf.Replan(routerconf.Plan{}, routerconf.FirstCursor, entries)
	if err != nil {
		t.Fatal(err)
	}
	plan.TrustedCA = systemCABundle
	want := map[string]string{}
	for _, f := range plan.Render("10.89.3.2") {
		want[f.Name] = f.Body
	}
	inodes := map[string]uint64{}
	for name, body := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644", name, fi.Mode().Perm())
		}
		inodes[name] = filestamp.Of(fi).Ino
		if got, _ := os.ReadFile(filepath.Join(dir, name)); string(got) != body {
			t.Errorf("%s at start differs from the plan's:\n%s", name, got)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("dir has mode %v, want 0755", fi.Mode().Perm())
	}
	if !reflect.DeepEqual(rf.entries(), entries) {
		t.Errorf("entries() = %v", rf.entries())
	}

	next := mustParse(t, "api.example.com\na.example.org:22\nssh.example.org:22\n")
	if err := rf.apply(next); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// A new inode: readers never see a file half rewritten.
		if filestamp.Of(fi).Ino == inodes[name] {
			t.Errorf("%s was rewritten in place, not replaced", name)
		}
	}
	fw, _ := os.ReadFile(filepath.Join(dir, "forwards"))
	for _, pair := range []string{"127.0.0.2:22=10.89.3.2:10001", "127.0.0.3:22=10.89.3.2:10002"} {
		if !strings.Contains(string(fw), pair) {
			t.Errorf("forwards %q lacks %s (ssh.example.org must keep its address and port)", fw, pair)
		}
	}
	dm, _ := os.ReadFile(filepath.Join(dir, "dnsmasq.conf"))
	for _, rec := range []string{"host-record=ssh.example.org,127.0.0.2", "host-record=a.example.org,127.0.0.3"} {
		if !strings.Contains(string(dm), rec+"\n") {
			t.Errorf("dnsmasq.conf lacks %s:\n%s", rec, dm)
		}
	}
	all, _ := os.ReadDir(dir)
	var names []string
	for _, e := range all {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"api-policy.json", "ca", "dnsmasq.conf", "forwards", "inspect.json", "nginx.conf", "tls"}) {
		t.Errorf("dir holds %v, want only the five files, the CA dir and the TLS socket dir", names)
	}
	if fi, err := os.Stat(tlsDirOf(dir)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("the TLS socket dir: %v %v, want a dir of mode 0755 (the forwarder is another uid)", fi, err)
	}
}

func TestRouterFilesApplyFailureKeepsThePlan(t *testing.T) {
	dir := t.TempDir()
	rf, err := newRouterFiles(dir, "10.89.3.2", credPlan{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := rf.apply(mustParse(t, "a.test:22\n")); err == nil || !strings.Contains(err.Error(), "cannot write the router config") {
		t.Fatalf("apply into a removed dir: %v", err)
	}
	if rf.entries() != nil || rf.cursor != routerconf.FirstCursor {
		t.Errorf("a failed apply changed the state: %v %v", rf.entries(), rf.cursor)
	}
}

func TestWarnMidSessionPrefixesEveryLine(t *testing.T) {
	var out bytes.Buffer
	midSessionWarner(&out)("first %s\nsecond", "line")
	if want := "agent-sandbox: first line\nagent-sandbox: second\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
