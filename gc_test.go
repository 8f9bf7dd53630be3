package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/podman"
)

func TestOwnerAlive(t *testing.T) {
	me := ownerID(os.Getpid())
	if !ownerAlive(me) {
		t.Fatalf("own owner id %q judged dead", me)
	}
	pid, _, _ := cutOwner(me)
	if ownerAlive(pid + "@1") {
		t.Fatal("a reused pid (other start time) judged alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if ownerAlive(ownerID(cmd.Process.Pid)) {
		t.Fatal("an exited process judged alive")
	}
	for _, odd := range []string{"", "garbage", "12", "-1@5"} {
		if !ownerAlive(odd) {
			t.Errorf("unreadable owner %q judged dead; it must be left alone", odd)
		}
	}
}

func cutOwner(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '@' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func TestStaleSessionsTouchOnlyDeadOwners(t *testing.T) {
	dead := map[string]bool{"1@1": true}
	alive := func(owner string) bool { return !dead[owner] }
	lbl := func(session, owner string) map[string]string {
		return map[string]string{labelSession: session, labelOwner: owner}
	}
	objs := []podman.Object{
		{Kind: "network", Name: "s1", Labels: lbl("s1", "1@1"), Running: false},
		{Kind: "container", Name: "s1-router", Labels: lbl("s1", "1@1"), Running: false},
		{Kind: "pod", Name: "s1", Labels: lbl("s1", "1@1"), Running: false},
		{Kind: "pod", Name: "s2", Labels: lbl("s2", "2@2"), Running: false},
		{Kind: "container", Name: "other", Labels: map[string]string{labelSession: "s3"}, Running: false},
		{Kind: "container", Name: "unlabelled", Labels: nil, Running: false},
	}
	stale := staleSessions(objs, alive)
	if len(stale) != 1 {
		t.Fatalf("stale = %v, want only s1", stale)
	}
	var order []string
	for _, o := range stale["s1"] {
		order = append(order, o.Kind)
	}
	if !slices.Equal(order, []string{"pod", "container", "network"}) {
		t.Fatalf("removal order = %v", order)
	}
}

func TestCollectGarbage(t *testing.T) {
	runtimeDir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := strconv.Itoa(cmd.Process.Pid)
	deadOwner := deadPid + "@1"
	// This test process stands for a live launcher of any name (a
	// `claude` symlink, say); a dir with its pid named before it started
	// was a dead launcher's whose pid it reuses.
	live := fmt.Sprintf("agent-sandbox-%d-%d", time.Now().Unix(), os.Getpid())
	reused := "agent-sandbox-1-" + strconv.Itoa(os.Getpid())
	for _, d := range []string{
		"agent-sandbox-1-" + deadPid + ".abc",
		"agent-sandbox-1-" + deadPid + "-api.def",
		"agent-sandbox-1-" + deadPid + "-cred.ghi",
		live + ".x", live + "-api.y", live + "-cred.w",
		reused + ".z",
		"unrelated-dir",
	} {
		must(t, os.Mkdir(filepath.Join(runtimeDir, d), 0o700))
	}
	eng := newFakeEngine()
	eng.labelled = []podman.Object{
		{Kind: "container", Name: "dead-router", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}, Running: false},
		{Kind: "pod", Name: "dead", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}, Running: false},
		{Kind: "network", Name: "dead", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}, Running: false},
		{Kind: "pod", Name: "live", Labels: map[string]string{labelSession: "live", labelOwner: ownerID(os.Getpid())}, Running: false},
	}
	removed, err := collectGarbage(context.Background(), eng, runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := []string{"ListLabelled " + labelSession, "PodRemove dead", "ContainerRemove dead-router", "NetworkRemove dead"}
	if !slices.Equal(eng.calls, wantCalls) {
		t.Fatalf("calls = %v, want %v", eng.calls, wantCalls)
	}
	for _, want := range []string{"dir agent-sandbox-1-" + deadPid + ".abc", "dir agent-sandbox-1-" + deadPid + "-api.def", "dir agent-sandbox-1-" + deadPid + "-cred.ghi", "dir " + reused + ".z"} {
		if !slices.Contains(removed, want) {
			t.Errorf("removed = %v, lacks %q", removed, want)
		}
	}
	for _, d := range []string{live + ".x", live + "-api.y", live + "-cred.w"} {
		if _, err := os.Stat(filepath.Join(runtimeDir, d)); err != nil {
			t.Errorf("the live launcher's dir %s was removed", d)
		}
	}
	if _, err := os.Stat(filepath.Join(runtimeDir, "unrelated-dir")); err != nil {
		t.Error("an unrelated dir was removed")
	}
}

// TestCollectGarbageReportsWhatItCouldNotRemove: gc goes on past a removal
// that fails, names it, and its command exits as podman failures do.
func TestCollectGarbageReportsWhatItCouldNotRemove(t *testing.T) {
	cmd := exec.Command("true")
	must(t, cmd.Run())
	deadOwner := strconv.Itoa(cmd.Process.Pid) + "@1"
	eng := newFakeEngine()
	eng.failOn = "PodRemove dead"
	eng.labelled = []podman.Object{
		{Kind: "pod", Name: "dead", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}, Running: false},
		{Kind: "network", Name: "dead", Labels: map[string]string{labelSession: "dead", labelOwner: deadOwner}, Running: false},
	}
	removed, err := collectGarbage(context.Background(), eng, t.TempDir())
	if !slices.Equal(removed, []string{"network dead"}) {
		t.Errorf("removed = %v, want the network, past the pod that failed", removed)
	}
	if err == nil || !strings.Contains(err.Error(), "could not remove pod dead") {
		t.Fatalf("err = %v, want it to name the pod", err)
	}
	if code := exitCode(err); code != exitPodman {
		t.Errorf("exit code = %d, want %d", code, exitPodman)
	}
}
