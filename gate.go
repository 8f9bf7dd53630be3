package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/gate"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/common/pkg/config"
	"golang.org/x/sys/unix"
)

// The launcher's side of the agent's gate (internal/gate): the agent's
// container is started beside the router and the forwarder, with the
// forwarder's binary as its init, which waits on a FIFO the launcher holds
// and only then becomes the real init (the host's catatonit) running the
// agent's command. The container's start (runc, conmon, the mounts: about
// 55-90 ms here) is then off the path to the agent's first instruction
// (bench/HISTORY.md).

// agentGate is one session's gate: the FIFO the launcher holds open for
// writing, and the host files mounted into the agent's container.
type agentGate struct {
	dir     string // holds the FIFO; mounted read-only
	binary  string // the gate: podman mounts it as the container's init
	init    string // the host's catatonit
	fifo    *os.File
	closing sync.Once
}

// gateDirName is the dir in the user's runtime dir that holds the
// launchers' copies of the forwarder binary, which the user's sessions
// share: one for each launcher binary (gateBinaryName).
const gateDirName = "agent-sandbox-gate"

// gateUnusedFor is how long a copy no session took may stay: a launcher
// rebuilt or upgraded leaves its old copy behind. A container started
// from a copy keeps it (its mount holds the file); what must not go is a
// copy a session is about to mount, which it took moments before.
const gateUnusedFor = time.Hour

// errNoGate means this launcher was built without the forwarder's binary
// (a plain `go build`): its sessions start the agent after the helpers.
var errNoGate = errors.New("no forwarder binary in this build")

// makeGate makes the session's FIFO in tmp and holds it open; the gate's
// binary is copied from the launcher into runtimeDir unless this launcher
// made its copy there already. findInit finds the host's container init.
func makeGate(tmp, runtimeDir string, contexts fs.FS, findInit func() (string, error)) (*agentGate, error) {
	f, err := contexts.Open("router-image/forwarder.bin")
	if err != nil {
		return nil, errNoGate
	}
	f.Close()
	init, err := findInit()
	if err != nil {
		return nil, fmt.Errorf("find the container init (catatonit) that podman runs with --init: %w; install catatonit, or set init_path in containers.conf", err)
	}
	path, err := installGateBinary(runtimeDir, contexts)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "gate")
	fifo := filepath.Join(dir, gate.FIFOName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("make the agent's gate %s: %w", fifo, err)
	}
	// Others may read, whatever the umask: the agent's user may be any
	// uid of its image. Writing it does nothing: the launcher never reads.
	for path, mode := range map[string]os.FileMode{dir: 0o755, fifo: 0o644} {
		if err := os.Chmod(path, mode); err != nil {
			return nil, err
		}
	}
	// Read and write: the open does not wait for a reader, and the gate's
	// open for reading does not wait either; the gate sees EOF, and does
	// not run the agent, if the launcher ends without opening it.
	end, err := os.OpenFile(fifo, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the agent's gate %s: %w", fifo, err)
	}
	return &agentGate{dir: dir, binary: path, init: init, fifo: end}, nil
}

// installGateBinary copies the forwarder binary to the runtime dir unless
// this launcher did so already, and returns the copy's path.
func installGateBinary(runtimeDir string, contexts fs.FS) (string, error) {
	name, err := gateBinaryName()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(runtimeDir, gateDirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	// What becomes the agent's init must be the user's alone: the dir
	// and a copy found there.
	if err := ownedAlone(dir, true); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	now := time.Now()
	if err := ownedAlone(path, false); err == nil {
		// Its time says when a session last took it.
		if err := os.Chtimes(path, now, now); err != nil {
			return "", err
		}
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	// Only when missing: the binary's pages are read from the launcher's
	// file on first touch, 10 ms and more here.
	bin, err := fs.ReadFile(contexts, "router-image/forwarder.bin")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".tmp.*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(bin); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// A rename: a session starting meanwhile mounts either copy, whole.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	pruneGateCopies(dir, now.Add(-gateUnusedFor))
	return path, nil
}

// pruneGateCopies removes the copies no session took since before. One a
// container runs stays there for it: its mount holds the file.
func pruneGateCopies(dir string, before time.Time) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		// Its time read again right before: a session may just have
		// taken it.
		if fi, err := os.Lstat(path); err == nil && fi.ModTime().Before(before) {
			_ = os.Remove(path)
		}
	}
}

// ownedAlone checks that path is a directory (dir) or a regular file of
// this user's that nobody else may write.
func ownedAlone(path string, dir bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return &fs.PathError{Op: "check", Path: path, Err: err}
	}
	want, kind := uint32(unix.S_IFREG), "a regular file"
	if dir {
		want, kind = unix.S_IFDIR, "a directory"
	}
	if st.Mode&unix.S_IFMT != want || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s must be %s of yours that nobody else may write (the agent's init comes from there): remove it and start again", path, kind)
	}
	return nil
}

// gateBinaryName names this launcher's copy after the launcher's file
// (device, inode, size, change time): a rebuilt or upgraded launcher makes
// a copy of its own.
func gateBinaryName() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the launcher's own file: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		return "", fmt.Errorf("find the launcher's own file: %w", err)
	}
	return fmt.Sprintf("%x-%x-%x-%x.%x", st.Dev, st.Ino, st.Size, st.Ctim.Sec, st.Ctim.Nsec), nil
}

// hostInit is the container init podman would mount for --init.
func hostInit() (string, error) {
	c, err := config.Default()
	if err != nil {
		return "", err
	}
	return c.FindInitBinary()
}

// open lets the agent's command run. The launcher's end stays open until
// the teardown: a FIFO drops what was written to it once no one has it
// open, and the gate may not have opened its end yet.
func (g *agentGate) open() error {
	if _, err := g.fifo.WriteString(gate.Word); err != nil {
		return fmt.Errorf("open the agent's gate: %w", err)
	}
	return nil
}

// close drops the launcher's end: a gate still closed then ends the
// container without running the agent.
func (g *agentGate) close() { g.closing.Do(func() { g.fifo.Close() }) }

// mounts are the agent container's mounts the gate needs.
func (g *agentGate) mounts() []spec.Mount {
	return []spec.Mount{
		{Type: "bind", Source: g.init, Destination: gate.InitInAgent, Options: []string{"ro"}},
		{Type: "bind", Source: g.dir, Destination: gate.DirInAgent, Options: []string{"ro"}},
	}
}
