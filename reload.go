package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
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
	apply            func([]entry) error
	warn             func(format string, a ...any)

	current []entry         // what the session runs with
	stamp   filestamp.Stamp // of the last read; zero forces a read
	sum     [32]byte        // of the last read content
	warned  string          // the last warning, not repeated until something changes
}

// watchAllowlist polls the allowlist at path until ctx ends. A change that
// parses and differs from current is passed to apply; one that does not
// parse is refused with a warning, and the session keeps its list.
func watchAllowlist(ctx context.Context, path string, current []entry, apply func([]entry) error, warn func(string, ...any)) {
	w := &allowlistWatcher{path: path, interval: watchInterval, settle: watchSettle, apply: apply, warn: warn, current: current}
	w.run(ctx)
}

// midSessionWarner warns on out while the agent holds the terminal: every
// line gets the prefix, and on a terminal, which the agent's attach has
// put in raw mode, lines end in "\r\n" and start on a line of their own.
func midSessionWarner(out io.Writer) func(string, ...any) {
	raw := isTerminal(out)
	return func(format string, a ...any) {
		msg := "agent-sandbox: " + strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", "\nagent-sandbox: ") + "\n"
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
		w.poll()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// poll reads the file if its stamp changed and applies what it says.
func (w *allowlistWatcher) poll() {
	st, err := w.settled()
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
	entries, err := parseAllowlistFrom(bytes.NewReader(b), w.path)
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

// settled stats the file twice, settle apart, and reports the stamp only
// if both agree; otherwise the zero stamp, which the last read never has
// unless it too failed, so the next poll looks again.
func (w *allowlistWatcher) settled() (filestamp.Stamp, error) {
	fi, err := os.Stat(w.path)
	if err == nil && filestamp.Of(fi) == w.stamp {
		return w.stamp, nil
	}
	// A file that is gone, or just changed, may be in the middle of an
	// editor's save: give it a moment before believing it.
	time.Sleep(w.settle)
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

// routerFiles writes one session's router and forwarder config into its
// temp dir, which the router and the forwarder mount read-only at
// /etc/router and poll: dnsmasq.conf, nginx.conf and forwards.
type routerFiles struct {
	dir, routerIP string

	// creds is what the router adds credentials for, fixed for the
	// session; the allowlist decides which of them are served.
	creds credPlan

	mu      sync.Mutex
	plan    routerPlan
	cursor  planCursor
	applied []entry
}

func newRouterFiles(dir, routerIP string) *routerFiles {
	return &routerFiles{dir: dir, routerIP: routerIP, cursor: firstCursor}
}

// apply renders entries and replaces the three files. Each file is
// replaced by rename, so a reader sees the old one or the new one, never
// a partial one. nginx.conf goes first and dnsmasq.conf last: a new name
// should resolve only once its ports are served.
func (r *routerFiles) apply(entries []entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, cursor, err := replan(r.plan, r.cursor, entries)
	if err != nil {
		return err
	}
	p.injections, p.trustedCA = r.creds.active(entries), r.creds.trustedCA()
	for _, f := range []struct{ name, body string }{
		{"nginx.conf", p.nginxConf(r.routerIP)},
		{"forwards", p.forwards(r.routerIP) + "\n"},
		{"dnsmasq.conf", p.dnsmasqConf(r.routerIP)},
	} {
		if err := replaceFile(r.dir, f.name, f.body); err != nil {
			return err
		}
	}
	// The router and the forwarder read as other uids of the user
	// namespace.
	if err := os.Chmod(r.dir, 0o755); err != nil {
		return err
	}
	r.plan, r.cursor, r.applied = p, cursor, entries
	return nil
}

// entries is the list the session runs with now.
func (r *routerFiles) entries() []entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// replaceFile writes dir/name through a temp file in the same directory
// and a rename.
func replaceFile(dir, name, body string) (err error) {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write the router config: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
			err = fmt.Errorf("cannot write the router config %s: %w; check the space left in %s", name, err, dir)
		}
	}()
	if _, err = tmp.WriteString(body); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// planCursor is where the next new host's loopback address (as an index:
// 127.0.i>>8.i&255) and the next new entry's router port are taken from.
// It only moves forward, so that within a session an address or port is
// not handed to a second host while the space lasts: a program that
// resolved a removed host earlier must not reach another one through it.
type planCursor struct{ addr, port int }

var firstCursor = planCursor{addr: 2, port: firstPortEntryPort}

const (
	lastAddrIndex = 0xffff // 127.0.255.255
	lastPort      = 65535
)

func loopbackAt(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i)})
}

// replan plans entries after prev: every host that keeps a port entry
// keeps its loopback address and every entry that stays keeps its router
// port, so that a reload moves nothing that open connections or cached
// answers use. New ones are given in sorted order from cursor; from an
// empty prev that is exactly planRouter's plan.
func replan(prev routerPlan, cursor planCursor, entries []entry) (routerPlan, planCursor, error) {
	p := routerPlan{entries: entries, loopback: map[string]netip.Addr{}, routerPort: map[entry]int{}}
	var portEntries []entry
	for _, e := range entries {
		if e.Port != tlsPort {
			portEntries = append(portEntries, e)
		}
	}
	if len(portEntries) > maxPortEntries {
		return p, cursor, fmt.Errorf("the allowlist has %d host:port entries; at most %d are supported", len(portEntries), maxPortEntries)
	}
	sort.Slice(portEntries, func(i, j int) bool {
		if portEntries[i].Host != portEntries[j].Host {
			return portEntries[i].Host < portEntries[j].Host
		}
		return portEntries[i].Port < portEntries[j].Port
	})
	usedAddr, usedPort := map[netip.Addr]bool{}, map[int]bool{}
	for _, e := range portEntries {
		if a, ok := prev.loopback[e.Host]; ok {
			p.loopback[e.Host] = a
			usedAddr[a] = true
		}
		if port, ok := prev.routerPort[e]; ok {
			p.routerPort[e] = port
			usedPort[port] = true
		}
	}
	for _, e := range portEntries {
		if _, ok := p.loopback[e.Host]; !ok {
			a, err := nextFree(&cursor.addr, lastAddrIndex, 2, func(i int) bool { return usedAddr[loopbackAt(i)] })
			if err != nil {
				return p, cursor, errors.New("no loopback address is left for a new host:port entry; restart the session")
			}
			p.loopback[e.Host] = loopbackAt(a)
			usedAddr[loopbackAt(a)] = true
		}
		if _, ok := p.routerPort[e]; !ok {
			port, err := nextFree(&cursor.port, lastPort, firstPortEntryPort, func(i int) bool { return usedPort[i] })
			if err != nil {
				return p, cursor, errors.New("no router port is left for a new host:port entry; restart the session")
			}
			p.routerPort[e] = port
			usedPort[port] = true
		}
	}
	return p, cursor, nil
}

// nextFree takes *next if it is within last, else the lowest index from
// first that used does not claim: only a session that went through the
// whole space reuses what an earlier list had.
func nextFree(next *int, last, first int, used func(int) bool) (int, error) {
	if *next <= last {
		i := *next
		*next++
		return i, nil
	}
	for i := first; i <= last; i++ {
		if !used(i) {
			return i, nil
		}
	}
	return 0, errors.New("exhausted")
}
