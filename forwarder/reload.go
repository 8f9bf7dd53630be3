package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/filestamp"
)

// forwardsPoll is how often FORWARDS_FILE is looked at: the launcher
// rewrites it when the allowlist changes, and the change should reach the
// agent well within a second.
const forwardsPoll = 100 * time.Millisecond

// forwardsFile is FORWARDS_FILE: the same syntax as FORWARDS, read at
// start and then whenever it changes.
type forwardsFile struct {
	path string
	// every is how often it is looked at.
	every time.Duration
	stamp filestamp.Stamp
	sum   [32]byte
	// link is the preamble its TCP pairs send first (LINK_KEY), if any.
	link []byte
}

// read returns the file's forwards and whether its content changed since
// the last read; a file whose content did not change is not parsed again.
func (f *forwardsFile) read() ([]forward, bool, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, false, fmt.Errorf("cannot read FORWARDS_FILE: %w", err)
	}
	st := filestamp.Of(fi)
	if st == f.stamp {
		return nil, false, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, false, fmt.Errorf("cannot read FORWARDS_FILE: %w", err)
	}
	// The stamp is from before the read: if the file changed meanwhile,
	// the next look reads it again.
	f.stamp = st
	sum := sha256.Sum256(b)
	if sum == f.sum {
		return nil, false, nil
	}
	f.sum = sum
	fs, err := parseForwards(string(b))
	if err != nil {
		return nil, true, fmt.Errorf("FORWARDS_FILE %s: %w", f.path, err)
	}
	return linked(fs, f.link), true, nil
}

// relays owns the listeners and every relay accepted through them. A
// listener whose pair is removed is closed together with its open relays:
// a host taken off the allowlist must stop receiving at once, not when the
// agent's connection to it ends.
type relays struct {
	ctx context.Context
	log io.Writer
	wg  sync.WaitGroup // accept loops and relays

	mu     sync.Mutex
	open   map[netip.AddrPort]*listener
	want   []forward
	failed map[netip.AddrPort]string // listen errors already logged
	// followed is closed once the file is no longer looked at.
	followed chan struct{}
}

func newRelays(ctx context.Context, log io.Writer) *relays {
	return &relays{ctx: ctx, log: log, open: map[netip.AddrPort]*listener{}, failed: map[netip.AddrPort]string{}}
}

// key makes 127.0.0.1 and ::ffff:127.0.0.1 one address, as the kernel does.
func key(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

func (r *relays) start(l listener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startLocked(l)
}

func (r *relays) startLocked(l listener) {
	l.ctx, l.cancel = context.WithCancel(r.ctx)
	l.open = new(atomic.Int64)
	l.log = r.log
	r.open[key(l.ln.Addr().(*net.TCPAddr).AddrPort())] = &l
	r.wg.Go(func() { acceptLoop(&l, &r.wg) })
}

// update makes the listeners those of fs: it closes the listeners of pairs
// that are gone or now point elsewhere, and every relay they accepted,
// keeps the unchanged ones with their relays and opens the new ones.
func (r *relays) update(fs []forward) {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := map[netip.AddrPort]forward{}
	for _, f := range fs {
		want[key(f.listen)] = f
	}
	for addr, l := range r.open {
		if f, ok := want[addr]; ok && f.target == l.target && f.socket == l.socket && f.tls == l.tls {
			continue
		}
		_ = l.ln.Close()
		n := l.open.Load()
		if !mutated("deny-cut") {
			// hack/mutation-check turns this off: a removed pair's open
			// relays then live on.
			l.cancel()
		}
		delete(r.open, addr)
		fmt.Fprintf(r.log, "forwarder: stopped listening on %s; closed %s\n", addr, plural(n, "open relay"))
	}
	for addr := range r.failed {
		if _, ok := want[addr]; !ok {
			delete(r.failed, addr)
		}
	}
	r.want = fs
	r.openMissingLocked()
}

// openMissingLocked opens the wanted listeners that are not open: new
// ones, and ones that failed before (a process of the agent may have held
// the address for a while). Each failure is logged once.
func (r *relays) openMissingLocked() {
	for _, f := range r.want {
		k := key(f.listen)
		if _, ok := r.open[k]; ok {
			continue
		}
		ln, err := listen(f)
		if err != nil {
			if r.failed[k] != err.Error() {
				r.failed[k] = err.Error()
				fmt.Fprintf(r.log, "forwarder: %v; trying again\n", err)
			}
			continue
		}
		delete(r.failed, k)
		r.startLocked(listener{ln: ln, forward: f})
		fmt.Fprintf(r.log, "forwarder: listening on %s, forwarding to %s\n", ln.Addr(), f.describe())
	}
}

// follow looks at file every file.every until ctx ends and applies each
// change that parses. A change that does not parse is logged once and
// the listeners stay as they are.
func (r *relays) follow(file *forwardsFile, current []forward) {
	r.mu.Lock()
	r.want = current
	r.followed = make(chan struct{})
	r.mu.Unlock()
	go func() {
		defer close(r.followed)
		tick := time.NewTicker(file.every)
		defer tick.Stop()
		lastErr := ""
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-tick.C:
			}
			fs, changed, err := file.read()
			switch {
			case err != nil:
				if err.Error() != lastErr {
					lastErr = err.Error()
					fmt.Fprintf(r.log, "forwarder: %v; keeping the current listeners\n", err)
				}
			case changed:
				lastErr = ""
				r.update(fs)
				fmt.Fprintf(r.log, "forwarder: reloaded %s: %d listeners\n", file.path, r.count())
			default:
				r.mu.Lock()
				r.openMissingLocked()
				r.mu.Unlock()
			}
		}
	}()
}

func (r *relays) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// wait, once ctx has ended, stops following the file, closes every
// listener and returns when every accept loop and relay is gone.
func (r *relays) wait() {
	r.mu.Lock()
	followed := r.followed
	r.mu.Unlock()
	if followed != nil {
		<-followed
	}
	r.mu.Lock()
	for addr, l := range r.open {
		_ = l.ln.Close()
		l.cancel()
		delete(r.open, addr)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
