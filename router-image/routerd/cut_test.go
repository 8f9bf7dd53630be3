package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDropsLine(t *testing.T) {
	conf := "stream {\n    map $ssl_preread_server_name $sni_upstream {\n        hostnames;\n        a.test $ssl_preread_server_name:443;\n    }\n}\n"
	added := strings.Replace(conf, "        a.test", "        b.test $ssl_preread_server_name:443;\n        a.test", 1)
	ports := strings.Replace(conf, "}\n}\n", "}\n    map $server_port $port_upstream {\n        10001 a.test:22;\n    }\n}\n", 1)
	for _, tc := range []struct {
		name     string
		old, new string
		want     bool
	}{
		{"the same", conf, conf, false},
		{"a name added", conf, added, false},
		{"a port entry added", conf, ports, false},
		{"a name removed", added, conf, true},
		{"a port entry removed", ports, conf, true},
		{"one name for another", conf, strings.Replace(conf, "a.test", "c.test", 1), true},
		{"reindented", conf, strings.ReplaceAll(conf, "    ", "\t"), false},
		{"from nothing", "", conf, false},
		{"to nothing", conf, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dropsLine([]byte(tc.old), []byte(tc.new)); got != tc.want {
				t.Errorf("dropsLine = %v, want %v", got, tc.want)
			}
		})
	}
}

// startProc starts path with argv, to be reaped at the end of the test.
func startProc(t *testing.T, path string, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := &exec.Cmd{Path: path, Args: argv}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Start returns once the exec is past its point of no return, which
	// can be before the kernel has set the new command line up.
	want := []byte(argv[0] + "\x00")
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); bytes.HasPrefix(b, want) {
			break
		}
	}
	return cmd
}

func TestProcs(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	// The kernel's name for a process is its file's: make one with a
	// space and parentheses in it.
	odd := filepath.Join(t.TempDir(), "a) (b c")
	if err := os.Symlink(sleep, odd); err != nil {
		t.Fatal(err)
	}
	quitting := startProc(t, odd, "nginx: worker process is shutting down", "1000")
	running := startProc(t, sleep, "nginx: worker process", "1000")

	kids := childrenOf(os.Getpid())
	var mine []proc
	for _, p := range kids {
		if p.pid == quitting.Process.Pid || p.pid == running.Process.Pid {
			mine = append(mine, p)
		}
	}
	if len(mine) != 2 {
		t.Fatalf("childrenOf(self) = %v, want %d and %d among them", kids, quitting.Process.Pid, running.Process.Pid)
	}
	for _, p := range mine {
		if !p.alive() {
			t.Errorf("%d: not alive", p.pid)
		}
		if got, want := nginxShuttingDown(p.pid), p.pid == quitting.Process.Pid; got != want {
			t.Errorf("%d: shutting down = %v, want %v", p.pid, got, want)
		}
	}
	if _, _, ok := procStat(quitting.Process.Pid); !ok {
		t.Errorf("procStat cannot read %q", odd)
	}

	_ = quitting.Process.Kill()
	_ = quitting.Wait()
	for _, p := range mine {
		if p.pid == quitting.Process.Pid && p.alive() {
			t.Errorf("%d: alive after it was reaped", p.pid)
		}
	}
	// A pid taken again by another process is not the same process.
	if (proc{running.Process.Pid, 1}).alive() {
		t.Error("a proc with another start time counts as alive")
	}
}

// lineLog hands each line a logger writes to a channel.
type lineLog chan string

func (l lineLog) Write(p []byte) (int, error) {
	l <- strings.TrimSuffix(string(p), "\n")
	return len(p), nil
}

// next returns the next line, or fails the test after 5 s.
func (l lineLog) next(t *testing.T) string {
	t.Helper()
	select {
	case line := <-l:
		return line
	case <-time.After(5 * time.Second):
		t.Fatal("no log line within 5s")
		return ""
	}
}

func TestSuperviseCutsOldWorkersOnlyWhenAsked(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "worker")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A fake nginx: the master ignores SIGHUP, as nginx reloads on it,
	// and has one worker, which holds the fifo open while it lives.
	nginx := child{"nginx", []string{"sh", "-c", `trap "" HUP; (exec 3>"$0"; exec sleep 1000) & exec sleep 1000`, fifo}}
	lines := make(lineLog, 16)
	reloads := make(chan reload)
	listed := make(chan int, 4)
	s := &supervisor{
		children: []child{nginx},
		grace:    300 * time.Millisecond,
		stdout:   io.Discard,
		stderr:   io.Discard,
		log:      log.New(lines, "routerd: ", 0),
		reloads:  reloads,
		cut: cutter{
			grace:    10 * time.Millisecond,
			patience: time.Second,
			workers: func(master int) []proc {
				listed <- master
				return childrenOf(master)
			},
			quitting: func(int) bool { return true },
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- s.run(ctx, nil) }()
	defer func() {
		cancel()
		<-done
	}()

	// Opening the fifo returns once the worker has opened it; reading it
	// ends when the worker is gone.
	f, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, f)
		close(gone)
	}()

	// A reload that only adds: the workers are not even looked up.
	reloads <- reload{child: "nginx", file: "nginx.conf", signal: syscall.SIGHUP}
	for _, want := range []string{
		"routerd: reloaded nginx.conf",
		"routerd: nginx.conf only added entries: the old nginx workers keep their connections",
	} {
		if got := lines.next(t); got != want {
			t.Fatalf("log %q, want %q", got, want)
		}
	}
	if len(listed) != 0 {
		t.Fatal("a reload without a cut looked up the workers")
	}

	reloads <- reload{child: "nginx", file: "nginx.conf", signal: syscall.SIGHUP, cut: true}
	for _, want := range []string{
		"routerd: reloaded nginx.conf",
		"routerd: nginx.conf dropped entries: ended 1 old nginx worker and the connections they held",
	} {
		if got := lines.next(t); got != want {
			t.Fatalf("log %q, want %q", got, want)
		}
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the old worker still runs")
	}
	select {
	case code := <-done:
		t.Fatalf("run ended (%d) with the cut: the master must stay", code)
	default:
	}
}

func TestCutWaitsForNginxToTellWorkersToQuit(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	w := startProc(t, sleep, "nginx: worker process", "1000")
	_, start, _ := procStat(w.Process.Pid)
	told := make(chan struct{})
	asked := 0
	c := cutter{
		patience: 5 * time.Second,
		quitting: func(int) bool {
			// nginx gets to it on the third look.
			if asked++; asked == 3 {
				close(told)
			}
			return asked >= 3
		},
	}
	if n := c.cut(context.Background(), []proc{{w.Process.Pid, start}}); n != 1 {
		t.Fatalf("cut ended %d, want 1", n)
	}
	select {
	case <-told:
	default:
		t.Fatal("cut ended the worker before nginx had told it to quit")
	}
	if err := w.Wait(); err == nil {
		t.Error("the worker exited 0, want killed by SIGTERM")
	}
}
