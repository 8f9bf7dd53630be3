package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
)

const (
	// configPoll is how often the config files are looked at: the
	// launcher rewrites them when the allowlist changes, and the change
	// should reach the agent well within a second.
	configPoll = 100 * time.Millisecond
	// checkTimeout bounds one `nginx -t` or `dnsmasq --test`.
	checkTimeout = 10 * time.Second
)

// watched ties a config file to the child that reads it.
type watched struct {
	path  string // the launcher's file
	child string
	// live, when set, is where the child reads the file instead:
	// rewrite(content) is written next to it, checked, and only then
	// renamed into place, so that the child runs exactly what passed.
	live    string
	rewrite func([]byte) []byte
	// check is the command that exits 0 when the file at path is fit to
	// run: a file it rejects never reaches the child, which keeps what it
	// has.
	check func(path string) []string
	// signal makes the child re-read the file; 0 means it has to be
	// restarted instead.
	signal syscall.Signal
	// cutDropped: a change that drops a line of the file the child runs
	// may have taken away what its open connections were let in by, so
	// the reload ends the workers that hold them (see cut.go).
	cutDropped bool
}

// defaultWatches: nginx re-reads its config on SIGHUP, and its old worker
// finishes the connections it has, unless the new config dropped an
// entry (cut.go). dnsmasq re-reads only its hosts and
// servers files on SIGHUP, not the address= and host-record= lines of its
// config, so it is restarted, behind the DNS front that keeps the router's
// address answering meanwhile; it runs from a copy that listens where the
// front sends queries. nginx goes first, so that a new name resolves only
// once its ports are served.
func defaultWatches(configDir, runDir string, backend netip.AddrPort) []watched {
	return []watched{{
		path:       filepath.Join(configDir, "nginx.conf"),
		child:      "nginx",
		check:      func(path string) []string { return []string{"nginx", "-t", "-q", "-c", path} },
		signal:     syscall.SIGHUP,
		cutDropped: true,
	}, {
		path:    filepath.Join(configDir, "dnsmasq.conf"),
		child:   "dnsmasq",
		live:    filepath.Join(runDir, "dnsmasq.conf"),
		rewrite: func(b []byte) []byte { return behindFront(b, backend) },
		check:   func(path string) []string { return []string{"dnsmasq", "--test", "--conf-file=" + path} },
	}}
}

// behindFront moves dnsmasq from the address the launcher gave it to
// backend, where only the DNS front talks to it. Everything else of the
// launcher's config stays as it is.
func behindFront(conf []byte, backend netip.AddrPort) []byte {
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(conf), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "listen-address=") || strings.HasPrefix(t, "port=") {
			continue
		}
		out.WriteString(line)
	}
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	fmt.Fprintf(&out, "# routerd: behind its DNS front on the router's address\nlisten-address=%s\nport=%d\n", backend.Addr(), backend.Port())
	return out.Bytes()
}

// configWatcher polls the watched files and passes each change that its
// check accepts to the supervisor.
type configWatcher struct {
	files  []watched
	stamps []filestamp.Stamp
	sums   [][32]byte
	// running is, for files with cutDropped, the content the child runs.
	running [][]byte
	// runCheck runs a check and returns its output; tests replace it.
	runCheck func(ctx context.Context, argv []string) (string, error)
	log      *log.Logger
}

func newConfigWatcher(files []watched, logger *log.Logger) *configWatcher {
	return &configWatcher{
		files:    files,
		stamps:   make([]filestamp.Stamp, len(files)),
		sums:     make([][32]byte, len(files)),
		running:  make([][]byte, len(files)),
		runCheck: runCheck,
		log:      logger,
	}
}

// prepare makes the live copies and records the files as the children
// are about to read them, so that only later changes count. It runs
// before the children start: a change in between costs one needless
// reload, not a missed one.
func (w *configWatcher) prepare() error {
	for i, f := range w.files {
		fi, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w (the launcher mounts it)", f.path, err)
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w (the launcher mounts it)", f.path, err)
		}
		if f.live != "" {
			if err := writeLive(f.live, f.rewrite(b)); err != nil {
				return err
			}
		}
		w.stamps[i], w.sums[i] = filestamp.Of(fi), sha256.Sum256(b)
		if f.cutDropped {
			w.running[i] = b
		}
	}
	return nil
}

// dropsLine says whether a line of old is missing from new. The
// launcher's configs only gain lines when hosts are added; anything else
// is taken to narrow what the child lets through.
func dropsLine(old, new []byte) bool {
	have := map[string]bool{}
	for _, l := range strings.Split(string(new), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, l := range strings.Split(string(old), "\n") {
		if !have[strings.TrimSpace(l)] {
			return true
		}
	}
	return false
}

// writeLive replaces path through a temp file and a rename.
func writeLive(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// follow polls every interval until ctx ends.
func (w *configWatcher) follow(ctx context.Context, every time.Duration, out chan<- reload) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, r := range w.poll(ctx) {
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}
}

// poll returns a reload for each file whose content changed and passed
// its check.
func (w *configWatcher) poll(ctx context.Context) []reload {
	var out []reload
	for i, f := range w.files {
		fi, err := os.Stat(f.path)
		if err != nil || filestamp.Of(fi) == w.stamps[i] {
			// A file that is gone is the launcher tearing the session
			// down; the children keep what they have.
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		w.stamps[i] = filestamp.Of(fi)
		sum := sha256.Sum256(b)
		if sum == w.sums[i] {
			continue
		}
		w.sums[i] = sum
		name := filepath.Base(f.path)
		target := f.path
		if f.live != "" {
			target = f.live + ".new"
			if err := os.WriteFile(target, f.rewrite(b), 0o644); err != nil {
				w.log.Printf("%s changed but cannot be staged, keeping the running config: %v", name, err)
				continue
			}
		}
		if msg, err := w.runCheck(ctx, f.check(target)); err != nil {
			w.log.Printf("%s changed but %s rejects it (%v), keeping the running config:\n%s", name, f.child, err, strings.TrimSpace(msg))
			continue
		}
		if f.live != "" {
			if err := os.Rename(target, f.live); err != nil {
				w.log.Printf("%s changed but cannot be put in place, keeping the running config: %v", name, err)
				continue
			}
		}
		r := reload{child: f.child, file: name, signal: f.signal}
		if f.cutDropped {
			r.cut = dropsLine(w.running[i], b)
			w.running[i] = b
		}
		out = append(out, r)
	}
	return out
}

func runCheck(ctx context.Context, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}
