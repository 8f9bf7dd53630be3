package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/allowlist"
	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
	"github.com/agent-sandbox/agent-sandbox/internal/iostreams"
)

const (
	// watchInterval is how often a running session looks at its
	// allowlist; with the router's and the forwarder's own polling an edit
	// takes effect well within a second.
	watchInterval = 200 * time.Millisecond
	// watchSettle is how long a changed file must stay unchanged before it
	// is read, so that an editor writing in place is not caught halfway.
	watchSettle = 50 * time.Millisecond
)

// allowlistWatcher follows one session's allowlist file and hands every
// change that parses to apply.
type allowlistWatcher struct {
	path             string
	interval, settle time.Duration
	apply            func([]allowlist.Entry) error
	warn             func(format string, a ...any)

	current []allowlist.Entry // what the session runs with
	stamp   filestamp.Stamp   // of the last read; zero forces a read
	sum     [32]byte          // of the last read content
	warned  string            // the last warning, not repeated until something changes
}

// watchAllowlist polls the allowlist at path until ctx ends. A change that
// parses and differs from current is passed to apply; one that does not
// parse is refused with a warning, and the session keeps its list. read
// is the sum of the read current came from (zero: none), so that a file
// unchanged since is not parsed again.
func watchAllowlist(ctx context.Context, path string, current []allowlist.Entry, read allowlistRead, apply func([]allowlist.Entry) error, warn func(string, ...any)) {
	w := &allowlistWatcher{path: path, interval: watchInterval, settle: watchSettle, apply: apply, warn: warn, current: current, sum: read.sum}
	w.run(ctx)
}

// midSessionWarner warns on out while the agent holds the terminal: every
// line gets the prefix, and on a terminal, which the agent's attach has
// put in raw mode, lines end in "\r\n" and start on a line of their own.
func midSessionWarner(out io.Writer) func(string, ...any) {
	raw := iostreams.IsTerminal(out)
	return func(format string, a ...any) {
		msg := iostreams.Prefixed(fmt.Sprintf(format, a...))
		if raw {
			msg = "\r\n" + strings.ReplaceAll(msg, "\n", "\r\n")
		}
		fmt.Fprint(out, msg)
	}
}

func (w *allowlistWatcher) run(ctx context.Context) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		// The first look is at once: the file may have changed while the
		// session started, after the launcher parsed it.
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// poll reads the file if its stamp changed and applies what it says;
// nothing once ctx ends.
func (w *allowlistWatcher) poll(ctx context.Context) {
	st, err := w.settled(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		w.forget(err)
		return
	}
	if st == w.stamp {
		return
	}
	b, err := os.ReadFile(w.path)
	if err != nil {
		w.forget(err)
		return
	}
	w.stamp = st
	sum := sha256.Sum256(b)
	if sum == w.sum {
		return
	}
	w.sum = sum
	entries, err := allowlist.Parse(bytes.NewReader(b), w.path)
	if err != nil {
		w.refuse(fmt.Sprintf("the allowlist changed but does not parse; this session keeps its previous list:\n%v", err))
		return
	}
	w.warned = ""
	if slices.Equal(entries, w.current) {
		return
	}
	if err := w.apply(entries); err != nil {
		w.refuse(fmt.Sprintf("cannot apply the changed allowlist %s: %v; this session keeps its previous list", w.path, err))
		return
	}
	w.current = entries
}

// settled stats the file twice, settle apart, and reports its stamp only
// if both agree; otherwise the last read's, so that this poll reads
// nothing and the next one looks again. The moment ends with ctx: the
// session's end waits for the watcher, and a short session's would wait
// for its first look (a gated agent's `true` is done well within it).
func (w *allowlistWatcher) settled(ctx context.Context) (filestamp.Stamp, error) {
	fi, err := os.Stat(w.path)
	if err == nil && filestamp.Of(fi) == w.stamp {
		return w.stamp, nil
	}
	// A file that is gone, or just changed, may be in the middle of an
	// editor's save: give it a moment before believing it.
	select {
	case <-ctx.Done():
		return w.stamp, nil
	case <-time.After(w.settle):
	}
	fi2, err2 := os.Stat(w.path)
	if err2 != nil {
		return filestamp.Stamp{}, err2
	}
	if err != nil || filestamp.Of(fi) != filestamp.Of(fi2) {
		return w.stamp, nil
	}
	return filestamp.Of(fi2), nil
}

// forget makes the next poll read and check the file afresh, as a new
// edit, once it is back.
func (w *allowlistWatcher) forget(err error) {
	w.stamp, w.sum = filestamp.Stamp{}, [32]byte{}
	w.refuse(fmt.Sprintf("cannot read the allowlist (%v); this session keeps its previous list until the file is back", err))
}

func (w *allowlistWatcher) refuse(msg string) {
	if msg == w.warned {
		return
	}
	w.warned = msg
	w.warn("%s", msg)
}

// replaceFile replaces path with data, given mode, through a temp file in
// the same directory and a rename, so that a reader sees the old file or
// the new one, never a partial one. durable also syncs the data and the
// rename to disk, so that a crash leaves one of them too. made says
// whether the temp file was made: if not, the directory refused it.
func replaceFile(path string, data []byte, mode os.FileMode, durable bool) (made bool, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return true, err
	}
	if err = tmp.Chmod(mode); err != nil {
		return true, err
	}
	if durable {
		if err = tmp.Sync(); err != nil {
			return true, err
		}
	}
	if err = tmp.Close(); err != nil {
		return true, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return true, err
	}
	if durable {
		// The rename itself is durable only once the directory is synced.
		if d, derr := os.Open(dir); derr == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	return true, nil
}
