package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
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
	applied  chan []entry
	warnings []string
	fail     error // apply's answer while set
}

// newWatch makes the watcher without running it.
func newWatch(t *testing.T, initial string, current []entry) *watchRecorder {
	t.Helper()
	r := &watchRecorder{path: filepath.Join(t.TempDir(), "allowed-hosts"), applied: make(chan []entry, 16)}
	if err := os.WriteFile(r.path, []byte(initial), 0o644); err != nil {
		t.Fatal(err)
	}
	r.w = &allowlistWatcher{
		path: r.path, interval: watchInterval, settle: watchSettle, current: current,
		apply: func(e []entry) error {
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
func startWatch(t *testing.T, initial string, current []entry) *watchRecorder {
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
func (r *watchRecorder) poll() { r.w.poll() }

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

func (r *watchRecorder) wantApplied(t *testing.T, within time.Duration, want []entry) {
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
func (r *watchRecorder) wantAppliedNow(t *testing.T, want []entry) {
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
		watchAllowlist(ctx, path, nil, func([]entry) error { return nil }, func(string, ...any) {})
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("watchAllowlist did not return after cancel")
	}
}

func TestReplanFromNothingIsPlanRouter(t *testing.T) {
	for _, list := range []string{"", "api.example.com\n*.cdn.example.com\ngit.example.net\ngit.example.net:22\ndb.example.org:5432\nssh.example.org:22\n"} {
		entries := mustParse(t, list)
		want, err := planRouter(entries)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := replan(routerPlan{}, firstCursor, entries)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("replan from nothing = %+v, want planRouter's %+v", got, want)
		}
	}
}

func TestReplanKeepsAddressesAndPorts(t *testing.T) {
	p1, c1, err := replan(routerPlan{}, firstCursor, mustParse(t, "m.test:22\nm.test:2222\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	// a.test sorts first: from scratch it would take m.test's address.
	p2, c2, err := replan(p1, c1, mustParse(t, "a.test:22\nm.test:22\nm.test:2222\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"m.test", "z.test"} {
		if p2.loopback[host] != p1.loopback[host] {
			t.Errorf("%s moved from %s to %s", host, p1.loopback[host], p2.loopback[host])
		}
	}
	for e, port := range p1.routerPort {
		if p2.routerPort[e] != port {
			t.Errorf("%v moved from router port %d to %d", e, port, p2.routerPort[e])
		}
	}
	if a := p2.loopback["a.test"]; a.String() != "127.0.0.4" {
		t.Errorf("a.test got %s, want the next unused address 127.0.0.4", a)
	}
	if port := p2.routerPort[entry{Host: "a.test", Port: 22}]; port != firstPortEntryPort+3 {
		t.Errorf("a.test:22 got router port %d, want %d", port, firstPortEntryPort+3)
	}

	// A removed host's address and ports are not handed to the next one.
	p3, c3, err := replan(p2, c2, mustParse(t, "a.test:22\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	p4, _, err := replan(p3, c3, mustParse(t, "a.test:22\nb.test:22\nz.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p4.loopback["b.test"]; a == p1.loopback["m.test"] || a.String() != "127.0.0.5" {
		t.Errorf("b.test got %s; want 127.0.0.5, not m.test's old %s", a, p1.loopback["m.test"])
	}
	if port := p4.routerPort[entry{Host: "b.test", Port: 22}]; port != firstPortEntryPort+4 {
		t.Errorf("b.test:22 got router port %d, want %d", port, firstPortEntryPort+4)
	}

	// The rendered forwards keep the pairs of hosts that stay.
	before, after := p1.forwards("10.89.3.2"), p4.forwards("10.89.3.2")
	for _, pair := range strings.Fields(before) {
		if strings.HasPrefix(pair, p1.loopback["z.test"].String()+":") && !strings.Contains(after, pair) {
			t.Errorf("z.test's pair %s is gone from %q", pair, after)
		}
	}
}

func TestReplanReusesOnlyWhenExhausted(t *testing.T) {
	p1, _, err := replan(routerPlan{}, firstCursor, mustParse(t, "a.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	// A cursor at the end of both spaces: only free slots are left.
	p2, _, err := replan(p1, planCursor{addr: lastAddrIndex + 1, port: lastPort + 1}, mustParse(t, "a.test:22\nb.test:22\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p2.loopback["b.test"]; a.String() != "127.0.0.3" {
		t.Errorf("b.test got %s, want the lowest free 127.0.0.3", a)
	}
	if port := p2.routerPort[entry{Host: "b.test", Port: 22}]; port != firstPortEntryPort+1 {
		t.Errorf("b.test:22 got %d, want the lowest free %d", port, firstPortEntryPort+1)
	}
}

func TestRouterFilesApply(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rf := newRouterFiles(dir, "10.89.3.2")
	entries := mustParse(t, "api.example.com\nssh.example.org:22\n")
	if err := rf.apply(entries); err != nil {
		t.Fatal(err)
	}
	dnsmasq, nginx, forwards, err := routerConfig(entries, "10.89.3.2")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"dnsmasq.conf": dnsmasq, "nginx.conf": nginx, "forwards": forwards + "\n"}
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
			t.Errorf("%s at start differs from routerConfig's:\n%s", name, got)
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
	if len(all) != 3 {
		var names []string
		for _, e := range all {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want only the three files", names)
	}
}

func TestRouterFilesApplyFailureKeepsThePlan(t *testing.T) {
	rf := newRouterFiles(filepath.Join(t.TempDir(), "missing"), "10.89.3.2")
	if err := rf.apply(mustParse(t, "a.test:22\n")); err == nil || !strings.Contains(err.Error(), "cannot write the router config") {
		t.Fatalf("apply into a missing dir: %v", err)
	}
	if rf.entries() != nil || rf.cursor != firstCursor {
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

// nginxLines is the set of nginx.conf's lines as routerd compares them.
func nginxLines(conf string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(conf, "\n") {
		m[strings.TrimSpace(l)] = true
	}
	return m
}

// routerd ends nginx's old workers, and every connection they hold, when a
// new nginx.conf drops a line of the running one (router-image/routerd,
// dropsLine): an edit that only adds hosts must only add lines, or every
// addition would cut the agent's open connections.
func TestNginxConfOnlyGainsLinesWhenHostsAreAdded(t *testing.T) {
	steps := []string{
		"",
		"api.example.com\n",
		"api.example.com\n*.cdn.example.com\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\naaa.example.org\naaa.example.org:2222\n",
		"api.example.com\n*.cdn.example.com\nssh.example.org:22\naaa.example.org\naaa.example.org:2222\nssh.example.org:2222\ndb.example.org:5432\n",
	}
	var p routerPlan
	cursor := firstCursor
	prev := p.nginxConf("10.89.3.2")
	for _, list := range steps {
		next, c, err := replan(p, cursor, mustParse(t, list))
		if err != nil {
			t.Fatal(err)
		}
		conf := next.nginxConf("10.89.3.2")
		have := nginxLines(conf)
		for l := range nginxLines(prev) {
			if !have[l] {
				t.Errorf("adding hosts to get\n%s\ndropped the line %q of nginx.conf", list, l)
			}
		}
		p, cursor, prev = next, c, conf
	}

	// Removing any one entry drops a line, so that its connections end.
	full := mustParse(t, steps[len(steps)-1])
	for i := range full {
		rest := append(slices.Clone(full[:i]), full[i+1:]...)
		next, _, err := replan(p, cursor, rest)
		if err != nil {
			t.Fatal(err)
		}
		have := nginxLines(next.nginxConf("10.89.3.2"))
		dropped := false
		for l := range nginxLines(prev) {
			dropped = dropped || !have[l]
		}
		if !dropped {
			t.Errorf("removing %v keeps every line of nginx.conf", full[i])
		}
	}
}
