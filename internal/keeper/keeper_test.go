package keeper

import (
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is its own keeper: Foreground runs /proc/self/exe, which
// here is the test binary, and helperEnv says what that keeper does.
const helperEnv = "KEEPER_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(helperEnv); ok {
		if dir, ok := strings.CutPrefix(mode, "fg "); ok {
			// A foreground of its own, for a test to kill.
			os.Setenv(helperEnv, "waitterm "+dir)
			os.Exit(Foreground(nil, os.Stdin, os.Stdout, os.Stderr, 130))
		}
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper is the keeper's side: mode is "handback DIR", "exit" or "signal".
func helper(mode string) int {
	link := Inherited()
	if link == nil {
		return 99
	}
	if _, ok := os.LookupEnv(envFD); ok {
		return 98 // left in the environment of what the keeper starts
	}
	what, dir, _ := strings.Cut(mode, " ")
	terms := make(chan os.Signal, 1)
	if what != "signal" {
		signal.Notify(terms, syscall.SIGTERM)
	}
	switch what {
	case "handback":
		if err := link.HandBack(7, filepath.Join(dir, "log")); err != nil {
			return 97
		}
		// The teardown: still going when the foreground has returned,
		// which must not send it a SIGTERM.
		os.Stderr.WriteString("said after the hand-back\n")
		select {
		case <-terms:
			_ = os.WriteFile(filepath.Join(dir, "sigterm"), nil, 0o644)
		case <-time.After(500 * time.Millisecond):
		}
		_ = os.WriteFile(filepath.Join(dir, "torn-down"), nil, 0o644)
		return 0
	case "waitterm":
		_ = os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		select {
		case <-terms:
			_ = os.WriteFile(filepath.Join(dir, "sigterm"), nil, 0o644)
		case <-time.After(10 * time.Second):
		}
		return 0
	case "signal":
		// Killed by a signal before taking any, as a keeper is at its start.
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(5 * time.Second)
	}
	return 3
}

func foreground(t *testing.T, mode string) (int, time.Duration) {
	t.Helper()
	t.Setenv(helperEnv, mode)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	start := time.Now()
	code := Foreground(nil, null, null, null, 130)
	return code, time.Since(start)
}

func TestForegroundReturnsTheHandedBackCodeBeforeTheTeardownEnds(t *testing.T) {
	dir := t.TempDir()
	code, took := foreground(t, "handback "+dir)
	if code != 7 {
		t.Fatalf("code = %d, want 7", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "torn-down")); err == nil {
		t.Errorf("the foreground returned after the teardown (%s)", took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "torn-down")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the keeper did not go on with its teardown after the foreground returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	if !strings.Contains(string(log), "said after the hand-back") {
		t.Errorf("what the keeper said after the hand-back is not in its log: %q", log)
	}
	if _, err := os.Stat(filepath.Join(dir, "sigterm")); err == nil {
		t.Error("the foreground's return after the hand-back sent the keeper SIGTERM")
	}
}

// waitFor waits up to 10 s for path to exist.
func waitFor(t *testing.T, path, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAKilledForegroundTerminatesTheKeeperBeforeTheHandBack(t *testing.T) {
	dir := t.TempDir()
	fg := exec.Command("/proc/self/exe")
	fg.Env = append(os.Environ(), helperEnv+"=fg "+dir)
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, filepath.Join(dir, "ready"), "the keeper did not start")
	_ = fg.Process.Kill()
	_ = fg.Wait()
	waitFor(t, filepath.Join(dir, "sigterm"), "the keeper was not sent SIGTERM when its foreground was killed")
}

func TestWatchForeground(t *testing.T) {
	for _, returned := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		l := &Link{}
		l.returned.Store(returned)
		terminated := false
		w.Close()
		l.watchForeground(r, func() { terminated = true })
		if terminated == returned {
			t.Errorf("returned %v: terminated %v", returned, terminated)
		}
	}
}

func TestForegroundWithoutHandBack(t *testing.T) {
	for mode, want := range map[string]int{"exit": 3, "signal": 130} {
		if code, _ := foreground(t, mode); code != want {
			t.Errorf("%s: code = %d, want %d", mode, code, want)
		}
	}
}

func TestReadCode(t *testing.T) {
	for in, want := range map[string]int{"0\n": 0, "7\n": 7, "255\n": 255, "7": -1, "": -1, "256\n": -1, "-1\n": -1, "x\n": -1} {
		r, w, _ := os.Pipe()
		w.WriteString(in)
		w.Close()
		code, ok := readCode(r)
		if !ok {
			code = -1
		}
		if code != want {
			t.Errorf("readCode(%q) = %d, want %d", in, code, want)
		}
	}
}

func TestInheritedTakesOnlyAPipe(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Setenv(envFD, strconv.Itoa(int(f.Fd())))
	if l := Inherited(); l != nil {
		t.Errorf("a regular file (fd %d) was taken for the foreground's pipe", f.Fd())
	}
	if _, ok := os.LookupEnv(envFD); ok {
		t.Errorf("%s left in the environment", envFD)
	}
}

func TestOpenLogRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f := openLog(link); f != nil {
		f.Close()
		t.Errorf("the log was opened through a link")
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxLog+1), 0o600); err != nil {
		t.Fatal(err)
	}
	f := openLog(big)
	if f == nil {
		t.Fatal("a regular log was not opened")
	}
	f.Close()
	if fi, _ := os.Stat(big); fi.Size() != 0 {
		t.Errorf("a log past %d bytes was kept (%d bytes)", maxLog, fi.Size())
	}
}
